"""The reference platform's /metrics for whoever asks: per-tenant series only for its own
services (the internal token, as X-Drillbook-Internal-Token or `Authorization: Bearer`), and for
anyone else the same families summed over tenants, so that a client of the gateway learns neither
the other tenants' names nor their volumes, and a Prometheus that sums anyway sees the same totals.
"""

from __future__ import annotations

from typing import Any, Iterator

from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric

from drillbook.config import HEADER_INTERNAL_TOKEN

TENANT = "tenant"


def internal(headers: Any, token: str) -> bool:
    """The request carries the platform's internal token."""
    bearer = headers.get("Authorization", "")
    return headers.get(HEADER_INTERNAL_TOKEN) == token or bearer == f"Bearer {token}"


class WithoutTenants:
    """A registry's families with the tenant label summed away (a `_created` sample keeps the
    earliest); give it to prometheus_client's generate_latest like a registry."""

    def __init__(self, registry: Any) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            merged: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
            for sample in family.samples:
                key = (sample.name, tuple((k, v) for k, v in sample.labels.items() if k != TENANT))
                if key not in merged:
                    merged[key] = sample.value
                elif sample.name.endswith("_created"):
                    merged[key] = min(merged[key], sample.value)
                else:
                    merged[key] += sample.value
            summed = Metric(family.name, family.documentation, family.type, family.unit)
            for (name, labels), value in merged.items():
                summed.add_sample(name, dict(labels), value)
            yield summed


def metrics_body(registry: Any, headers: Any, token: str) -> bytes:
    """A service's /metrics in Prometheus text: per tenant for the platform's own services, summed
    over tenants for anyone else (the gateway and the model server alike)."""
    return generate_latest(registry if internal(headers, token) else WithoutTenants(registry))


__all__ = ["WithoutTenants", "internal", "metrics_body"]
