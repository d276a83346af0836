"""The cold-start drill: N trials of scale-to-zero, idle and a first request, judged on P95."""

from __future__ import annotations

from typing import Any

from drillbook.measure import PERCENTILE, ColdStartTrial, cold_start_phases, cold_start_summary
from drillbook.plots import pyplot
from drillbook.runbook import Run
from drillbook.scenarios.cold_start.judge import judge_cold_start


def _first(events: list[dict[str, Any]], kind: str, role: str, after: float) -> float | None:
    return next((e["t"] for e in events if e["kind"] == kind and e.get("role") == role and e["t"] >= after), None)


def cold_start_trial(run: Run, measured: dict[str, float], role: str = "inference") -> ColdStartTrial:
    """Split one first request into phases with the target's own events for the tier that loads
    the model. Where the target keeps no such events the whole time is one phase."""
    sent = measured["sent"]
    events = run.target_events(since=sent)
    scheduled = _first(events, "replica_scheduled", role, sent) or sent
    started = _first(events, "replica_started", role, scheduled) or scheduled
    ready = _first(events, "replica_ready", role, started) or started
    return ColdStartTrial(sent, scheduled, started, ready, measured["first_token"])


def cold_start(run: Run, trials: int, idle_s: float, slo_p95_s: float, ready_timeout_s: float) -> dict[str, float]:
    """N trials of scale-to-zero, idle, first request; P50/P95/P99 of time to first token, by phase."""
    from drillbook.delivery import Receipt

    measured: list[ColdStartTrial] = []
    receipts: list[Receipt] = []
    could_not_ask: list[str] = []  # trials whose experiment raised before it could measure
    for index in range(trials):
        # The experiment only has to work; the runbook judges P95 over all trials.
        # The experiment's hypothesis holds each first token to the SLO; its verdict is kept per
        # trial, and the runbook judges P95 over all trials.
        result = run.chaos("cold-start", idle_s=idle_s, max_cold_start_s=slo_p95_s, ready_timeout_s=ready_timeout_s)
        run.record(f"trial_{index + 1}_experiment_verdict", result.verdict)
        if result.verdict not in ("PASS", "FAIL"):
            run.record(f"trial_{index + 1}_error", "; ".join(result.reasons) or result.verdict)
            raised = next((reason for reason in result.reasons if " failed: " in reason), None)
            if raised is not None:
                could_not_ask.append(raised)
            continue
        first = next(iter(result.measurements.get("cold_start") or []), None)
        if first is None:  # the request from zero was never answered: the trial did not complete
            run.record(f"trial_{index + 1}_error", "; ".join(result.reasons) or "the first request from zero failed")
            continue
        measured.append(cold_start_trial(run, first))
        if first.get("receipt"):
            receipts.append(Receipt(**first["receipt"]))
    summary = cold_start_summary(measured)
    run.record("trials_completed", len(measured))
    # Completion is not delivery: the first turn after scale-from-zero must be stored too.
    delivery = run.audit_delivery(receipts)
    run.record("first_turns_acknowledged", len(receipts))
    run.record("first_turns_lost", delivery.lost)
    for name in ("p50_s", "p95_s", "p99_s", "max_s"):
        run.record(f"cold_start_{name}", summary[name], "s")
    run.record("percentile_definition", PERCENTILE)
    run.keep(judge_cold_start(trials, len(measured), len(receipts), delivery.lost, could_not_ask, summary["p95_s"],
                              slo_p95_s))
    plt = pyplot()
    if measured:
        phases = cold_start_phases(measured)
        figure, axis = plt.subplots(figsize=(7, 0.5 + 0.35 * len(phases)))
        phases.index = [f"trial {i + 1}" for i in range(len(phases))]
        phases.plot.barh(stacked=True, ax=axis, width=0.7)
        axis.axvline(slo_p95_s, color="#c62828", linestyle="--", label=f"SLO P95 {slo_p95_s:g}s")
        axis.set_xlabel("seconds from request to first token")
        axis.legend(fontsize=7, loc="lower right")
        axis.invert_yaxis()
        if run.target_events(since=measured[0].sent):
            run.record("phase_means_s", {k: round(float(v), 4) for k, v in phases.mean().items()})
            run.record("trial_phases_s", [{k: round(float(v), 4) for k, v in row.items()}
                                          for _, row in phases.iterrows()])  # which phase a slow trial spent
        else:  # the target keeps no replica events: one phase, request to first token
            run.record("phases_available", False)
    else:  # the evidence still shows the chart's place, and why it is empty
        figure, axis = plt.subplots(figsize=(7, 1.0))
        axis.text(0.5, 0.5, "no cold-start trial completed", ha="center", va="center")
        axis.set_axis_off()
    run.save_plot("cold-start-phases", figure)
    return summary
