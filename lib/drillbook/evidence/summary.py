"""What a run concluded, as written to a bundle's summary.json: metrics, SLO checks, verdict.

The report reads these; the runbook layer writes them. A check that could not be measured has
value None and fails; a run's verdict is PASS only when every check passed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

def figure(value: float | None, unit: str = "") -> str:
    """A measured figure as people read it: whole numbers whole, others to three or four
    significant digits (1.19s, 0.0123, 2345.7ms), never sixteen; None is "not measured"."""
    if value is None:
        return "not measured"
    if float(value).is_integer():
        shown = str(int(value))
    elif abs(value) >= 100:
        shown = f"{value:.1f}"
    else:
        shown = f"{value:.3g}"
    return f"{shown}{unit}"


Verdict = Literal["PASS", "FAIL", "ERROR", "ABORTED", "INTERRUPTED"]
Comparison = Literal["<=", "<", ">=", ">", "=="]


class SloCheck(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    comparison: Comparison
    threshold: float
    value: float | None
    unit: str = ""
    note: str = ""  # why the value is missing (every None carries its reason), or what the reader must know

    @property
    def passed(self) -> bool:
        if self.value is None:
            return False
        return {"<=": self.value <= self.threshold, "<": self.value < self.threshold,
                ">=": self.value >= self.threshold, ">": self.value > self.threshold,
                "==": self.value == self.threshold}[self.comparison]

    def shown_value(self) -> str:
        """The value as people read it; a missing one with its reason."""
        if self.value is None:
            return f"not measured ({self.note})" if self.note else "not measured"
        return figure(self.value, self.unit)

    def shown_threshold(self) -> str:
        return figure(self.threshold, self.unit)

    def describe(self) -> str:
        return (f"{self.name} {self.shown_value()} {self.comparison} {self.shown_threshold()}: "
                f"{'pass' if self.passed else 'FAIL'}")


class RunSummary(BaseModel):
    model_config = ConfigDict(extra="allow")

    runbook: str
    control: str = Field(description="ha, isolation, cold-start, restore, or another name")
    verdict: Verdict
    metrics: dict[str, Any] = Field(default_factory=dict)
    checks: list[SloCheck] = Field(default_factory=list)
    reason: str = ""

    @classmethod
    def judge(cls, runbook: str, control: str, metrics: dict, checks: list[SloCheck], reason: str = "",
              errors: list[str] | None = None, unjudgeable: list[str] | None = None) -> "RunSummary":
        """PASS when every check passed; FAIL when one failed on a measured value; ERROR when
        something could not run (errors: an experiment that errored or was aborted) and no check
        failed on a measured value, or when there was nothing to judge. ERROR whatever the checks
        say when the run cannot be judged at all (unjudgeable: a fault not seen to land, a run too
        short to see a recovery): its figures describe a drill that did not happen."""
        measured_failures = [c for c in checks if c.value is not None and not c.passed]
        if unjudgeable:
            verdict: Verdict = "ERROR"
            reason = "; ".join(unjudgeable)
        elif errors and not measured_failures:
            verdict = "ERROR"
            reason = "; ".join([*errors, *([reason] if reason else [])])
        elif not checks:
            verdict, reason = "ERROR", reason or "nothing was judged: the run recorded no SLO check"
        elif all(c.passed for c in checks):
            verdict = "PASS"
        else:
            verdict = "FAIL"
            reason = reason or "; ".join([*(c.describe() for c in checks if not c.passed), *(errors or [])])
        return cls(runbook=runbook, control=control, verdict=verdict, metrics=metrics, checks=checks, reason=reason)

    def to_json(self) -> dict:
        data = self.model_dump()
        data["checks"] = [{**c.model_dump(), "passed": c.passed} for c in self.checks]
        return data

    @classmethod
    def read(cls, path: Path) -> "RunSummary | None":
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        data["checks"] = [{k: v for k, v in c.items() if k != "passed"} for c in data.get("checks", [])]
        return cls.model_validate(data)
