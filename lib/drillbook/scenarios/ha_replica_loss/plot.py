"""The HA drill's chart: p50 and p95 latency and failed requests per second, the fault window
shaded and the moment the service was back dashed."""

from __future__ import annotations

from typing import Any

from drillbook.measure import percentile
from drillbook.plots import pyplot


def latency_and_errors(turns: Any, fault_at: float | None, window_end: float, recovery_time_s: float | None) -> Any:
    """The figure for a run's turns (a request log of turns: t, ms, ok)."""
    plt = pyplot()
    figure, (latency, errors) = plt.subplots(2, 1, figsize=(8, 4), sharex=True)
    origin = float(turns["t"].min()) if len(turns) else 0.0
    per_second = turns.assign(s=(turns["t"] - origin).astype(int)).groupby("s")
    latency.plot(per_second["ms"].agg(lambda ms: percentile(ms, 0.95)), label="p95 ms")
    latency.plot(per_second["ms"].agg(lambda ms: percentile(ms, 0.5)), label="p50 ms")
    errors.bar(per_second.size().index, (~turns["ok"]).groupby((turns["t"] - origin).astype(int)).sum()
               .reindex(per_second.size().index, fill_value=0), color="#c62828", label="failed requests")
    for axis in (latency, errors):
        if fault_at:
            axis.axvspan(fault_at - origin, window_end - origin, color="#c62828", alpha=0.12)
        if recovery_time_s is not None and fault_at:
            axis.axvline(fault_at - origin + recovery_time_s, color="#2e7d32", linestyle="--")
        axis.legend(fontsize=7)
    latency.set_ylabel("ms")
    errors.set_ylim(bottom=0)
    errors.set_xlabel("seconds into the run (shaded: fault until replicas ready; dashed: service recovered)")
    return figure


__all__ = ["latency_and_errors"]
