"""The parameters of each scenario's experiment, typed and bounded.

An experiment's `configuration` block holds the defaults; variables override them. Both are
validated here before anything runs: an unknown name or an out-of-range value is one line and
exit 2, never a half-injected fault.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from drillbook.config import StrictModel

Count = Annotated[int, Field(ge=1, le=1000)]
Seconds = Annotated[float, Field(gt=0, le=3600)]
Ratio = Annotated[float, Field(ge=0, le=1)]


class HaReplicaLoss(StrictModel):
    service: Literal["agent", "model", "gateway"] = "agent"
    kill_count: Count = 1
    kill_signal: Literal["SIGKILL", "SIGTERM", "SIGINT", "SIGQUIT"] = "SIGKILL"
    kill_after_s: Annotated[float, Field(ge=0, le=600)] = 1.5
    traffic_sessions: Count = 8
    traffic_s: Seconds = 5.0
    max_error_rate: Ratio = 0.0
    recovery_timeout_s: Seconds = 30.0


class NoisyNeighbour(StrictModel):
    victim_tenant: str = "tenant-a"
    victim_sessions: Count = 2
    baseline_s: Seconds = 3.0
    burst_s: Seconds = 5.0
    aggressor_replicas: Count = 1
    max_victim_p95_ratio: Annotated[float, Field(gt=0, le=1000)] = 3.0
    safeguard_max_error_rate: Ratio = 0.5


class ColdStart(StrictModel):
    idle_s: Annotated[float, Field(ge=0, le=3600)] = 1.0
    max_cold_start_s: Seconds = 5.0
    ready_timeout_s: Seconds = 60.0


class RestoreDrill(StrictModel):
    sessions: Count = 3
    turns_before: Count = 3
    turns_after: Annotated[int, Field(ge=0, le=1000)] = 2
    max_rto_s: Seconds = 30.0
    max_rpo_s: Seconds = 60.0
    restore_timeout_s: Seconds = 30.0


SCENARIOS: dict[str, type[StrictModel]] = {
    "ha-replica-loss": HaReplicaLoss,
    "noisy-neighbour": NoisyNeighbour,
    "cold-start": ColdStart,
    "restore-drill": RestoreDrill,
}
