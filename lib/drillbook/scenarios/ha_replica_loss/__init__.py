"""HA: kill agent replicas mid-session; nothing acknowledged may be lost."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, model_validator

from drillbook.scenarios.limits import Count, Fraction, Parameters, Seconds, Wait
from drillbook.scenarios.registry import Figure, Scenario, register

if TYPE_CHECKING:
    from drillbook.targets import Target


MAX_ERROR_RATE = 0.0  # the gateway retries idempotent turns on another replica: clients see no error
KillSignal = Literal["SIGKILL", "SIGTERM", "SIGINT", "SIGQUIT"]


class HaReplicaLossExperiment(Parameters):
    """experiments/ha-replica-loss.yaml: kill replicas of a service while client sessions run."""

    service: Literal["agent", "model", "gateway"] = "agent"
    kill_count: Count = 1
    kill_signal: KillSignal = "SIGKILL"
    kill_after_s: Annotated[float, Field(ge=0, le=600)] = 1.5
    traffic_sessions: Count = 8
    traffic_s: Seconds = 5.0
    max_error_rate: Fraction = MAX_ERROR_RATE
    recovery_timeout_s: Seconds = 30.0


class HaReplicaLossParameters(Parameters):
    users: Count = 8
    duration_s: Seconds = 16.0  # leaves max_recovery_s + hold (2s) after the kill at 4s
    kill_count: Count = 1
    kill_after_s: Wait = 4.0
    # SIGKILL: abrupt loss (a crash, an OOM kill, a lost node); SIGTERM: graceful loss (an eviction,
    # a rolling update), where a replica may finish the replies it is sending.
    kill_signal: KillSignal = "SIGKILL"
    think_time_s: Wait = 0.2
    max_error_rate: Fraction = MAX_ERROR_RATE
    max_recovery_s: Seconds = 10.0
    max_p95_ms: Seconds = 2000.0
    load_workers: Annotated[int, Field(ge=0, le=64)] = 0  # Locust workers under a master (0: one process)

    @model_validator(mode="after")
    def _load_covers_a_recovery(self) -> "HaReplicaLossParameters":
        """Refused before anything is touched: a run whose load ends before a recovery within
        max_recovery_s (held for HOLD_S) could be seen could only report the recovery as unmeasured."""
        if self.kill_after_s >= self.duration_s:
            raise ValueError(f"kill_after_s {self.kill_after_s:g} must be below duration_s {self.duration_s:g}: "
                             "the kill has to land while the load runs")
        needed = self.kill_after_s + self.max_recovery_s + HOLD_S
        if self.duration_s < needed:
            raise ValueError(f"duration_s {self.duration_s:g} cannot cover a recovery: the kill at kill_after_s "
                             f"{self.kill_after_s:g}s, max_recovery_s {self.max_recovery_s:g}s and {HOLD_S:g}s held "
                             f"at baseline need duration_s >= {needed:g}")
        return self


HOLD_S = 2.0  # how long the service must stay at baseline to count as recovered (drills.ha_replica_loss)


def _enough_replicas(parameters: HaReplicaLossParameters, target: "Target") -> str | None:
    try:
        running = target.desired("agent")
    except Exception:  # noqa: BLE001 - a target that cannot say is judged by the run itself
        return None
    if parameters.kill_count > running:
        return f"kill_count {parameters.kill_count} is more than the {running} agent replicas the target runs"
    return None


SCENARIO = register(Scenario(
    name="ha-replica-loss", control="ha", parameters=HaReplicaLossParameters,
    drill="drillbook.scenarios.ha_replica_loss.drill:ha_replica_loss", experiment="ha-replica-loss",
    experiment_parameters=HaReplicaLossExperiment,
    summary="kill agent replicas mid-session; no acknowledged turn lost or duplicated, errors and recovery in SLO",
    target_check=_enough_replicas, needs=(("agent", "status"), ("agent", "kill")),
    title="High availability: replica loss",
    figures=(Figure("recovery_time_s", "service recovery time", "s", "service recovery time"),
             Figure("lost_turns", "acknowledged turns lost", "", "acknowledged turns lost",
                    meaning="turns the platform acknowledged and never delivered: any one is a failure"),
             Figure("error_rate_fault", "error rate in the fault window", "", "error rate in the fault window",
                    share=True, meaning="the share of turns that failed between the kill and the recovery"))))
