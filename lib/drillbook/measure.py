"""The measurements behind the verdicts, each a small function whose docstring is its definition.

Inputs are plain series (pandas) and timestamps (epoch seconds), so every measure can be checked
on hand-built data whose answer is known.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import pandas as pd

from drillbook.evidence.summary import SloCheck


PERCENTILE = "nearest rank: the smallest measured value with at least the quantile of all values at or below it"


def percentile(values: Iterable[float], quantile: float) -> float:
    """Nearest-rank percentile: the smallest value with at least `quantile` of the values at or below it."""
    ordered = sorted(v for v in values if v is not None and not math.isnan(v))
    if not ordered:
        return math.nan
    rank = max(1, math.ceil(quantile * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class RecoveryTimes:
    """Seconds from the fault to recovery: replicas alone, and the service as clients see it."""

    replicas_recovered_s: float | None
    service_recovered_s: float | None


def recovery_time(requests: pd.DataFrame, fault_at: float, replicas_ready_at: float | None, baseline_p95_ms: float,
                  *, tolerance: float = 1.5, max_error_rate: float = 0.0, window_s: float = 1.0,
                  hold_s: float = 3.0) -> RecoveryTimes:
    """Recovery time after a fault injected at `fault_at`.

    - replicas recovered: `replicas_ready_at - fault_at` (the desired replicas are ready again).
    - service recovered: the first instant t >= replicas_ready_at such that every window of
      `window_s` seconds between t and t + hold_s has a rolling p95 within `tolerance` x the
      baseline p95 and an error rate within `max_error_rate`; reported as t - fault_at.
      None when the service never held within tolerance for `hold_s` in the data.

    `requests` has one row per request: t (start, epoch s), ms (latency), ok (bool).
    """
    if replicas_ready_at is None:
        return RecoveryTimes(None, None)
    replicas = replicas_ready_at - fault_at
    after = requests[requests["t"] >= replicas_ready_at]
    if after.empty:
        return RecoveryTimes(replicas, None)
    end = float(after["t"].max())
    windows = []
    start = replicas_ready_at
    while start < end:
        chunk = after[(after["t"] >= start) & (after["t"] < start + window_s)]
        healthy = bool(len(chunk)) and percentile(chunk["ms"], 0.95) <= tolerance * baseline_p95_ms and \
            (1 - chunk["ok"].mean()) <= max_error_rate
        windows.append((start, healthy))
        start += window_s
    needed = max(1, math.ceil(hold_s / window_s))
    for index in range(len(windows) - needed + 1):
        if all(healthy for _, healthy in windows[index:index + needed]):
            return RecoveryTimes(replicas, windows[index][0] - fault_at)
    return RecoveryTimes(replicas, None)


@dataclass(frozen=True)
class ColdStartTrial:
    """One request sent with the service at zero replicas, split into phases by the target's events."""

    sent: float
    scheduled: float
    started: float
    ready: float
    first_token: float

    @property
    def total_s(self) -> float:
        return self.first_token - self.sent

    def phases(self) -> dict[str, float]:
        """schedule (sent -> scheduled), start (-> process started), model load (-> ready),
        first token (-> first token at the client); they add up to the total."""
        return {"schedule": self.scheduled - self.sent, "start": self.started - self.scheduled,
                "model_load": self.ready - self.started, "first_token": self.first_token - self.ready}


def cold_start_summary(trials: Sequence[ColdStartTrial]) -> dict[str, float]:
    """P50, P95, P99 and max of time to first token over the trials, in seconds."""
    totals = [trial.total_s for trial in trials]
    return {"trials": len(totals), "p50_s": percentile(totals, 0.50), "p95_s": percentile(totals, 0.95),
            "p99_s": percentile(totals, 0.99), "max_s": max(totals) if totals else math.nan}


def cold_start_phases(trials: Sequence[ColdStartTrial]) -> pd.DataFrame:
    """One row per trial, one column per phase (seconds), for the phase bar chart."""
    return pd.DataFrame([trial.phases() for trial in trials])


def degradation_ratio(during: float, baseline: float) -> float:
    """The victim's figure while the aggressor runs divided by its own baseline (nan without a baseline)."""
    if baseline is None or during is None or baseline <= 0 or math.isnan(baseline):
        return math.nan
    return during / baseline


@dataclass(frozen=True)
class RestoreFigures:
    rto_s: float | None
    rpo_turns: int
    rpo_s: float | None
    integrity: float


def restore_figures(disaster_at: float, healthy_with_data_at: float | None, last_backup_at: float | None,
                    acknowledged_before_disaster: int, acknowledged_after_restore: int,
                    sessions_checked: int, sessions_verified: int) -> RestoreFigures:
    """RTO: disaster to healthy with verified data (None if never). RPO: acknowledged turns lost,
    and the time from the last backup to the disaster. Integrity: share of restored sessions
    whose chain verifies (1.0 when there were none to check)."""
    return RestoreFigures(
        rto_s=None if healthy_with_data_at is None else healthy_with_data_at - disaster_at,
        rpo_turns=max(0, acknowledged_before_disaster - acknowledged_after_restore),
        rpo_s=None if last_backup_at is None else disaster_at - last_backup_at,
        integrity=sessions_verified / sessions_checked if sessions_checked else 1.0,
    )


NOT_MEASURED = "the run produced no value for it"


def check(name: str, value: float | None, comparison: str, threshold: float, unit: str = "",
          missing: str = "") -> SloCheck:
    """An SLO check; a value that could not be measured (None or nan) fails, and says why
    (missing: the reason, in words; a generic one when the caller has none)."""
    if value is not None and isinstance(value, float) and math.isnan(value):
        value = None
    note = (missing or NOT_MEASURED) if value is None else ""
    return SloCheck(name=name, comparison=comparison, threshold=threshold, value=value, unit=unit,  # type: ignore[arg-type]
                    note=note)
