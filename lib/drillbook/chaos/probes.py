"""Chaos Toolkit probes that drillbook's experiments name: readiness, client traffic through the
fault, and the judgements the steady-state hypotheses make on what was measured.

A judging probe runs twice, in the hypothesis before the method and in the one after it, and
the run's context says which (drillbook.chaos.control follows the phases): before, it takes a
short fresh sample (or the baseline); after, it judges what the method recorded, and what the
method did not record fails.
"""

from __future__ import annotations

import math
import time
from typing import Any

import httpx

from drillbook.agentapi import open_session, receipt, send_turn
from drillbook.chaos.actions import FLOOD_INTERVAL_S
from drillbook.chaos.context import RunContext
from drillbook.polling import wait_until
from drillbook.chaos.traffic import drive, first_token_latency
from drillbook.delivery import Receipt, audit_delivery
from drillbook.evidence.summary import SloCheck
from drillbook.errors import FaultNotLanded
from drillbook.measure import FLOOD_OVERSUBSCRIPTION, flood_held_through, restore_figures
from drillbook.observation import TierObservation, observe_tier

__all__ = ["all_replicas_ready", "service_available", "client_traffic", "traffic_within_budget",
           "traffic_error_rate_below", "victim_p95_ratio_within", "flood_held", "first_request_from_zero",
           "cold_start_within", "write_sessions", "verify_restore", "store_recovered", "promql_within"]


def all_replicas_ready(service: str, timeout_s: float = 30.0, configuration: dict[str, Any] | None = None) -> bool:
    """True once every replica the service wants is ready (waits up to timeout_s)."""
    run = RunContext.of(configuration or {})
    return wait_until(lambda: run.target.observe(service).full, timeout_s)


def service_available(service: str, timeout_s: float = 30.0, configuration: dict[str, Any] | None = None) -> bool:
    """True once at least one replica of the service is ready (waits up to timeout_s)."""
    run = RunContext.of(configuration or {})
    return wait_until(lambda: run.target.ready(service) >= 1, timeout_s)


def client_traffic(window: str = "fault", sessions: int = 8, duration_s: float = 5.0, tenant: str | None = None,
                   max_tokens: int | None = None, think_s: float = 0.0,
                   configuration: dict[str, Any] | None = None) -> dict[str, Any]:
    """Drive client sessions through the gateway for duration_s; the window is kept for judging."""
    run = RunContext.of(configuration or {})
    gateway, name, key = run.tenant_key(tenant)
    result = drive(gateway, name, key, window, sessions=sessions, duration_s=duration_s, max_tokens=max_tokens,
                   think_s=think_s, publish=run.publish_window, api=run.target.api)
    return result.summary()


def traffic_within_budget(max_error_rate: float = 0.0, window: str = "fault", sample_sessions: int = 4,
                          sample_s: float = 1.0, configuration: dict[str, Any] | None = None) -> bool:
    """Before the method: a short fresh sample of client traffic is within budget. After: the
    method's window is (and it acknowledged turns); a method that drove no such window fails."""
    run = RunContext.of(configuration or {})
    if run.judging_after_method():
        recorded = run.window(window)
        if recorded is None:
            return False
        run.record_measurement(f"traffic_{window}", recorded.summary())
    else:
        gateway, name, key = run.tenant_key(None)
        recorded = drive(gateway, name, key, "sample", sessions=sample_sessions, duration_s=sample_s,
                         publish=run.publish_window, api=run.target.api)
    return recorded.acknowledged > 0 and recorded.error_rate <= max_error_rate


def traffic_error_rate_below(limit: float, window: str = "fault", configuration: dict[str, Any] | None = None) -> bool:
    """Safeguard: False as soon as the live window's error rate passes the limit (after 10 requests)."""
    run = RunContext.of(configuration or {})
    live = run.window(window)
    if live is None or live.acknowledged + live.failed < 10:
        return True
    return live.error_rate <= limit


