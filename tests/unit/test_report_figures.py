"""How the report shows a figure: shares as percentages, zeros above the axis, few runs run by
run against their threshold, a share's SLO check in percent."""

from __future__ import annotations

from pathlib import Path

from drillbook.evidence.catalog import BundleRow
from drillbook.evidence.report import FEW_RUNS, ControlSection, chart_alt, measured_count, value_axis
from drillbook.evidence.summary import RunSummary, SloCheck
from drillbook.scenarios import REGISTRY, Figure


def test_a_share_is_a_percentage_and_a_count_stays_a_count() -> None:
    share, count = Figure("integrity", "restored sessions whose chain verifies", share=True), Figure("lost", "lost")
    assert (share.shown(1.0), share.shown(0.5), share.shown(0.0123)) == ("100%", "50%", "1.23%")
    assert (count.shown(1.0), Figure("t", "t", "s").shown(2.5)) == ("1", "2.5s")
    restore = {f.metric: f for f in REGISTRY["restore-drill"].figures}
    assert restore["integrity"].share and not restore["rpo_turns"].share
    assert "expected to lose" in restore["rpo_turns"].meaning, "a restore's expected loss is said in words"


def test_a_zero_is_drawn_above_the_axis_line() -> None:
    bottom, top = value_axis([0.0, 0.0])
    assert bottom < 0.0 < top, "all zeros: the dots sit above the bottom of the axis"
    bottom, top = value_axis([0.0, 5.0])
    assert bottom < 0.0 and top > 5.0
    bottom, _ = value_axis([-2.0, 1.0])
    assert bottom < -2.0
    assert value_axis([]) == (-0.08, 0.15)


def runs(values: list[float | None]) -> list[BundleRow]:
    rows = []
    for index, value in enumerate(values):
        metrics = {} if value is None else {"rto_s": value}
        summary = RunSummary(runbook="restore-drill", control="restore", verdict="PASS", metrics=metrics)
        rows.append(BundleRow(Path(f"/r/2026_restore-drill_sandbox_{index:06d}"), "restore-drill", "sandbox",
                              "complete", f"2026-12-01T10:{index:02d}:00Z", "a" * 64, summary))
    return rows


def test_few_runs_are_drawn_run_by_run_and_many_as_a_trend() -> None:
    rto = Figure("rto_s", "RTO", "s", "RTO")
    few = runs([1.0, None, 2.0])
    assert measured_count(rto, few) == 2
    assert chart_alt(rto, measured_count(rto, few)) == "RTO: each run's value against its SLO threshold"
    many = runs([1.0] * FEW_RUNS)
    assert chart_alt(rto, measured_count(rto, many)) == "RTO over the period, with each run's SLO threshold"


def test_a_share_check_is_shown_in_percent() -> None:
    section = ControlSection(REGISTRY["restore-drill"])
    check = SloCheck(name="integrity of restored sessions", comparison=">=", threshold=1.0, value=0.75)
    assert section.shown_check(check) == ("75%", "100%")
    other = SloCheck(name="RTO", comparison="<=", threshold=60, value=12.5, unit="s")
    assert section.shown_check(other) == ("12.5s", "60s")
