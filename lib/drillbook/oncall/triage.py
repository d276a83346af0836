"""Agent latency triage: read-only signals from the target, and findings in plain words.

Two samples of the platform's own metrics a window apart give per tenant: requests, failures
(HTTP 5xx), throttling (429), p95 latency, share of inference slot time and mean queue wait for
a slot. Replica health and restarts, recent events and the slowest recent requests complete the
picture. Nothing is changed. Where a target does not expose a signal it is listed as not
available, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from drillbook.targets import Target
from drillbook.targets.capabilities import Diagnostics

NOTABLE_EVENTS = {"replica_exited", "replica_killed", "replica_unready", "restart_scheduled", "store_destroyed",
                  "store_restored", "store_recreated", "tenant_limit_changed", "scaled"}
HOG_SHARE = 0.6  # one tenant holding this share of slot time while others are active is named
ERROR_RATE = 0.01
THROTTLED_RATE = 0.05


@dataclass
class Symptom:
    """What triage saw, in plain words, how bad it is, and the runbook to open next (if any).
    (Not an evidence Finding: drillbook.evidence.verify; not a TargetCheck row: drillbook.access.)"""

    severity: str  # critical, warning, info
    text: str
    next_runbook: str | None = None


@dataclass
class Signals:
    """What triage read; every field that the target could not give stays empty and is named in `missing`."""

    window_s: float
    replicas: dict[str, dict[str, int]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    tenants: dict[str, dict[str, float]] = field(default_factory=dict)
    slowest: list[dict[str, Any]] = field(default_factory=list)
    store_healthy: bool | None = None
    missing: list[str] = field(default_factory=list)


def collect(target: Target, window_s: float = 10.0) -> Signals:
    """Read the signals over window_s seconds (two samples of the metrics); change nothing."""
    signals = Signals(window_s)
    for role in ("agent", "inference"):
        try:
            if target.has(role):
                signals.replicas[role] = {"desired": target.desired(role), "ready": target.ready(role)}
        except Exception as error:  # noqa: BLE001 - an unanswered status is itself a signal
            signals.replicas[role] = {"desired": -1, "ready": -1}
            signals.missing.append(f"{role} status: {error}")
    try:
        signals.store_healthy = target.store_healthy()
    except Exception:  # noqa: BLE001
        signals.missing.append("store health")
    if not isinstance(target, Diagnostics):
        signals.missing += ["per-tenant latency and errors", "inference slot share and queue wait",
                            "slowest requests", "replica restarts"]
        signals.events = [e for e in target.events() if e["kind"] in NOTABLE_EVENTS][-20:]
        return signals
    found = target.diagnose(window_s, NOTABLE_EVENTS)
    for role, restarts in found["restarts"].items():
        signals.replicas.setdefault(role, {})["restarts_in_window"] = restarts
    signals.tenants, signals.slowest, signals.events = found["tenants"], found["slowest"], found["events"]
    signals.missing += found["missing"]
    return signals


def findings(signals: Signals) -> list[Symptom]:
    """Plain-words findings, most severe first; one "nothing alarming" finding when all is well."""
    found: list[Symptom] = []
    if signals.store_healthy is False:
        found.append(Symptom("critical", "the state store is not serving", "restore-agent-state"))
    for role, counts in signals.replicas.items():
        if counts.get("desired", 0) > 0 and counts.get("ready", 0) < counts["desired"]:
            found.append(Symptom("critical", f"{role}: {counts['ready']} of {counts['desired']} replicas ready",
                                 "ha-replica-loss"))
        if counts.get("restarts_in_window", 0) > 0:
            found.append(Symptom("warning", f"{role}: {counts['restarts_in_window']} replica restarts in the last "
                                            f"{signals.window_s:g}s", "ha-replica-loss"))
    active = {t: v for t, v in signals.tenants.items() if v["requests"] > 0 or v["slot_share"] > 0}
    if len(active) >= 2:
        hog, figures = max(active.items(), key=lambda item: item[1]["slot_share"])
        if figures["slot_share"] >= HOG_SHARE:
            others = [v["queue_wait_ms"] for t, v in active.items() if t != hog and v["queue_wait_ms"] is not None]
            waits = (f"; queue wait for the others is {max(others):.0f} ms per slot"
                     f" ({hog}: {figures['queue_wait_ms'] or 0:.0f} ms)") if others else ""
            found.append(Symptom("warning", f"tenant {hog} holds {figures['slot_share']:.0%} of inference slot time"
                                            f"{waits}", "shed-noisy-tenant"))
    for tenant, figures in signals.tenants.items():
        if figures["requests"] >= 10 and figures["failed"] / figures["requests"] > ERROR_RATE:
            found.append(Symptom("critical", f"tenant {tenant}: {figures['failed'] / figures['requests']:.1%} of "
                                             f"requests failed (HTTP 5xx)", "ha-replica-loss"))
        if figures["requests"] >= 10 and figures["throttled"] / figures["requests"] > THROTTLED_RATE:
            found.append(Symptom("info", f"tenant {tenant} is rate-limited: {figures['throttled'] / figures['requests']:.0%}"
                                         " of its requests got HTTP 429"))
    order = {"critical": 0, "warning": 1, "info": 2}
    found.sort(key=lambda f: order[f.severity])
    if not [f for f in found if f.severity != "info"]:
        found.insert(0, Symptom("info", "nothing alarming: replicas ready, store serving, no tenant dominating "
                                        "inference, error rates under 1%"))
    return found


def next_runbook(found: list[Symptom]) -> str | None:
    return next((f.next_runbook for f in found if f.next_runbook), None)


def tables(signals: Signals) -> dict[str, Any]:
    """The signals as DataFrames for the notebook: replicas, tenants, events, slowest requests."""
    import pandas as pd

    return {"replicas": pd.DataFrame(signals.replicas).T,
            "tenants": pd.DataFrame(signals.tenants).T.round(4),
            "events": pd.DataFrame(signals.events)[["kind", "service", "replica"]].tail(10)
            if signals.events and "service" in signals.events[0] else pd.DataFrame(signals.events),
            "slowest": pd.DataFrame(signals.slowest)}


def judge(run: Any, signals: Signals, found: list[Symptom]) -> None:
    """Record the signals and findings; the verdict is PASS only when nothing needs attention."""
    run.record("replicas", signals.replicas)
    run.record("tenants", signals.tenants)
    run.record("not_available", signals.missing)
    run.record("findings", [f"{f.severity}: {f.text}" for f in found])
    run.record("next_runbook", next_runbook(found))
    run.check("findings needing attention", sum(1 for f in found if f.severity in ("critical", "warning")), "<=", 0)
