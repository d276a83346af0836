"""Judging the noisy-neighbour drill from what its experiment measured, and the tenants' shares of
the shared tier from two readings of its counters: pure functions a test can feed traps."""

from __future__ import annotations

from typing import Any

from drillbook.measure import Judgement, check


def tenant_shares(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]
                  ) -> tuple[dict[str, float], dict[str, float]]:
    """Each tenant's share of the GPU-seconds used between two readings of the model tier's
    per-tenant counters, and its mean queue wait (seconds) over the chunks queued between them.
    A tenant missing from the first reading started from zero."""
    usage = {tenant: counters.get("gpu_seconds", 0.0) - before.get(tenant, {}).get("gpu_seconds", 0.0)
             for tenant, counters in after.items()}
    total = sum(usage.values()) or 1.0
    waits = {tenant: (counters.get("queue_wait_sum", 0.0) - before.get(tenant, {}).get("queue_wait_sum", 0.0)) /
             max(1.0, counters.get("queue_wait_count", 0.0) - before.get(tenant, {}).get("queue_wait_count", 0.0))
             for tenant, counters in after.items()}
    return ({tenant: round(value / total, 4) for tenant, value in usage.items()},
            {tenant: round(value, 5) for tenant, value in waits.items()})


def judge_noisy_neighbour(verdict: str, isolation: dict[str, Any], max_victim_p95_ratio: float,
                          max_victim_error_rate: float) -> Judgement:
    """The victim's p95 over its own baseline and its error rate in the burst, each held to its
    limit; not measured (the experiment ended early, or the victim completed no turn) fails."""
    unmeasured = (f"the noisy-neighbour experiment ended {verdict} before it measured the victim"
                  if not isolation else "the victim completed no turn in its baseline or in the burst")
    return Judgement((
        check("victim p95 ratio (burst over own baseline)", isolation.get("victim_p95_ratio"), "<=",
              max_victim_p95_ratio, missing=unmeasured),
        check("victim error rate", isolation.get("victim_error_rate"), "<=", max_victim_error_rate, missing=unmeasured),
    ))


__all__ = ["judge_noisy_neighbour", "tenant_shares"]
