"""The period's evidence as OSCAL assessment results, for the GRC tools auditors import into.

Built with compliance-trestle's OSCAL models (their own validation runs as the document is made):
one result for the period, whose reviewed controls are the framework controls of the control
mapping; one observation per run, with its bundle's manifest digest as the evidence link; one
finding per framework control, its objective status `satisfied` only when the mapping's state is
MET; one open risk per framework control whose latest evidence did not pass; and one risk per
remediation item (drillbook.evidence.remediation), open or closed, with its owner, due date and
action as the response. UUIDs are
derived from what they name (the bundle's manifest digest, the control id), so the same period
exported twice names its parts alike.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from drillbook import __version__
from drillbook.evidence.catalog import BundleRow
from drillbook.evidence.frameworks import MET, NO_EVIDENCE, ControlMapping, RequirementStatus, requirement_statuses
from drillbook.evidence.catalog import run_passed, shown_verdict
from drillbook.evidence.report import PeriodEvidence, moment_of

if TYPE_CHECKING:
    from drillbook.evidence.remediation import RemediationItem

NAMESPACE = uuid.UUID("5d7f3c2e-8a53-4c36-9f0e-2b2f3f6a9d11")  # drillbook's: uuid5 of what a part names
PROPERTY_NS = "urn:drillbook:oscal"  # the namespace of drillbook's own property names


def _uuid(*parts: str) -> str:
    return str(uuid.uuid5(NAMESPACE, "/".join(parts)))


def _prop(name: str, value: str):
    from trestle.oscal.common import Property

    return Property(name=name, value=value or "-", ns=PROPERTY_NS)


def _observation(row: BundleRow, failed: set[str]):
    from trestle.oscal.common import Observation, RelevantEvidence

    verdict = shown_verdict(row, failed)
    collected = moment_of(row) or datetime.now(timezone.utc)
    digest = row.manifest_sha256 or "none"
    return Observation(
        uuid=_uuid("observation", row.name, digest), title=f"{row.runbook} on {row.target}: {verdict}",
        description=f"Run {row.run_id} of runbook {row.runbook} (control {row.control}) on target {row.target}: "
                    f"{verdict}, sealed {row.status}." + (f" {row.reason}." if row.reason else ""),
        methods=["TEST"], types=["control-objective"], collected=collected,
        props=[_prop("control", row.control), _prop("runbook", row.runbook), _prop("target", row.target),
               _prop("verdict", verdict), _prop("passed", "true" if run_passed(row, failed) else "false")],
        relevant_evidence=[RelevantEvidence(
            href=f"{row.name}/manifest.json",
            description=f"The sealed evidence bundle {row.name}; its manifest's sha256 is {digest}, as the results "
                        "folder's ledger records it (drillbook verify checks both).",
            props=[_prop("manifest-sha256", digest)])],
    )


def _finding(status: RequirementStatus, observed: dict[str, str], risk: str | None):
    from trestle.oscal.common import (AssociatedRisk, Finding, FindingTarget, ObjectiveStatus, RelatedObservation)

    satisfied = status.state == MET
    return Finding(
        uuid=_uuid("finding", status.framework.id, status.oscal_id),
        title=f"{status.framework.title} {status.requirement.id}: {status.state}",
        description=f"{status.requirement.title}. {status.explain()}; {status.passed} of {len(status.runs)} runs "
                    "in the period passed.",
        props=[_prop("framework", status.framework.id), _prop("state", status.state),
               _prop("evidenced-by", " ".join(status.requirement.evidenced_by))],
        target=FindingTarget(
            type="objective-id", target_id=status.oscal_id, title=f"{status.framework.id} {status.requirement.id}",
            status=ObjectiveStatus(state="satisfied" if satisfied else "not-satisfied",
                                   reason="pass" if satisfied else ("other" if status.state != "NOT MET" else "fail"),
                                   remarks=status.explain())),
        related_observations=[RelatedObservation(observation_uuid=observed[r.name]) for r in status.runs] or None,
        related_risks=[AssociatedRisk(risk_uuid=risk)] if risk else None,
    )


def _risk(status: RequirementStatus, observed: dict[str, str], failed: set[str]):
    from trestle.oscal.common import RelatedObservation, Risk

    missed = [c.latest for c in status.not_passed if c.latest is not None]
    return Risk(
        uuid=_uuid("risk", status.framework.id, status.oscal_id),
        title=f"{status.framework.id} {status.requirement.id}: the latest evidence did not pass",
        description=f"{status.requirement.title}: {status.explain()}.",
        statement="; ".join(f"{row.runbook} on {row.target} ended {shown_verdict(row, failed)}"
                            + (f": {row.reason}" if row.reason else "") for row in missed),
        status="open",
        related_observations=[RelatedObservation(observation_uuid=observed[row.name]) for row in missed],
    )


def _remediation_risk(item: "RemediationItem", observed: dict[str, str], now: datetime):
    """A remediation item as a risk: open (remediating once it has an owner) or closed, its due
    date as the deadline, its action as the planned (or completed) response."""
    from trestle.oscal.common import RelatedObservation, Response, Risk

    runs = [r for r in (item.opened_by, *item.failures, item.closed_by) if r is not None and r.name in observed]
    opened = f"opened by the FAIL of run {item.opened_by.run_id}" if item.opened_by else \
        f"opened by a remediation record of {item.opened_at}"
    closed = f"closed by the passing run {item.closed_by.run_id}" if item.closed_by else "open"
    action = "; ".join(item.actions) or "no action recorded yet"
    status = "closed" if not item.open else ("remediating" if item.owner else "open")
    return Risk(
        uuid=_uuid("remediation", item.key), title=f"Remediation: {item.control} on {item.target}",
        description=f"{opened}; {closed}; {item.age_days(now):.1f} days" + (" (overdue)" if item.overdue(now) else "")
                    + (f". Findings: {'; '.join(item.findings)}" if item.findings else ""),
        statement=f"The {item.control} control on {item.target} owes remediation: {action}.",
        status=status, props=[_prop("owner", item.owner or "none"), _prop("remediation-key", item.key)],
        deadline=datetime.fromisoformat(f"{item.due}T23:59:59+00:00") if item.due else None,
        remediations=[Response(uuid=_uuid("response", item.key), lifecycle="completed" if not item.open else "planned",
                               title=action[:200], description=action,
                               props=[_prop("owner", item.owner or "none")])],
        related_observations=[RelatedObservation(observation_uuid=observed[r.name]) for r in runs] or None,
    )


def assessment_results(evidence: PeriodEvidence, mapping: ControlMapping):
    """The period as an OSCAL AssessmentResults model (trestle.oscal.assessment_results)."""
    from trestle.oscal import OSCAL_VERSION
    from trestle.oscal.assessment_results import AssessmentResults, ImportAp, Result
    from trestle.oscal.common import (BackMatter, ControlSelections, Metadata, Resource, ReviewedControls,
                                      SelectControlById)

    now = datetime.now(timezone.utc)
    rows, failed = evidence.rows, evidence.failed
    statuses = requirement_statuses(mapping, rows, failed)
    observations = [_observation(row, failed) for row in rows]
    observed = {row.name: o.uuid for row, o in zip(rows, observations)}
    risks = {s.oscal_id: _risk(s, observed, failed) for s in statuses if s.not_passed}
    owed = [_remediation_risk(item, observed, now) for item in evidence.remediation()]
    moments = [m for m in (moment_of(r) for r in rows) if m is not None]
    start = evidence.period.since or (min(moments) if moments else now)
    end = evidence.period.until or (max(moments) if moments else now)
    plan = _uuid("mapping", mapping.source)
    selections = [ControlSelections(description=framework.title,
                                    include_controls=[SelectControlById(control_id=mapping.oscal_id(framework, r))
                                                      for r in framework.requirements])
                  for framework in mapping.frameworks]
    gaps = sum(1 for s in statuses if s.state == NO_EVIDENCE)
    result = Result(
        uuid=_uuid("result", str(evidence.results_dir), start.isoformat(), end.isoformat()),
        title="drillbook resilience drills in the period",
        description=f"{len(rows)} runs from {evidence.results_dir}, {len(statuses)} framework controls reviewed, "
                    f"{sum(1 for s in statuses if s.state == MET)} met, {gaps} with no evidence in the period.",
        start=start, end=end,
        reviewed_controls=ReviewedControls(control_selections=selections),
        observations=observations or None, risks=[*risks.values(), *owed] or None,
        findings=[_finding(s, observed, risks[s.oscal_id].uuid if s.oscal_id in risks else None)
                  for s in statuses] or None,
    )
    return AssessmentResults(
        uuid=str(uuid.uuid4()),
        metadata=Metadata(title=f"drillbook assessment results: {evidence.results_dir}", last_modified=now,
                          version=__version__, oscal_version=OSCAL_VERSION),
        import_ap=ImportAp(href=f"#{plan}", remarks="drillbook keeps no OSCAL assessment plan: the plan is the "
                                                    "control mapping in back-matter"),
        results=[result],
        back_matter=BackMatter(resources=[Resource(uuid=plan, title="drillbook control mapping",
                                                   description=f"The control mapping read: {mapping.source}.")]),
    )


def write_oscal(evidence: PeriodEvidence, mapping: ControlMapping, output: Path) -> Path:
    """Write the OSCAL assessment-results JSON document to output."""
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(assessment_results(evidence, mapping).oscal_serialize_json(pretty=True) + "\n",
                      encoding="utf-8")
    return output
