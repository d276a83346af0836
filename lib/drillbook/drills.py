"""The steps of each drill, so that runbook notebooks stay a handful of calls.

Each function runs a scenario through a `Run`, records its figures, judges its SLOs and saves
its plot; the notebook shows the result.
"""

from __future__ import annotations

from typing import Any

from drillbook.measure import ColdStartTrial, cold_start_phases, cold_start_summary
from drillbook.runbook import Run


def _first(events: list[dict[str, Any]], kind: str, service: str, after: float) -> float | None:
    return next((e["t"] for e in events if e["kind"] == kind and e.get("service") == service and e["t"] >= after), None)


def cold_start_trial(run: Run, measured: dict[str, float], service: str = "model") -> ColdStartTrial:
    """Split one first request into phases with the target's own events for the tier that loads the model."""
    sent = measured["sent"]
    events = run.sandbox_events(since=sent)
    scheduled = _first(events, "replica_scheduled", service, sent) or sent
    started = _first(events, "replica_started", service, scheduled) or scheduled
    ready = _first(events, "replica_ready", service, started) or started
    return ColdStartTrial(sent, scheduled, started, ready, measured["first_token"])


def cold_start(run: Run, trials: int, idle_s: float, slo_p95_s: float) -> dict[str, float]:
    """N trials of scale-to-zero, idle, first request; P50/P95/P99 of time to first token, by phase."""
    measured: list[ColdStartTrial] = []
    for index in range(trials):
        # The experiment only has to work; the runbook judges P95 over all trials.
        result = run.chaos("cold-start", idle_s=idle_s, max_cold_start_s=3600.0)
        if result.verdict not in ("PASS", "FAIL"):
            run.record(f"trial_{index + 1}_error", "; ".join(result.reasons) or result.verdict)
            continue
        measured.append(cold_start_trial(run, result.measurements["cold_start"][0]))
    summary = cold_start_summary(measured)
    run.record("trials_completed", len(measured))
    for name in ("p50_s", "p95_s", "p99_s", "max_s"):
        run.record(f"cold_start_{name}", summary[name], "s")
    run.check("cold-start P95 time to first token", summary["p95_s"], "<=", slo_p95_s, "s")
    run.check("trials completed", len(measured), ">=", trials)
    if measured:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        phases = cold_start_phases(measured)
        figure, axis = plt.subplots(figsize=(7, 0.5 + 0.35 * len(phases)))
        phases.index = [f"trial {i + 1}" for i in range(len(phases))]
        phases.plot.barh(stacked=True, ax=axis, width=0.7)
        axis.axvline(slo_p95_s, color="#c62828", linestyle="--", label=f"SLO P95 {slo_p95_s:g}s")
        axis.set_xlabel("seconds from request to first token")
        axis.legend(fontsize=7, loc="lower right")
        axis.invert_yaxis()
        run.save_plot("cold-start-phases", figure)
        run.record("phase_means_s", {k: round(float(v), 4) for k, v in phases.mean().items()})
    return summary


def restore(run: Run, sessions: int, turns_before: int, turns_after: int, max_rto_s: float, max_rpo_turns: int,
            restore_timeout_s: float) -> dict[str, Any]:
    """Backup, disaster, restore, read back: RTO, RPO and integrity against their targets."""
    result = run.chaos("restore-drill", sessions=sessions, turns_before=turns_before, turns_after=turns_after,
                       max_rto_s=max_rto_s, max_rpo_turns=max_rpo_turns, restore_timeout_s=restore_timeout_s)
    measured = result.measurements.get("restore", {})
    run.record("experiment_verdict", result.verdict)
    run.record("rto_s", measured.get("rto_s"), "s")
    run.record("rpo_turns", measured.get("rpo_turns"))
    run.record("rpo_s", measured.get("rpo_s"), "s")
    run.record("integrity", measured.get("integrity"))
    run.record("backup_created", measured.get("backup_created", False))
    run.check("RTO", measured.get("rto_s"), "<=", max_rto_s, "s")
    run.check("RPO (acknowledged turns lost)", measured.get("rpo_turns"), "<=", max_rpo_turns)
    run.check("integrity of restored sessions", measured.get("integrity") if measured.get("healthy") else None,
              ">=", 1.0)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