def victim_p95_ratio_within(max_ratio: float, victim_tenant: str, sessions: int = 2, baseline_s: float = 3.0,
                            configuration: dict[str, Any] | None = None) -> bool:
    """The victim's p95 during the aggressor window over its own baseline p95 is within max_ratio.

    Before the method: measures the baseline (victim alone) and passes when it was served. After:
    judges the "victim" window the method recorded against that baseline (a method stopped
    before its victim traffic is measured now, with the aggressor still in place).
    """
    run = RunContext.of(configuration or {})
    gateway, name, key = run.tenant_key(victim_tenant)
    if not run.judging_after_method():
        baseline = drive(gateway, name, key, "baseline", sessions=sessions, duration_s=baseline_s,
                         publish=run.publish_window, api=run.target.api)
        return baseline.acknowledged > 0 and baseline.error_rate == 0
    baseline = run.window("baseline")
    if baseline is None:
        return False
    during = run.window("victim")
    if during is None:
        during = drive(gateway, name, key, "victim", sessions=sessions, duration_s=baseline_s,
                       publish=run.publish_window, api=run.target.api)
    ratio = during.percentile_ms(0.95) / baseline.percentile_ms(0.95)
    run.record_measurement("isolation", {"victim_p95_ratio": ratio, "baseline": baseline.summary(),
                                         "during": during.summary(), "victim_error_rate": during.error_rate})
    return not math.isnan(ratio) and ratio <= max_ratio and during.error_rate == 0


def flood_held(victim_tenant: str, needed: float = FLOOD_OVERSUBSCRIPTION,
               configuration: dict[str, Any] | None = None) -> dict[str, Any]:
    """After the victim's window: the shared tier read twice more (FLOOD_INTERVAL_S apart), and
    the flood judged from the reading that saw it land (start_aggressor's last) through the
    window to its end (measure.flood_held_through; kept as measurement "contention"). A flood that did
    not hold did not share the victim's window: FaultNotLanded, and the run is ERROR."""
    run = RunContext.of(configuration or {})
    flood = run.measurement("flood") or {}
    observations = flood.get("observations") or []
    if not (flood.get("landed") or {}).get("landed") or not observations:
        raise FaultNotLanded("the aggressor's flood held through the victim's window",
                             "no flood seen to land before it")
    landed = TierObservation.from_json(observations[-1])
    after = [observe_tier(run.target.tenant_metrics)]
    time.sleep(FLOOD_INTERVAL_S)
    after.append(observe_tier(run.target.tenant_metrics))
    held, whole = flood_held_through(landed, after, victim_tenant, needed)
    run.record_measurement("contention", {"landed": landed.to_json(), "after": [o.to_json() for o in after],
                                          "held": held.to_json(), "needed": needed,
                                          "seen": None if whole is None else whole.to_json()})
    if not held.landed:
        raise FaultNotLanded("the aggressor's flood held through the victim's window", held.seen)
    return held.to_json()


def first_request_from_zero(idle_s: float = 1.0, tenant: str | None = None,
                            configuration: dict[str, Any] | None = None) -> dict[str, float]:
    """After idle_s at zero replicas, send one streamed turn; record time to first token."""
    run = RunContext.of(configuration or {})
    time.sleep(idle_s)
    gateway, name, key = run.tenant_key(tenant)
    trial = first_token_latency(gateway, key, tenant=name, api=run.target.api)
    run.append_measurement("cold_start", trial)
    return trial


def cold_start_within(max_s: float, tenant: str | None = None, configuration: dict[str, Any] | None = None) -> bool:
    """Before the method: a warm first request is within max_s. After: every first request from
    zero the method measured is (a method that measured none fails)."""
    run = RunContext.of(configuration or {})
    if run.judging_after_method():
        trials = run.measurement("cold_start") or []
        return bool(trials) and all(t["first_token_s"] <= max_s for t in trials)
    gateway, _, key = run.tenant_key(tenant)
    return first_token_latency(gateway, key, api=run.target.api)["first_token_s"] <= max_s


def write_sessions(phase: str, sessions: int = 3, turns: int = 3, tenant: str | None = None,
                   configuration: dict[str, Any] | None = None) -> int:
    """Write sessions and keep the receipts of their acknowledged turns under the phase's name."""
    run = RunContext.of(configuration or {})
    gateway, name, key = run.tenant_key(tenant)
    written = []
    api = run.target.api
    with httpx.Client(base_url=gateway, headers=api.auth(key), timeout=30.0) as http:
        for _ in range(sessions):
            session_id = open_session(http, api)
            for turn in range(turns):
                idempotency_key, text = f"{session_id}-{phase}-{turn}", f"{phase} {turn} of {session_id}"
                answer = send_turn(http, api, session_id, text, idempotency_key).raise_for_status().json()
                written.append(receipt(api, answer, session_id, name, text, idempotency_key))
    run.merge_measurement("receipts", phase, written)
    return len(written)


