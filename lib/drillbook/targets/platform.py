"""The reference platform's own signals, known only to the targets that run it: the model
server's and the gateway's Prometheus metrics (by their names) and the gateway's
slowest-requests endpoint.
"""

from __future__ import annotations

import math
import time
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from drillbook.config import HEADER_INTERNAL_TOKEN

MODEL_METRICS = {"drillbook_model_gpu_seconds_total": "gpu_seconds",
                 "drillbook_model_queue_wait_seconds_sum": "queue_wait_sum",
                 "drillbook_model_queue_wait_seconds_count": "queue_wait_count"}


def scrape(url: str, token: str | None = None) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a service's /metrics; token: the platform's internal token, for the per-tenant
    series the gateway and the model server show only to the platform's own services."""
    headers = {HEADER_INTERNAL_TOKEN: token} if token else {}
    text = httpx.get(f"{url}/metrics", timeout=5, headers=headers).text
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def delta(after: dict, before: dict) -> dict:
    return {key: value - before.get(key, 0.0) for key, value in after.items()}


def histogram_p95(samples: dict, name: str, tenant: str) -> float | None:
    buckets = sorted((float(dict(labels)["le"]), value) for (metric, labels), value in samples.items()
                     if metric == f"{name}_bucket" and dict(labels).get("tenant") == tenant)
    total = buckets[-1][1] if buckets else 0
    if total <= 0:
        return None
    for bound, count in buckets:
        if count >= 0.95 * total:
            return bound if not math.isinf(bound) else buckets[-2][0] if len(buckets) > 1 else None
    return None


def by_tenant(samples: dict, name: str, label: str = "tenant") -> dict[str, float]:
    found: dict[str, float] = {}
    for (metric, labels), value in samples.items():
        labels_dict = dict(labels)
        if metric == name and label in labels_dict:
            found[labels_dict[label]] = found.get(labels_dict[label], 0.0) + value
    return found


def model_server_metrics(urls: list[str], token: str | None) -> dict[str, dict[str, float]]:
    """The model server's metrics per tenant, summed over the replicas at urls (one that does not
    answer is left out); token: what its /metrics asks before it shows tenants (without it, or with
    a wrong one, the series are summed over tenants and nothing is found here)."""
    totals: dict[str, dict[str, float]] = {}
    for url in urls:
        try:
            samples = scrape(url, token)
        except httpx.HTTPError:
            continue
        for metric, name in MODEL_METRICS.items():
            for tenant, value in by_tenant(samples, metric).items():
                per_tenant = totals.setdefault(tenant, {})
                per_tenant[name] = per_tenant.get(name, 0.0) + value
    return totals


def diagnose(handle: Any, window_s: float, notable: set[str]) -> dict[str, Any]:
    """Two samples of the sandbox's metrics window_s apart (through its handle); changes nothing."""
    found: dict[str, Any] = {"tenants": {}, "slowest": [], "restarts": {}, "events": [], "missing": []}
    gateway = handle.gateway_url
    with handle.control() as control:
        status = control.status()["services"]
    model_urls = [r["url"] for r in status["model"]["replicas"] if r["url"]]
    restarts_before = {name: sum(r.get("restarts", 0) for r in svc["replicas"]) for name, svc in status.items()}
    token = handle.runtime.internal_token
    gateway_before = scrape(gateway, token)
    model_before = [scrape(url, token) for url in model_urls]
    started = time.time()
    time.sleep(window_s)
    gateway_after = scrape(gateway, token)
    model_after = [scrape(url, token) for url in model_urls]
    with handle.control() as control:
        status = control.status()["services"]
        found["events"] = [e for e in control.events() if e["kind"] in notable and e["t"] >= started - 600][-20:]
    for name, svc in status.items():
        restarts = sum(r.get("restarts", 0) for r in svc["replicas"]) - restarts_before.get(name, 0)
        if name in ("agent", "model"):
            role = "agent" if name == "agent" else "inference"
            found["restarts"][role] = restarts
    gateway_delta = delta(gateway_after, gateway_before)
    model_delta: dict = {}
    for after, before in zip(model_after, model_before):
        for key, value in delta(after, before).items():
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
    gpu = by_tenant(model_delta, "drillbook_model_gpu_seconds_total")
    wait_sum = by_tenant(model_delta, "drillbook_model_queue_wait_seconds_sum")
    wait_count = by_tenant(model_delta, "drillbook_model_queue_wait_seconds_count")
    total_gpu = sum(gpu.values())
    for tenant in sorted(set(requests) | set(gpu)):
        per = requests.get(tenant, {"requests": 0.0, "failed": 0.0, "throttled": 0.0})
        p95 = histogram_p95(gateway_delta, "drillbook_gateway_request_seconds", tenant)
        found["tenants"][tenant] = {
            **per, "p95_ms": p95 * 1000 if p95 is not None else None,
            "slot_share": gpu.get(tenant, 0.0) / total_gpu if total_gpu > 0 else 0.0,
            "queue_wait_ms": 1000 * wait_sum.get(tenant, 0.0) / wait_count[tenant] if wait_count.get(tenant) else None,
        }
    try:
        answer = httpx.get(f"{gateway}/internal/v1/slowest", timeout=5,
                           headers={HEADER_INTERNAL_TOKEN: handle.runtime.internal_token})
        found["slowest"] = answer.json()["slowest"][:5]
    except (httpx.HTTPError, ValueError, KeyError):
        found["missing"].append("slowest requests")
    return found
