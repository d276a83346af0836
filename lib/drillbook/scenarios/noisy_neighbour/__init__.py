"""Noisy neighbour: an aggressor tenant floods shared inference; the victim's latency must hold."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from drillbook.scenarios.limits import Count, Fraction, Parameters, Ratio, Seconds
from drillbook.scenarios.registry import Figure, Scenario, register

if TYPE_CHECKING:
    from drillbook.targets import Target


VICTIM, VICTIM_SESSIONS, BASELINE_S, BURST_S, MAX_P95_RATIO = "tenant-a", 2, 3.0, 5.0, 3.0


class NoisyNeighbourExperiment(Parameters):
    """experiments/noisy-neighbour.yaml: the victim alone, then while an aggressor floods inference."""

    victim_tenant: str = Field(VICTIM, min_length=1)
    victim_sessions: Count = VICTIM_SESSIONS
    baseline_s: Seconds = BASELINE_S
    burst_s: Seconds = BURST_S
    aggressor_replicas: Count = 1
    flood_timeout_s: Seconds = 120.0  # the aggressor started and seen queueing at the shared tier
    max_victim_p95_ratio: Ratio = MAX_P95_RATIO
    safeguard_max_error_rate: Fraction = 0.5


class NoisyNeighbourParameters(Parameters):
    victim_tenant: str = Field(VICTIM, min_length=1)
    victim_sessions: Count = VICTIM_SESSIONS
    baseline_s: Seconds = BASELINE_S
    burst_s: Seconds = BURST_S
    max_victim_p95_ratio: Ratio = MAX_P95_RATIO
    max_victim_error_rate: Fraction = 0.0


def _victim_is_a_tenant(parameters: NoisyNeighbourParameters, target: "Target") -> str | None:
    """The victim is one of the target's tenants, and the target shows per-tenant use of its
    shared tier: the aggressor's flood is seen to land there, or nothing can be judged."""
    from drillbook.targets.capabilities import TenantMetrics

    _, keys = target.gateway()
    if parameters.victim_tenant not in keys:
        return f"victim_tenant {parameters.victim_tenant!r} is not a tenant of the target ({', '.join(keys)})"
    if not isinstance(target, TenantMetrics):
        return (f"target {target.name} offers no per-tenant counters of its shared tier (TenantMetrics), so the "
                "aggressor's flood could not be seen to land")
    return None


SCENARIO = register(Scenario(
    name="noisy-neighbour", control="isolation", parameters=NoisyNeighbourParameters,
    drill="drillbook.scenarios.noisy_neighbour.drill:noisy_neighbour", experiment="noisy-neighbour",
    experiment_parameters=NoisyNeighbourExperiment,
    needs=(("aggressor", "scale"), ("inference", "pods")),
    summary="an aggressor floods shared inference; the victim's p95 stays within its budget of its own baseline",
    target_check=_victim_is_a_tenant,
    title="Tenant isolation: noisy neighbour",
    figures=(Figure("victim_p95_ratio", "victim p95 ratio", "×", "victim p95 ratio (burst over own baseline)"),
             Figure("victim_error_rate", "victim error rate", "", "victim error rate", share=True))))