def verify_restore(timeout_s: float = 60.0, configuration: dict[str, Any] | None = None) -> dict[str, Any]:
    """After a restore: wait until the platform serves again, then read every written session back.

    RTO: from the disaster to healthy with verified data. RPO: acknowledged turns lost, and the
    time from the last backup to the disaster. Integrity: share of sessions from before the
    backup whose every turn and chain verify.
    """
    run = RunContext.of(configuration or {})
    disaster = (run.measurement("disaster") or {}).get("at")
    backup = run.measurement("backup") or {}
    receipts = {phase: [Receipt(**r) for r in rows] for phase, rows in (run.measurement("receipts") or {}).items()}
    deadline = time.monotonic() + timeout_s
    with run.verifier() as verifier:
        result: dict[str, Any] = {"healthy": False, "served": False, "verifiable": verifier is not None,
                                  "backup_created": bool(backup.get("created"))}
        if verifier is None:  # healthy is all that can be said: RPO and integrity stay unmeasured
            if wait_until(run.target.store_healthy, timeout_s, 0.2):
                result.update(healthy=True, served=True, rto_s=time.time() - disaster if disaster else None,
                              rpo_turns=None, rpo_s=None, integrity=None)
        while verifier is not None:
            try:
                served = bool(run.target.store_healthy())
                before = audit_delivery(receipts.get("before-backup", []), verifier) if served else None
            except Exception:  # noqa: BLE001 - the platform is still down
                served, before = False, None
            result["served"] = result["served"] or served
            if before is not None:  # what the served store holds of what was written before the backup
                result["missing_before_backup"] = {"turns": before.lost, "acknowledged": before.acknowledged}
                result["integrity"] = (sum(1 for s in before.sessions if s.chain_ok and not s.lost)
                                       / len(before.sessions)) if before.sessions else None
            if served and before is not None and before.lost == 0:
                after = audit_delivery(receipts.get("after-backup", []), verifier)
                sessions = before.sessions
                acknowledged = before.acknowledged + after.acknowledged
                figures = restore_figures(
                    disaster_at=disaster or time.time(), healthy_with_data_at=time.time(),
                    last_backup_at=backup.get("at") if backup.get("created") else None,
                    acknowledged_before_disaster=acknowledged,
                    acknowledged_after_restore=acknowledged - after.lost - before.lost,
                    sessions_checked=len(sessions),
                    sessions_verified=sum(1 for s in sessions if s.chain_ok and not s.lost))
                result.update(healthy=True, rto_s=figures.rto_s if disaster else None,
                              rpo_turns=figures.rpo_turns, rpo_s=figures.rpo_s, integrity=figures.integrity)
                break
            if time.monotonic() >= deadline:
                break
            time.sleep(0.2)
    run.record_measurement("restore", result)
    return result


def store_recovered(max_rto_s: float, max_rpo_s: float, configuration: dict[str, Any] | None = None) -> bool:
    """Before the method: the store is healthy. After: RTO and RPO (the data-loss window, in
    seconds) within target, integrity 100% (a method that verified no restore fails)."""
    run = RunContext.of(configuration or {})
    if not run.judging_after_method():
        return run.target.store_healthy()
    measured = run.measurement("restore")
    if measured is None:
        return False
    return (bool(measured.get("healthy")) and measured.get("rto_s") is not None
            and measured.get("rpo_s") is not None and measured["rto_s"] <= max_rto_s
            and measured["rpo_s"] <= max_rpo_s and measured.get("integrity") == 1.0)


def promql_within(query: str, threshold: float, comparison: str = "<=",
                  configuration: dict[str, Any] | None = None) -> bool:
    """An SLO stated as PromQL, asked of the target profile's Prometheus (prometheus.url) now, with
    $__range the time since the experiment started. Each answer (the query as sent, the value and
    when, or why there is none) is kept in the run's measurements under "promql"; no number fails."""
    from drillbook import promql
    from drillbook.errors import ConfigError

    run = RunContext.of(configuration or {})
    spec = run.target.profile.spec.prometheus
    if spec is None:
        raise ConfigError(f"promql_within needs a prometheus section in target profile {run.target.name}")
    answer = promql.instant(spec.url, promql.render(query, time.time() - run.started_at), timeout_s=spec.timeout_s)
    run.append_measurement("promql", {**answer.record(), "phase": run.phase, "comparison": comparison,
                                      "threshold": threshold})
    return SloCheck(name=query, comparison=comparison, threshold=threshold, value=answer.value).passed  # type: ignore[arg-type]
