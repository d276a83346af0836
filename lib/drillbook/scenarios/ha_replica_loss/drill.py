"""The HA drill: agent sessions under Locust load, replicas killed mid-session; what it measures.

Measuring is here; judging the recovery is drillbook.scenarios.ha_replica_loss.judge (pure, over
what this records) and the chart is .plot.
"""

from __future__ import annotations

from typing import Any

from drillbook.drills import ReadinessWatch, keep_observations
from drillbook.measure import PERCENTILE, READY_FROM_EVENTS, SUSTAIN_READINGS, ha_figures, recovered_at, replicas_ready_at
from drillbook.observation import ReplicaObservation
from drillbook.runbook import Run
from drillbook.scenarios.ha_replica_loss import HOLD_S
from drillbook.scenarios.ha_replica_loss.judge import judge_recovery
from drillbook.scenarios.ha_replica_loss.plot import latency_and_errors


def ha_replica_loss(run: Run, users: int, duration_s: float, kill_count: int, kill_after_s: float,
                    max_error_rate: float, max_recovery_s: float, max_p95_ms: float, think_time_s: float = 0.2,
                    load_workers: int = 0, kill_signal: str = "SIGKILL", tolerance: float = 2.0,
                    hold_s: float = HOLD_S) -> dict[str, Any]:
    """Agent sessions under Locust load; kill replicas mid-session; recovery, errors, p95 and delivery."""
    import time

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
    keep_observations(run, "target-events.jsonl", events)
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
    recovery = judge_recovery(figures.recovery_time_s, fault_at, landed_at, ready_at, figures.load_end, readings,
                              max_recovery_s, hold_s, duration_s)
    if recovery.lower_bound:
        run.record("recovery_time_lower_bound", True)
    if recovery.too_short:
        run.cannot_judge(recovery.too_short, unless_failed=True)
    run.check("service recovery time", recovery.seconds, "<=", max_recovery_s, "s", missing=recovery.missing)
    run.check("p95 over the run", figures.p95_ms, "<=", max_p95_ms, "ms",
              missing="no turn completed during the load")
    run.check("chaos experiment's steady-state hypothesis held", 1.0 if result.verdict == "PASS" else 0.0
              if result.verdict == "FAIL" else None, ">=", 1.0,
              missing=f"the experiment ended {result.verdict}")
    figure = latency_and_errors(turns, fault_at, window_end, figures.recovery_time_s)
    run.save_plot("latency-errors", figure)
    return {"delivery": delivery.summary()}
