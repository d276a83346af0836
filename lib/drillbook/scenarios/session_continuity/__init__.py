"""Session continuity: streamed turns that outlive their client, its connection and its replica."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from drillbook.scenarios.ha_replica_loss import KillSignal, _enough_replicas
from drillbook.scenarios.limits import Count, Fraction, Parameters, Seconds, Wait
from drillbook.scenarios.registry import Figure, Scenario, register

RESUME_P95_MS = 2000.0
KillCount = Annotated[int, Field(ge=0, le=64, description="0 (no kill) or more")]


class SessionContinuityExperiment(Parameters):
    """experiments/session-continuity.yaml: kill replicas of the agent tier while turns stream."""

    service: Literal["agent"] = "agent"
    kill_count: Count = 1
    kill_signal: KillSignal = "SIGKILL"
    recovery_timeout_s: Seconds = 30.0


class SessionContinuityParameters(Parameters):
    users: Count = 12  # enough streams in flight that a kill finds some on the replica it kills
    duration_s: Seconds = 12.0
    max_tokens: Annotated[int, Field(ge=2, le=4096)] = 64  # tokens per turn: long enough to drop mid-stream
    drop_rate: Fraction = 0.5  # share of turns whose client drops the connection at a random token
    handoff_rate: Fraction = 0.25  # share of the drops resumed from another process (this one, after the load)
    kill_count: KillCount = 1  # agent replicas killed while turns stream (0: drops only)
    kill_after_s: Wait = 4.0
    kill_signal: KillSignal = "SIGKILL"
    think_time_s: Wait = 0.2
    settle_s: Seconds = 20.0  # how long a turn may take to end after the load; later, it is orphaned
    max_resume_p95_ms: Seconds = RESUME_P95_MS
    max_failed_rate: Fraction = 0.2  # failed turns / turns: a replica kill may fail the turns it was streaming
    load_workers: Annotated[int, Field(ge=0, le=64)] = 0  # Locust workers under a master (0: one process)

    @model_validator(mode="after")
    def _kill_within_load(self) -> "SessionContinuityParameters":
        if self.kill_count and self.kill_after_s >= self.duration_s:
            raise ValueError(f"kill_after_s {self.kill_after_s:g} must be below duration_s {self.duration_s:g}: "
                             "the kill has to land while turns stream")
        if not self.kill_count and not self.drop_rate:
            raise ValueError("drop_rate 0 and kill_count 0: no fault at all, nothing would be resumed")
        return self


SCENARIO = register(Scenario(
    name="session-continuity", control="session-continuity", parameters=SessionContinuityParameters,
    drill="drillbook.scenarios.session_continuity.drill:session_continuity", experiment="session-continuity",
    experiment_parameters=SessionContinuityExperiment,
    summary="drop streams mid-turn and kill the replica serving them; resumed streams lose and repeat no token, "
            "every turn ends once, resume P95 in SLO",
    target_check=_enough_replicas, needs=(("agent", "status"), ("agent", "kill")),
    title="Session continuity: streams that outlive their client",
    figures=(Figure("resume_p95_ms", "resume latency P95", "ms", "resume latency p95"),
             Figure("tokens_lost", "tokens lost across a resume", "", "tokens lost across a resume"),
             Figure("orphaned_turns", "orphaned turns", "", "orphaned turns (neither acknowledged nor failed)"))))
