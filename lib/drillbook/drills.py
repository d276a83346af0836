"""The steps of each drill, so that runbook notebooks stay a handful of calls.

Each function runs a scenario through a `Run`, records its figures, judges its SLOs and saves
its plot; the notebook shows the result.
"""

from __future__ import annotations

import math
from typing import Any

from drillbook.measure import (PERCENTILE, READY_FROM_EVENTS, SUSTAIN_READINGS, ColdStartTrial, cold_start_phases,
                               cold_start_summary, ha_figures, load_needed_after_fault, recovered_at, replicas_ready_at,
                               still_down_at)
from drillbook.observation import ReplicaObservation
from drillbook.plots import pyplot
from drillbook.runbook import Run
from drillbook.scenarios.ha_replica_loss import HOLD_S

OBSERVATIONS = "observations"  # a run's raw readings, kept for `drillbook verify --recompute`


def _keep(run: Run, name: str, rows: list[dict[str, Any]]) -> None:
    """Keep raw observations in the run's evidence (observations/<name>, one JSON object a line)."""
    import json

    folder = run.work_dir / OBSERVATIONS
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(json.dumps(row, default=str) + "\n" for row in rows))


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


class ReadinessWatch:
    """Reads a role's replicas in a thread while something happens, each reading stamped with
    when it started and ended and kept raw in the evidence (observations/readiness-<role>.jsonl);
    for targets that keep no replica events. Precision: the sampling interval."""

    def __init__(self, run: Run, role: str, interval_s: float = 0.25) -> None:
        import threading

        from drillbook.observation import ObservationLog

        self.run, self.role, self.interval_s = run, role, interval_s
        self.log = ObservationLog(run.work_dir / OBSERVATIONS / f"readiness-{role}.jsonl")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    @property
    def samples(self) -> list[Any]:
        return list(self.log.entries)

    def _sample(self) -> None:
        target = self.run.workload()
        while not self._stop.is_set():
            self.log.add(target.observe(self.role))
            self._stop.wait(self.interval_s)

    def __enter__(self) -> "ReadinessWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


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
    if trials and len(could_not_ask) == trials:
        # Nothing could even ask the target (no kubeconfig, a command not found): a setup
        # problem, not a measured miss. A trial that asked and missed its tolerance stays a miss.
        run.cannot_judge(f"no cold-start trial could run: {could_not_ask[0]}")
    # Completion is not delivery: the first turn after scale-from-zero must be stored too.
    delivery = run.audit_delivery(receipts)
    run.record("first_turns_acknowledged", len(receipts))
    run.record("first_turns_lost", delivery.lost)
    run.check("first turns from zero lost", delivery.lost if measured and len(receipts) == len(measured) else None,
              "<=", 0, missing="no cold-start trial completed" if not measured else
              f"only {len(receipts)} of {len(measured)} first turns were acknowledged with a receipt to audit")
    for name in ("p50_s", "p95_s", "p99_s", "max_s"):
        run.record(f"cold_start_{name}", summary[name], "s")
    run.record("percentile_definition", PERCENTILE)
    run.check("cold-start P95 time to first token", summary["p95_s"], "<=", slo_p95_s, "s",
              missing="no cold-start trial completed")
    # The threshold does not follow the trial count: every trial must complete, so total
    # failure (no trial completed) fails here too.
    run.check("cold-start trials that did not complete", trials - len(measured), "<=", 0)
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


def restore_reason(verdict: str, reasons: list[str], backup: dict[str, Any], measured: dict[str, Any]) -> str:
    """Why the restore drill could not measure a figure, told apart: no backup taken, a backup
    that holds less than the store had, the restore failed, the store did not serve again, or it
    served without the data."""
    held = (backup.get("store_before") or {}).get("sessions_read")
    claimed = (backup.get("backup") or {}).get("sessions") if isinstance(backup.get("backup"), dict) else None
    restore_failed = next((r for r in reasons if "restore-the-latest-backup" in r), None)
    missing = measured.get("missing_before_backup") or {}
    if backup and not backup.get("created"):
        return "no backup was taken before the disaster"
    if held is not None and claimed is not None and claimed < held:
        return f"the backup held {claimed} sessions; the store had {held}"
    if restore_failed:
        return f"the restore failed: {restore_failed.split('failed: ', 1)[-1][:120]}"
    if not measured:
        return f"the restore experiment ended {verdict} before it measured anything"
    if missing.get("turns"):
        return (f"the store served again, but {missing['turns']} of {missing['acknowledged']} turns acknowledged "
                "before the backup were missing")
    if not measured.get("served"):
        return "the store did not serve again within restore_timeout_s"
    return "the restored store could not be read back"


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
    why = restore_reason(result.verdict, result.reasons, backup, measured)
    run.record("store_served_after_restore", measured.get("served"))
    run.record("missing_before_backup", measured.get("missing_before_backup"))
    run.check("RTO", measured.get("rto_s"), "<=", max_rto_s, "s", missing=why)
    run.check("RPO (data-loss window)", measured.get("rpo_s"), "<=", max_rpo_s, "s",
              missing="no backup was taken before the disaster" if not measured.get("backup_created") else why)
    run.check("integrity of restored sessions", measured.get("integrity"), ">=", 1.0, missing=why)
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


