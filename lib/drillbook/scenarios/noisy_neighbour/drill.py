"""The noisy-neighbour drill: the victim alone, then beside an aggressor's flood."""

from __future__ import annotations

from typing import Any

from drillbook.plots import pyplot
from drillbook.runbook import Run
from drillbook.scenarios.noisy_neighbour.judge import judge_noisy_neighbour, tenant_shares


def noisy_neighbour(run: Run, victim_tenant: str, victim_sessions: int, baseline_s: float, burst_s: float,
                    max_victim_p95_ratio: float, max_victim_error_rate: float) -> dict[str, Any]:
    """Victim alone, then victim while an aggressor floods inference (its window opens once the
    flood is seen queueing at the shared tier, and is judged only if it held there through the
    window); ratio, queue wait and slot share."""
    before = run.model_metrics()
    result = run.chaos("noisy-neighbour", victim_tenant=victim_tenant, victim_sessions=victim_sessions,
                       baseline_s=baseline_s, burst_s=burst_s, max_victim_p95_ratio=max_victim_p95_ratio)
    after = run.model_metrics()
    isolation = result.measurements.get("isolation") or {}
    shares, waits = tenant_shares(before, after)
    run.record("experiment_verdict", result.verdict)
    flood = result.measurements.get("flood") or {}
    run.record("flood_seen", (flood.get("landed") or {}).get("seen"))
    run.record("flood_landed_after_s", round(flood["landed"]["at"] - flood["at"], 3)
               if (flood.get("landed") or {}).get("at") else None, "s")
    held = (result.measurements.get("contention") or {}).get("seen") or {}
    run.record("flood_oversubscription", held.get("oversubscription"))
    run.record("victim_p95_ratio", isolation.get("victim_p95_ratio"))
    run.record("victim_baseline_p95_ms", (isolation.get("baseline") or {}).get("p95_ms"), "ms")
    run.record("victim_burst_p95_ms", (isolation.get("during") or {}).get("p95_ms"), "ms")
    run.record("victim_error_rate", isolation.get("victim_error_rate"))
    run.record("slot_share", shares)
    run.record("mean_queue_wait_s", waits)
    run.keep(judge_noisy_neighbour(result.verdict, isolation, max_victim_p95_ratio, max_victim_error_rate))
    plt = pyplot()
    figure, (latency, share) = plt.subplots(1, 2, figsize=(8, 2.6))
    windows = {"baseline": isolation.get("baseline") or {}, "aggressor burst": isolation.get("during") or {}}
    latency.bar([f"{w}\np50" for w in windows] + [f"{w}\np95" for w in windows],
                [v.get("p50_ms", 0) for v in windows.values()] + [v.get("p95_ms", 0) for v in windows.values()],
                color=["#1565c0", "#c62828", "#1565c0", "#c62828"])
    latency.set_ylabel(f"victim ({victim_tenant}) ms")
    share.bar(list(shares), list(shares.values()), color="#6a1b9a")
    share.set_ylabel("share of GPU-seconds")
    run.save_plot("victim-vs-aggressor", figure)
    return isolation
