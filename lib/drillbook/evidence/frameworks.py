"""Control mappings: which framework controls (DORA, SOC 2, ISO/IEC 27001, ISO 22301, NIST SP
800-53, PCI DSS) drillbook's controls give evidence for, and what the runs of a period say of each.

A mapping is YAML (`mappings/frameworks.yaml` is shipped; a team gives its own with `--mapping`):
frameworks, each with requirements, each naming the drillbook controls (`evidenced_by`) whose runs
are its evidence. `requirement_statuses` is a pure function of the period's rows: per
requirement, its runs, how many passed, the latest run of each drillbook control, and its state:

- MET: every control it names has runs in the period and the latest of each passed;
- PARTLY EVIDENCED: the latest run of each control that ran passed, but some named control has no
  run in the period (a gap);
- NOT MET: the latest run of some named control did not pass (FAIL, ERROR, killed, unverified...);
- NO EVIDENCE: no run of any control it names in the period.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from drillbook.config import validation_line
from drillbook.errors import ConfigError
from drillbook.evidence.catalog import RUNNING, BundleRow, run_passed

MET, PARTLY, NOT_MET, NO_EVIDENCE = "MET", "PARTLY EVIDENCED", "NOT MET", "NO EVIDENCE"
# An OSCAL token: a letter or underscore first, then letters, digits, '.', '-', '_'.
TOKEN = re.compile(r"^[A-Za-z_][A-Za-z0-9._-]*$")


class Requirement(BaseModel):
    """One control of a framework and the drillbook controls whose runs evidence it."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    title: str = Field(min_length=1)
    oscal_id: str | None = None
    evidenced_by: list[str] = Field(min_length=1)

    @field_validator("oscal_id")
    @classmethod
    def _token(cls, value: str | None) -> str | None:
        if value is not None and not TOKEN.match(value):
            raise ValueError(f"{value!r} is not an OSCAL token (a letter first, then letters, digits, '.', '-', '_')")
        return value


class Framework(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, pattern=TOKEN.pattern)
    title: str = Field(min_length=1)
    requirements: list[Requirement] = Field(min_length=1)


class ControlMapping(BaseModel):
    model_config = ConfigDict(extra="forbid")

    frameworks: list[Framework] = Field(min_length=1)
    source: str = ""  # where it was read from, for the page and the OSCAL document

    def oscal_id(self, framework: Framework, requirement: Requirement) -> str:
        """The requirement's id in OSCAL: its own oscal_id, else a token of framework and id."""
        if requirement.oscal_id:
            return requirement.oscal_id
        return f"{framework.id}-" + re.sub(r"[^A-Za-z0-9._-]+", "-", requirement.id).strip("-").lower()


def known_controls() -> set[str]:
    """Every control a run can be filed under: each scenario's, on-call runbooks included."""
    from drillbook.scenarios import REGISTRY

    return {declared.control for declared in REGISTRY.values()}


def load_mapping(path: Path | None = None) -> ControlMapping:
    """The mapping at path (None: the shipped one), checked: one ConfigError line for a file that
    cannot be read, is not a mapping, or names a control drillbook does not know."""
    where = str(path) if path is not None else "the shipped mapping"
    try:
        text = path.read_text(encoding="utf-8") if path is not None else \
            resources.files("drillbook.evidence").joinpath("mappings/frameworks.yaml").read_text(encoding="utf-8")
        data = yaml.safe_load(text)
    except OSError as error:
        raise ConfigError(f"cannot read the control mapping {where}: {error.strerror or error}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"the control mapping {where} is not YAML: {str(error).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"the control mapping {where} is not a mapping with a 'frameworks' list")
    try:
        mapping = ControlMapping.model_validate({**data, "source": str(path) if path is not None else
                                                 "drillbook/evidence/mappings/frameworks.yaml (shipped)"})
    except ValidationError as error:
        raise ConfigError(f"the control mapping {where}: {validation_line(error)}") from None
    known = known_controls()
    seen: set[str] = set()
    for framework in mapping.frameworks:
        if framework.id in seen:
            raise ConfigError(f"the control mapping {where} names framework {framework.id!r} twice")
        seen.add(framework.id)
        ids = [mapping.oscal_id(framework, r) for r in framework.requirements]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:
            raise ConfigError(f"the control mapping {where}: framework {framework.id} gives id {twice[0]!r} to two "
                              "requirements")
        for requirement in framework.requirements:
            unknown = sorted(set(requirement.evidenced_by) - known)
            if unknown:
                raise ConfigError(f"the control mapping {where}: {framework.id} {requirement.id} names "
                                  f"{', '.join(repr(u) for u in unknown)}, which is no drillbook control (known: "
                                  f"{', '.join(sorted(known))})")
    return mapping


@dataclass
class ControlEvidence:
    """One drillbook control's runs in the period, as one requirement reads them."""

    control: str
    runs: list[BundleRow] = field(default_factory=list)
    latest: BundleRow | None = None
    latest_passed: bool = False


@dataclass
class RequirementStatus:
    framework: Framework
    requirement: Requirement
    oscal_id: str
    controls: list[ControlEvidence]
    state: str
    runs: list[BundleRow]
    passed: int

    @property
    def gaps(self) -> list[str]:
        """The controls it names that have no run in the period."""
        return [c.control for c in self.controls if not c.runs]

    @property
    def latest(self) -> BundleRow | None:
        dated = [c.latest for c in self.controls if c.latest is not None]
        return max(dated, key=lambda r: r.finished_at) if dated else None

    @property
    def not_passed(self) -> list[ControlEvidence]:
        return [c for c in self.controls if c.latest is not None and not c.latest_passed]

    def explain(self) -> str:
        """Why it is in its state, in one line."""
        if self.state == NO_EVIDENCE:
            return f"no run of {', '.join(self.requirement.evidenced_by)} in the period"
        parts = [f"latest {c.control} run did not pass" for c in self.not_passed]
        if self.gaps:
            parts.append(f"no run of {', '.join(self.gaps)} in the period")
        return "; ".join(parts) or "the latest run of every control it names passed"


def state_of(controls: list[ControlEvidence]) -> str:
    ran = [c for c in controls if c.latest is not None]
    if not ran:
        return NO_EVIDENCE
    if any(not c.latest_passed for c in ran):
        return NOT_MET
    return MET if len(ran) == len(controls) else PARTLY


def requirement_statuses(mapping: ControlMapping, rows: list[BundleRow], failed: set[str]) -> list[RequirementStatus]:
    """Each requirement of each framework, judged from the period's rows (a run still going is
    not counted; a bundle that fails verification counts as a run that did not pass)."""
    counted = [r for r in rows if r.status != RUNNING]
    statuses = []
    for framework in mapping.frameworks:
        for requirement in framework.requirements:
            controls = []
            for control in dict.fromkeys(requirement.evidenced_by):
                runs = sorted((r for r in counted if r.control == control), key=lambda r: r.finished_at, reverse=True)
                latest = runs[0] if runs else None
                controls.append(ControlEvidence(control, runs, latest,
                                                latest is not None and run_passed(latest, failed)))
            runs = [r for c in controls for r in c.runs]
            statuses.append(RequirementStatus(framework, requirement, mapping.oscal_id(framework, requirement),
                                              controls, state_of(controls), runs,
                                              sum(run_passed(r, failed) for r in runs)))
    return statuses
