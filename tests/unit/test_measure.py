"""Every measure on hand-built series whose answer is known."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from drillbook.measure import (ColdStartTrial, check, cold_start_phases, cold_start_summary, degradation_ratio,
                               percentile, recovery_time, restore_figures)


def series(rows: list[tuple[float, float, bool]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["t", "ms", "ok"])


def steady(start: float, end: float, ms: float, ok: bool = True, step: float = 0.1) -> list[tuple[float, float, bool]]:
    count = round((end - start) / step)
    return [(start + i * step, ms, ok) for i in range(count)]


def test_percentile_is_nearest_rank():
    values = list(range(1, 101))
    assert percentile(values, 0.5) == 50 and percentile(values, 0.95) == 95 and percentile(values, 1.0) == 100
    assert math.isnan(percentile([], 0.5))


def test_recovery_when_the_service_is_healthy_as_soon_as_replicas_are_ready():
    requests = series(steady(100, 110, 20))
    times = recovery_time(requests, fault_at=100.0, replicas_ready_at=102.0, baseline_p95_ms=20, hold_s=3)
    assert times.replicas_recovered_s == pytest.approx(2.0)
    assert times.service_recovered_s == pytest.approx(2.0)


def test_recovery_waits_for_latency_to_settle_and_hold():
    # slow until t=105, then back to baseline
    requests = series(steady(100, 105, 200) + steady(105, 115, 20))
    times = recovery_time(requests, fault_at=100.0, replicas_ready_at=101.0, baseline_p95_ms=20, hold_s=3)
    assert times.replicas_recovered_s == pytest.approx(1.0)
    assert times.service_recovered_s == pytest.approx(5.0)


def test_errors_after_replicas_are_ready_delay_service_recovery():
    requests = series(steady(100, 104, 20, ok=False) + steady(104, 112, 20))
    times = recovery_time(requests, fault_at=100.0, replicas_ready_at=101.0, baseline_p95_ms=20, hold_s=2)
    assert times.service_recovered_s == pytest.approx(4.0)


def test_a_service_that_never_holds_has_no_recovery_time():
    requests = series(steady(100, 110, 200))
    times = recovery_time(requests, fault_at=100.0, replicas_ready_at=101.0, baseline_p95_ms=20)
    assert times.replicas_recovered_s == pytest.approx(1.0) and times.service_recovered_s is None
    assert recovery_time(requests, 100.0, None, 20).replicas_recovered_s is None


def test_cold_start_phases_add_up_and_percentiles():
    trials = [ColdStartTrial(0.0, 0.01, 0.3, 0.8 + i / 10, 0.9 + i / 10) for i in range(10)]
    phases = cold_start_phases(trials)
    assert list(phases.columns) == ["schedule", "start", "model_load", "first_token"]
    assert phases.sum(axis=1).tolist() == pytest.approx([t.total_s for t in trials])
    summary = cold_start_summary(trials)
    assert summary["p50_s"] == pytest.approx(1.3) and summary["max_s"] == pytest.approx(1.8)
    assert summary["p95_s"] == pytest.approx(1.8) and summary["trials"] == 10


def test_degradation_ratio():
    assert degradation_ratio(300.0, 100.0) == pytest.approx(3.0)
    assert math.isnan(degradation_ratio(300.0, 0.0))


def test_restore_figures():
    figures = restore_figures(disaster_at=100.0, healthy_with_data_at=112.5, last_backup_at=90.0,
                              acknowledged_before_disaster=50, acknowledged_after_restore=44,
                              sessions_checked=5, sessions_verified=5)
    assert (figures.rto_s, figures.rpo_turns, figures.rpo_s, figures.integrity) == (12.5, 6, 10.0, 1.0)
    never = restore_figures(100.0, None, None, 10, 0, 4, 3)
    assert never.rto_s is None and never.rpo_s is None and never.integrity == 0.75


def test_checks_pass_fail_and_unmeasured_fails():
    assert check("p95", 1.2, "<=", 2.0, "s").passed
    assert not check("p95", 2.5, "<=", 2.0, "s").passed
    assert not check("p95", None, "<=", 2.0).passed
    assert not check("p95", math.nan, "<=", 2.0).passed
    assert check("integrity", 1.0, ">=", 1.0).passed
