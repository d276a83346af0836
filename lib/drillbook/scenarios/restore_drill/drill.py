"""The restore drill: backup, disaster, restore, read back; RTO, RPO and integrity."""

from __future__ import annotations

from typing import Any

from drillbook.plots import pyplot
from drillbook.runbook import Run
from drillbook.scenarios.restore_drill.judge import judge_restore


def restore(run: Run, sessions: int, turns_before: int, turns_after: int, max_rto_s: float, max_rpo_s: float,
            restore_timeout_s: float) -> dict[str, Any]:
    """Backup, disaster, restore, read back: RTO, RPO (the data-loss window, in seconds: a target
    that does not follow how many turns the drill writes) and integrity against their targets.
    The turns written after the backup that are lost are a figure, not a check."""
    result = run.chaos("restore-drill", sessions=sessions, turns_before=turns_before, turns_after=turns_after,
                       max_rto_s=max_rto_s, max_rpo_s=max_rpo_s, restore_timeout_s=restore_timeout_s)
    measured = result.measurements.get("restore", {})
    run.record("experiment_verdict", result.verdict)
    run.record("rto_s", measured.get("rto_s"), "s")
    run.record("rpo_turns", measured.get("rpo_turns"))
    run.record("rpo_s", measured.get("rpo_s"), "s")
    run.record("integrity", measured.get("integrity"))
    run.record("backup_created", measured.get("backup_created", False))
    backup = result.measurements.get("backup") or {}
    run.record("store_served_after_restore", measured.get("served"))
    run.record("missing_before_backup", measured.get("missing_before_backup"))
    run.keep(judge_restore(result.verdict, result.reasons, backup, measured, max_rto_s, max_rpo_s))
    plt = pyplot()
    marks = {"backup": (result.measurements.get("backup") or {}).get("at"),
             "disaster": (result.measurements.get("disaster") or {}).get("at"),
             "restored": (result.measurements.get("restored") or {}).get("at")}
    origin = min(v for v in marks.values() if v) if any(marks.values()) else 0.0
    figure, axis = plt.subplots(figsize=(7, 1.6))
    for label, moment in marks.items():
        if moment:
            axis.axvline(moment - origin, color="#555555")
            axis.text(moment - origin, 0.5, f" {label}", rotation=90, va="center", fontsize=8)
    if marks["disaster"] and measured.get("rto_s") is not None:
        axis.axvspan(marks["disaster"] - origin, marks["disaster"] - origin + measured["rto_s"], color="#c62828",
                     alpha=0.2, label=f"RTO {measured['rto_s']:.2f}s")
        axis.legend(fontsize=7)
    axis.set_yticks([])
    axis.set_xlabel("seconds since the backup")
    run.save_plot("restore-timeline", figure)
    return measured
