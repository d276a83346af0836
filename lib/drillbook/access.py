"""`drillbook target check`: can drillbook reach this target, and which runbooks may it run there?

Read-only. It reaches the gateway, checks every tenant key with a read (a session that does not
exist must be answered "not found", not "unauthorised"), asks the workload for each tier's
status, and on kubernetes asks the API server (SelfSubjectAccessReview) whether the runner may
do what each runbook needs in the namespaces where it acts. Nothing is created, changed or deleted.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from dataclasses import dataclass, field

import httpx

from drillbook.profile import LoadedProfile

def declared_needs() -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    """Every declared runbook with what it does to a target: drills first, then on-call runbooks."""
    from drillbook.scenarios import REGISTRY

    return [(s.name, s.needs) for s in sorted(REGISTRY.values(), key=lambda s: s.oncall)]


@dataclass
class Finding:
    subject: str
    ok: bool
    detail: str


@dataclass
class TargetReport:
    """What the check found: reachability and keys, and per runbook whether it can run and why not."""

    profile: str
    kind: str
    reachability: list[Finding] = field(default_factory=list)
    runbooks: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.reachability) and all(f.ok for f in self.runbooks)

    def runbook(self, name: str) -> Finding:
        return next(f for f in self.runbooks if f.subject == name)


def check_tenant_keys(gateway: str, keys: dict[str, str], profile: LoadedProfile) -> list[Finding]:
    """One read per tenant of a session that cannot exist: 404 means the key was accepted."""
    api, path = profile.spec.api, profile.spec.delivery.readback_path
    findings = []
    with httpx.Client(base_url=gateway, timeout=10.0) as http:
        for tenant, key in keys.items():
            probe = path.replace("{session}", f"drillbook-check-{uuid.uuid4().hex[:8]}")
            try:
                status = http.get(probe, headers=api.auth(key)).status_code
            except httpx.HTTPError as error:
                findings.append(Finding(f"tenant {tenant}", False, f"no answer: {type(error).__name__}"))
                continue
            if status in (401, 403):
                findings.append(Finding(f"tenant {tenant}", False, f"key refused (HTTP {status})"))
            elif status in (200, 404):
                findings.append(Finding(f"tenant {tenant}", True, f"key accepted (HTTP {status} for an unknown session)"))
            else:
                findings.append(Finding(f"tenant {tenant}", False, f"unexpected HTTP {status} on {probe}"))
    return findings


def check_target(profile: LoadedProfile, state_dir: Path | None = None) -> TargetReport:
    """Everything `drillbook target check` reports, touching nothing."""
    from drillbook.delivery import NOT_VERIFIABLE, available_verifiers
    from drillbook.targets import check_reachable, target_for

    report = TargetReport(profile.name, profile.kind)
    try:
        target = target_for(profile, state_dir)
        gateway, keys = target.gateway()
        check_reachable(gateway)
    except Exception as error:  # noqa: BLE001 - reported as the first finding
        report.reachability.append(Finding("gateway", False, str(error)))
        return report
    report.reachability.append(Finding("gateway", True, f"{gateway} accepts connections"))
    report.reachability.extend(check_tenant_keys(gateway, keys, profile))
    verifier = profile.spec.delivery.verifier
    if verifier == NOT_VERIFIABLE:
        report.reachability.append(Finding("delivery", False, "no verifier: delivery checks are not verifiable, "
                                                              "so no runbook can PASS on them"))
    elif verifier not in available_verifiers():
        report.reachability.append(Finding("delivery", False, f"verifier {verifier!r} is not installed "
                                                              f"(drillbook.verifiers: {', '.join(available_verifiers())})"))
    else:
        report.reachability.append(Finding("delivery", True, f"verifier {verifier!r}"))
    try:
        for runbook, needs in declared_needs():
            why = target.refusals(needs)
            report.runbooks.append(Finding(runbook, not why, "; ".join(why) or target.granted))
    except Exception as error:  # noqa: BLE001 - a target that cannot answer (an API server down) is a finding
        report.runbooks = []
        report.reachability.append(Finding(f"{profile.kind} API", False, f"{type(error).__name__}: {error}"[:300]))
    return report
