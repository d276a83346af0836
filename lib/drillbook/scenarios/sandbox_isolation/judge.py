"""Judging the isolation drill: pure functions over the attempts the probes recorded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from drillbook.measure import Judgement, check, percentile

LIMIT_PROBES = ("memory", "process count", "CPU")  # what cgroup limits hold, not namespaces


@dataclass(frozen=True)
class IsolationFigures:
    tried: int
    refused: int
    escaped: list[str]  # names of the attempts that worked, where the platform says it enforces them
    not_enforced: list[str]  # attempts that worked where the platform says it cannot enforce them
    unjudged: list[str]  # attempts whose target did not answer even from outside the sandbox
    neighbour_before_ms: float | None
    neighbour_during_ms: float | None

    @property
    def neighbour_slowdown(self) -> float | None:
        if not self.neighbour_before_ms or self.neighbour_during_ms is None:
            return None
        return self.neighbour_during_ms / self.neighbour_before_ms

    def records(self) -> list[tuple[str, Any, str]]:
        return [("escape_attempts", self.tried, ""), ("escapes_refused", self.refused, ""),
                ("escapes", self.escaped, ""), ("not_enforced", self.not_enforced, ""),
                ("neighbour_p50_before_ms", self.neighbour_before_ms, "ms"),
                ("neighbour_p50_during_ms", self.neighbour_during_ms, "ms"),
                ("neighbour_slowdown", self.neighbour_slowdown, "")]


def isolation_figures(attempts: list[dict[str, Any]], unreachable: set[str], limits_enforced: bool,
                      neighbour_before_s: list[float], neighbour_during_s: list[float],
                      hog_started: float | None, hog_ended: float | None,
                      neighbour_runs: list[tuple[float, float]] | None = None) -> IsolationFigures:
    """attempts: the probes' lines. unreachable: targets that did not answer from outside either
    (an attempt on them proves nothing). neighbour_runs: (started, ended) of each neighbour run
    during the hog, for neighbour_during_s; only runs that began after the hog began and ended
    before it ended count (a run that began before the hog says nothing of it)."""
    escaped, not_enforced, unjudged, refused = [], [], [], 0
    for attempt in attempts:
        name = str(attempt.get("probe"))
        if name in unreachable:
            unjudged.append(name)
        elif attempt.get("outcome") == "escaped":
            (not_enforced if name in LIMIT_PROBES and not limits_enforced else escaped).append(name)
        elif attempt.get("outcome") == "refused":
            refused += 1
    during = neighbour_during_s
    if neighbour_runs is not None and hog_started is not None and hog_ended is not None:
        during = [seconds for seconds, (began, ended) in zip(neighbour_during_s, neighbour_runs)
                  if began >= hog_started and ended <= hog_ended]
    ms = (lambda values: percentile(values, 0.5) * 1000 if values else None)
    return IsolationFigures(len(attempts), refused, escaped, not_enforced, unjudged, ms(neighbour_before_s), ms(during))


def judge_isolation(figures: IsolationFigures, planned: int, max_neighbour_slowdown: float,
                    claimed: bool) -> Judgement:
    """PASS only when every planned escape was tried and refused and the neighbour kept its pace;
    each escape that worked is a check of its own, so the FAIL names it."""
    cannot = None
    if not claimed:
        cannot = "no sandbox could be claimed: nothing was probed"
    elif figures.tried == 0:
        cannot = "the escape probes reported nothing (they did not run in the sandbox)"
    elif figures.tried < planned:
        cannot = f"only {figures.tried} of {planned} escape attempts reported: the others cannot be judged"
    elif figures.unjudged:
        cannot = ("these targets did not answer from outside the sandbox either, so a refusal proves nothing: "
                  + ", ".join(figures.unjudged))
    note = f"not enforced on this platform: {', '.join(figures.not_enforced)}" if figures.not_enforced else ""
    checks = [check(f"escape: {name}", 1, "<=", 0) for name in figures.escaped]
    checks += [
        check("escape attempts made", figures.tried, ">=", planned),
        check("escapes that worked", len(figures.escaped), "<=", 0).model_copy(update={"note": note}),
        check("neighbour slowdown while a sandbox hogs the CPU", figures.neighbour_slowdown, "<=",
              max_neighbour_slowdown, missing="the neighbour's runs were not timed before and during the hog"),
    ]
    return Judgement(tuple(checks), cannot_judge=cannot)


__all__ = ["IsolationFigures", "LIMIT_PROBES", "isolation_figures", "judge_isolation"]
