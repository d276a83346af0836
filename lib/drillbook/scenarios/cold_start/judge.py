"""Judging the cold-start drill from what its trials recorded: a pure function a test can feed traps.

Every trial must complete: the count of trials that did not is a check whose threshold does not
follow the trial count, so total failure fails. A drill whose every trial raised before it could
ask the target (no kubeconfig, a command not found) is a setup problem: nothing is judged, ERROR.
"""

from __future__ import annotations

from typing import Sequence

from drillbook.measure import Judgement, check


def judge_cold_start(trials: int, completed: int, acknowledged: int, lost: int | None, could_not_ask: Sequence[str],
                     p95_s: float | None, slo_p95_s: float) -> Judgement:
    """trials asked for; completed: trials whose first request from zero was answered;
    acknowledged: of those, first turns acknowledged with a receipt to audit; lost: acknowledged
    first turns the delivery audit did not find stored; could_not_ask: why trials raised before
    they could ask; p95_s: the P95 time to first token over the completed trials."""
    unaudited = (f"only {acknowledged} of {completed} first turns were acknowledged with a receipt to audit"
                 if completed else "no cold-start trial completed")
    checks = (
        check("first turns from zero lost", lost if completed and acknowledged == completed else None, "<=", 0,
              missing=unaudited),
        check("cold-start P95 time to first token", p95_s, "<=", slo_p95_s, "s", missing="no cold-start trial completed"),
        check("cold-start trials that did not complete", trials - completed, "<=", 0),
    )
    setup = f"no cold-start trial could run: {could_not_ask[0]}" if trials and len(could_not_ask) == trials else None
    return Judgement(checks, setup)


__all__ = ["judge_cold_start"]
