"""Agent latency triage: read-only signals from the target, and findings in plain words.

Two samples of the platform's own metrics a window apart give per tenant: requests, failures
(HTTP 5xx), throttling (429), p95 latency, share of inference slot time and mean queue wait for
a slot. Replica health and restarts, recent events and the slowest recent requests complete the
picture. Nothing is changed. Where a target does not expose a signal it is listed as not
available, never guessed.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from drillbook.targets import Target

NOTABLE_EVENTS = {"replica_exited", "replica_killed", "replica_unready", "restart_scheduled", "store_destroyed",
                  "store_restored", "store_recreated", "tenant_limit_changed", "scaled"}
HOG_SHARE = 0.6  # one tenant holding this share of slot time while others are active is named
ERROR_RATE = 0.01
THROTTLED_RATE = 0.05


@dataclass
class Finding:
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


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def _delta(after: dict, before: dict) -> dict:
    return {key: value - before.get(key, 0.0) for key, value in after.items()}


def _histogram_p95(samples: dict, name: str, tenant: str) -> float | None:
    buckets = sorted((float(dict(labels)["le"]), value) for (metric, labels), value in samples.items()
                     if metric == f"{name}_bucket" and dict(labels).get("tenant") == tenant)
    total = buckets[-1][1] if buckets else 0
    if total <= 0:
        return None
    for bound, count in buckets:
        if count >= 0.95 * total:
            return bound if not math.isinf(bound) else buckets[-2][0] if len(buckets) > 1 else None
    return None


def _by_tenant(samples: dict, name: str, label: str = "tenant") -> dict[str, float]:
    found: dict[str, float] = {}
    for (metric, labels), value in samples.items():
        labels_dict = dict(labels)
        if metric == name and label in labels_dict:
            found[labels_dict[label]] = found.get(labels_dict[label], 0.0) + value
    return found


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
    handle = getattr(target, "handle", None)
    if handle is None:
        signals.missing += ["per-tenant latency and errors", "inference slot share and queue wait",
                            "slowest requests", "replica restarts"]
        signals.events = [e for e in target.events() if e["kind"] in NOTABLE_EVENTS][-20:]
        return signals
    gateway = handle.gateway_url
    with handle.control() as control:
        status = control.status()["services"]
    model_urls = [r["url"] for r in status["model"]["replicas"] if r["url"]]
    restarts_before = {name: sum(r.get("restarts", 0) for r in svc["replicas"]) for name, svc in status.items()}
    gateway_before = _scrape(gateway)
    model_before = [_scrape(url) for url in model_urls]
    started = time.time()
    time.sleep(window_s)
    gateway_after = _scrape(gateway)
    model_after = [_scrape(url) for url in model_urls]
    with handle.control() as control:
        status = control.status()["services"]
        signals.events = [e for e in control.events() if e["kind"] in NOTABLE_EVENTS and e["t"] >= started - 600][-20:]
    for name, svc in status.items():
        restarts = sum(r.get("restarts", 0) for r in svc["replicas"]) - restarts_before.get(name, 0)
        if name in ("agent", "model"):
            role = "agent" if name == "agent" else "inference"
            signals.replicas.setdefault(role, {})["restarts_in_window"] = restarts
    gateway_delta = _delta(gateway_after, gateway_before)
    model_delta: dict = {}
    for after, before in zip(model_after, model_before):
        for key, value in _delta(after, before).items():
            model_delta[key] = model_delta.get(key, 0.0) + value
    requests: dict[str, dict[str, float]] = {}
    for (metric, labels), value in gateway_delta.items():
        labels_dict = dict(labels)
        if metric == "drillbook_gateway_requests_total" and labels_dict.get("tenant") not in (None, "unknown"):
            per = requests.setdefault(labels_dict["tenant"], {"requests": 0.0, "failed": 0.0, "throttled": 0.0})
            per["requests"] += value
            if labels_dict["code"].startswith("5"):
                per["failed"] += value
            elif labels_dict["code"] == "429":
                per["throttled"] += value
    gpu = _by_tenant(model_delta, "drillbook_model_gpu_seconds_total")
    wait_sum = _by_tenant(model_delta, "drillbook_model_queue_wait_seconds_sum")
    wait_count = _by_tenant(model_delta, "drillbook_model_queue_wait_seconds_count")
    total_gpu = sum(gpu.values())
    for tenant in sorted(set(requests) | set(gpu)):
        per = requests.get(tenant, {"requests": 0.0, "failed": 0.0, "throttled": 0.0})
        p95 = _histogram_p95(gateway_delta, "drillbook_gateway_request_seconds", tenant)
        signals.tenants[tenant] = {
            **per, "p95_ms": p95 * 1000 if p95 is not None else None,
            "slot_share": gpu.get(tenant, 0.0) / total_gpu if total_gpu > 0 else 0.0,
            "queue_wait_ms": 1000 * wait_sum.get(tenant, 0.0) / wait_count[tenant] if wait_count.get(tenant) else None,
        }
    try:
        answer = httpx.get(f"{gateway}/internal/v1/slowest", timeout=5,
                           headers={"X-Drillbook-Internal-Token": handle.runtime.internal_token})
        signals.slowest = answer.json()["slowest"][:5]
    except (httpx.HTTPError, ValueError, KeyError):
        signals.missing.append("slowest requests")
    return signals


def findings(signals: Signals) -> list[Finding]:
    """Plain-words findings, most severe first; one "nothing alarming" finding when all is well."""
    found: list[Finding] = []
    if signals.store_healthy is False:
        found.append(Finding("critical", "the state store is not serving", "restore-agent-state"))
    for role, counts in signals.replicas.items():
        if counts.get("desired", 0) > 0 and counts.get("ready", 0) < counts["desired"]:
            found.append(Finding("critical", f"{role}: {counts['ready']} of {counts['desired']} replicas ready",
                                 "ha-replica-loss"))
        if counts.get("restarts_in_window", 0) > 0:
            found.append(Finding("warning", f"{role}: {counts['restarts_in_window']} replica restarts in the last "
                                            f"{signals.window_s:g}s", "ha-replica-loss"))
    active = {t: v for t, v in signals.tenants.items() if v["requests"] > 0 or v["slot_share"] > 0}
    if len(active) >= 2:
        hog, figures = max(active.items(), key=lambda item: item[1]["slot_share"])
        if figures["slot_share"] >= HOG_SHARE:
            others = [v["queue_wait_ms"] for t, v in active.items() if t != hog and v["queue_wait_ms"] is not None]
            waits = (f"; queue wait for the others is {max(others):.0f} ms per slot"
                     f" ({hog}: {figures['queue_wait_ms'] or 0:.0f} ms)") if others else ""
            found.append(Finding("warning", f"tenant {hog} holds {figures['slot_share']:.0%} of inference slot time"
                                            f"{waits}", "shed-noisy-tenant"))
    for tenant, figures in signals.tenants.items():
        if figures["requests"] >= 10 and figures["failed"] / figures["requests"] > ERROR_RATE:
            found.append(Finding("critical", f"tenant {tenant}: {figures['failed'] / figures['requests']:.1%} of "
                                             f"requests failed (HTTP 5xx)", "ha-replica-loss"))
        if figures["requests"] >= 10 and figures["throttled"] / figures["requests"] > THROTTLED_RATE:
            found.append(Finding("info", f"tenant {tenant} is rate-limited: {figures['throttled'] / figures['requests']:.0%}"
                                         " of its requests got HTTP 429"))
    order = {"critical": 0, "warning": 1, "info": 2}
    found.sort(key=lambda f: order[f.severity])
    if not [f for f in found if f.severity != "info"]:
        found.insert(0, Finding("info", "nothing alarming: replicas ready, store serving, no tenant dominating "
                                        "inference, error rates under 1%"))
    return found


def next_runbook(found: list[Finding]) -> str | None:
    return next((f.next_runbook for f in found if f.next_runbook), None)


def tables(signals: Signals) -> dict[str, Any]:
    """The signals as DataFrames for the notebook: replicas, tenants, events, slowest requests."""
    import pandas as pd

    return {"replicas": pd.DataFrame(signals.replicas).T,
            "tenants": pd.DataFrame(signals.tenants).T.round(4),
            "events": pd.DataFrame(signals.events)[["kind", "service", "replica"]].tail(10)
            if signals.events and "service" in signals.events[0] else pd.DataFrame(signals.events),
            "slowest": pd.DataFrame(signals.slowest)}


def judge(run: Any, signals: Signals, found: list[Finding]) -> None:
    """Record the signals and findings; the verdict is PASS only when nothing needs attention."""
    run.record("replicas", signals.replicas)
    run.record("tenants", signals.tenants)
    run.record("not_available", signals.missing)
    run.record("findings", [f"{f.severity}: {f.text}" for f in found])
    run.record("next_runbook", next_runbook(found))
    run.check("findings needing attention", sum(1 for f in found if f.severity in ("critical", "warning")), "<=", 0)