def _recovery_missing(ready_at: float | None, after_kill: float | None) -> str:
    """Why no recovery time could be measured, in words an on-call engineer can act on."""
    seen = f"the load ended {after_kill:.1f}s after the kill" if after_kill is not None else "no turn completed"
    if ready_at is None:
        return f"the killed replicas were not seen ready again: {seen}"
    return f"the service was not seen back at its baseline latency before the end: {seen}"


def ha_replica_loss(run: Run, users: int, duration_s: float, kill_count: int, kill_after_s: float,
                    max_error_rate: float, max_recovery_s: float, max_p95_ms: float, think_time_s: float = 0.2,
                    load_workers: int = 0, kill_signal: str = "SIGKILL", tolerance: float = 2.0,
                    hold_s: float = HOLD_S) -> dict[str, Any]:
    """Agent sessions under Locust load; kill replicas mid-session; recovery, errors, p95 and delivery."""
    import time

    from drillbook.measure import percentile

    load = run.start_load("agent-sessions", users=users, duration_s=duration_s,
                          settings={"think-time": str(think_time_s)}, workers=load_workers)
    flowing = load.wait_until_flowing()
    run.event("load_flowing", flowing=flowing)
    time.sleep(kill_after_s)  # the baseline, measured from when requests actually flow
    with ReadinessWatch(run, "agent") as watch:
        # The experiment's own traffic through the kill is held to the same error budget.
        result = run.chaos("ha-replica-loss", kill_count=kill_count, kill_signal=kill_signal, kill_after_s=0.0,
                           traffic_sessions=2, traffic_s=2.0, max_error_rate=max_error_rate)
        load_result = load.wait()
    fault = result.measurements.get("fault_injected") or {}
    fault_at = fault.get("at")
    killed = fault.get("replicas", [])
    landing = fault.get("landed") or {}
    landed_at = landing.get("at") if landing.get("landed") else None  # not landed: Run.chaos made the run ERROR
    events = run.target_events(since=fault_at or 0.0)
    _keep(run, "target-events.jsonl", events)
    # The target's own events when they follow the killed replicas (the sandbox restarts them
    # under the same name); else the readings, counted only from those that began after the
    # kill was seen to land, held for SUSTAIN readings (a pod's replacement has a new name).
    ready_at = replicas_ready_at(events, killed, fault_at) if fault_at and landed_at is not None else None
    readings = [*(ReplicaObservation.from_json(o) for o in fault.get("observations") or []), *watch.samples]
    if ready_at is not None:
        run.record("replicas_ready_from", READY_FROM_EVENTS)
    else:
        ready_at = recovered_at(readings, landed_at, SUSTAIN_READINGS)
        run.record("replicas_ready_from", f"readings every {watch.interval_s:g}s, {SUSTAIN_READINGS} in a row")
    turns = load_result.requests[load_result.requests["name"] == "turn"]
    figures = ha_figures(turns, fault_at, ready_at, tolerance=tolerance, hold_s=hold_s)
    baseline_p95, error_rate = figures.baseline_p95_ms, figures.error_rate_fault
    window_end = (ready_at or fault_at or 0.0) + hold_s
    delivery = run.audit_delivery(load_result.receipts)
    run.record("experiment_verdict", result.verdict)
    # What the experiment's own clients saw fail through the kill, by the platform's reason.
    run.record("experiment_traffic_errors", (result.measurements.get("traffic_fault") or {}).get("errors", {}))
    run.record("killed_replicas", killed)
    run.record("requests", load_result.total_requests)
    run.record("baseline_p95_ms", baseline_p95, "ms")
    run.record("p95_ms", figures.p95_ms, "ms")
    run.record("replicas_recovered_s", figures.replicas_recovered_s, "s")
    run.record("recovery_time_s", figures.recovery_time_s, "s")
    run.record("error_rate_fault", error_rate)
    run.record("acknowledged_turns", delivery.acknowledged)
    run.record("lost_turns", delivery.lost)
    run.record("duplicated_turns", delivery.duplicated)
    after_kill = figures.load_end - fault_at if fault_at and figures.load_end is not None else None
    run.record("load_after_kill_s", after_kill, "s")
    run.record("percentile_definition", PERCENTILE)
    run.check("acknowledged turns lost", delivery.lost, "<=", 0)
    run.check("acknowledged turns duplicated or out of order", delivery.misordered, "<=", 0)
    run.check("error rate in the fault window", error_rate, "<=", max_error_rate,
              missing="the fault was never injected" if not fault_at else "no turn was in flight in the fault window")
    service_recovered = figures.recovery_time_s
    if fault_at and landed_at is not None and service_recovered is None:
        load_end = figures.load_end
        short = load_needed_after_fault(load_end, landed_at, max_recovery_s, hold_s) or 0.0
        if ready_at is not None and ready_at - fault_at > max_recovery_s:
            service_recovered = ready_at - fault_at  # a lower bound: the service cannot be back before its replicas
            run.record("recovery_time_lower_bound", True)
        elif short > 0 and (down := still_down_at(readings, fault_at + max_recovery_s)) is not None:
            service_recovered = down - fault_at  # a lower bound: a reading after the limit saw replicas missing
            run.record("recovery_time_lower_bound", True)
        elif short > 0:
            seen = (load_end - landed_at) if load_end is not None else 0.0
            run.cannot_judge(f"run too short to judge recovery: load ran {seen:.1f}s after the kill; "
                             f"use duration_s >= {math.ceil(duration_s + short)}", unless_failed=True)
        elif ready_at is None and load_end is not None:
            service_recovered = load_end - fault_at  # not back in all the load after the kill: at least this
            run.record("recovery_time_lower_bound", True)
    run.check("service recovery time", service_recovered, "<=", max_recovery_s, "s",
              missing="the fault was never injected (see the experiment's journal)" if not fault_at else
              _recovery_missing(ready_at, after_kill))
    run.check("p95 over the run", figures.p95_ms, "<=", max_p95_ms, "ms",
              missing="no turn completed during the load")
    run.check("chaos experiment's steady-state hypothesis held", 1.0 if result.verdict == "PASS" else 0.0
              if result.verdict == "FAIL" else None, ">=", 1.0,
              missing=f"the experiment ended {result.verdict}")
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
        if figures.recovery_time_s is not None and fault_at:
            axis.axvline(fault_at - origin + figures.recovery_time_s, color="#2e7d32", linestyle="--")
        axis.legend(fontsize=7)
    latency.set_ylabel("ms")
    errors.set_ylim(bottom=0)
    errors.set_xlabel("seconds into the run (shaded: fault until replicas ready; dashed: service recovered)")
    run.save_plot("latency-errors", figure)
    return {"delivery": delivery.summary()}


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
    usage = {tenant: after.get(tenant, {}).get("gpu_seconds", 0.0) - before.get(tenant, {}).get("gpu_seconds", 0.0)
             for tenant in after}
    total = sum(usage.values()) or 1.0
    waits = {tenant: (after[tenant].get("queue_wait_sum", 0.0) - before.get(tenant, {}).get("queue_wait_sum", 0.0)) /
             max(1.0, after[tenant].get("queue_wait_count", 0.0) - before.get(tenant, {}).get("queue_wait_count", 0.0))
             for tenant in after}
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
    run.record("slot_share", {tenant: round(value / total, 4) for tenant, value in usage.items()})
    run.record("mean_queue_wait_s", {tenant: round(value, 5) for tenant, value in waits.items()})
    unmeasured = (f"the noisy-neighbour experiment ended {result.verdict} before it measured the victim"
                  if not isolation else "the victim completed no turn in its baseline or in the burst")
    run.check("victim p95 ratio (burst over own baseline)", isolation.get("victim_p95_ratio"), "<=",
              max_victim_p95_ratio, missing=unmeasured)
    run.check("victim error rate", isolation.get("victim_error_rate"), "<=", max_victim_error_rate,
              missing=unmeasured)
    plt = pyplot()
    figure, (latency, share) = plt.subplots(1, 2, figsize=(8, 2.6))
    windows = {"baseline": isolation.get("baseline") or {}, "aggressor burst": isolation.get("during") or {}}
    latency.bar([f"{w}\np50" for w in windows] + [f"{w}\np95" for w in windows],
                [v.get("p50_ms", 0) for v in windows.values()] + [v.get("p95_ms", 0) for v in windows.values()],
                color=["#1565c0", "#c62828", "#1565c0", "#c62828"])
    latency.set_ylabel(f"victim ({victim_tenant}) ms")
    share.bar(list(usage), [value / total for value in usage.values()], color="#6a1b9a")
    share.set_ylabel("share of GPU-seconds")
    run.save_plot("victim-vs-aggressor", figure)
    return isolation
