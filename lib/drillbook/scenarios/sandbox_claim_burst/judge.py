"""Judging the claim burst: pure functions over the burst's claims and the pool readings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from drillbook.measure import Judgement, check, percentile


def refill_seconds(readings: list[dict[str, Any]], burst_ended: float, size: int) -> float | None:
    """From the burst's last answer to the first pool reading, taken after it, that shows the pool
    full again. A reading taken before the burst ended says nothing of the refill."""
    full = [r for r in readings if r["at"] >= burst_ended and r["warm"] >= size]
    return min(r["at"] for r in full) - burst_ended if full else None


@dataclass(frozen=True)
class BurstFigures:
    claims: int
    failed: int
    cold: int  # claims the platform answered with a sandbox booted for them
    warm_before: int  # warm sandboxes seen in the pool just before the burst
    pool_size: int
    latencies: list[float]
    refill_s: float | None
    working_runs: int
    working_failed: int

    def p(self, quantile: float) -> float | None:
        return percentile(self.latencies, quantile) if self.latencies else None

    def records(self) -> list[tuple[str, Any, str]]:
        return [("claims", self.claims, ""), ("claims_failed", self.failed, ""), ("claims_cold", self.cold, ""),
                ("warm_before_burst", self.warm_before, ""), ("pool_size", self.pool_size, ""),
                ("claim_p50_s", self.p(0.5), "s"), ("claim_p90_s", self.p(0.9), "s"), ("claim_p99_s", self.p(0.99), "s"),
                ("pool_refill_s", self.refill_s, "s"), ("working_runs", self.working_runs, ""),
                ("working_runs_failed", self.working_failed, "")]


def burst_figures(claims: list[dict[str, Any]], readings: list[dict[str, Any]], warm_before: int, pool_size: int,
                  working: list[dict[str, Any]]) -> BurstFigures:
    answered = [c for c in claims if c["ok"]]
    ended = max((c["ended"] for c in claims), default=0.0)
    return BurstFigures(len(claims), len(claims) - len(answered), sum(c.get("warm") is False for c in answered),
                        warm_before, pool_size, [c["seconds"] for c in answered],
                        refill_seconds(readings, ended, pool_size) if claims else None,
                        len(working), sum(not w["ok"] for w in working))


def judge_burst(figures: BurstFigures, max_p50_s: float, max_p90_s: float, max_p99_s: float,
                max_failed_claims: int, refill_timeout_s: float) -> Judgement:
    """A burst that did not outrun the warm pool proves nothing about claims beyond it: ERROR."""
    cannot = None
    if figures.claims == 0:
        cannot = "no claim was sent"
    elif figures.claims <= figures.warm_before:
        cannot = (f"the burst ({figures.claims} claims) did not go beyond the {figures.warm_before} warm "
                  "sandboxes seen before it")
    checks = (
        check("claims failed", figures.failed, "<=", max_failed_claims),
        check("claim latency p50", figures.p(0.5), "<=", max_p50_s, "s", missing="no claim was answered"),
        check("claim latency p90", figures.p(0.9), "<=", max_p90_s, "s", missing="no claim was answered"),
        check("claim latency p99", figures.p(0.99), "<=", max_p99_s, "s", missing="no claim was answered"),
        check("pool refill", figures.refill_s, "<=", refill_timeout_s, "s",
              missing=f"the pool was not seen full again within {refill_timeout_s:g}s"),
        check("working sessions' runs failed during the burst", figures.working_failed, "<=", 0),
    )
    return Judgement(checks, cannot_judge=cannot)


__all__ = ["BurstFigures", "burst_figures", "judge_burst", "refill_seconds"]
