"""Cold start: scale to zero, idle, first request; P95 time to first token within SLO."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from drillbook.scenarios.limits import Parameters, Seconds, Wait
from drillbook.scenarios.registry import Figure, Scenario, register

IDLE_S, SLO_S, READY_TIMEOUT_S = 1.0, 5.0, 60.0


class ColdStartExperiment(Parameters):
    """experiments/cold-start.yaml: scale to zero, stay idle, one first request."""

    idle_s: Wait = IDLE_S
    max_cold_start_s: Seconds = SLO_S  # the drill passes its slo_p95_s: each first token is held to it
    ready_timeout_s: Seconds = READY_TIMEOUT_S


class ColdStartParameters(Parameters):
    trials: Annotated[int, Field(ge=1, le=1000)] = 3
    idle_s: Wait = IDLE_S
    slo_p95_s: Seconds = SLO_S
    ready_timeout_s: Seconds = READY_TIMEOUT_S  # how long the agent tier may take to serve, before and after a trial


SCENARIO = register(Scenario(
    name="cold-start", control="cold-start", parameters=ColdStartParameters,
    drill="drillbook.scenarios.cold_start.drill:cold_start", experiment="cold-start",
    experiment_parameters=ColdStartExperiment,
    needs=(("agent", "status"), ("agent", "scale"), ("inference", "scale")),
    summary="scale-from-zero, N trials: P95 time to first token within SLO, every first turn stored",
    title="Scale from zero: cold start",
    figures=(Figure("cold_start_p95_s", "cold-start P95", "s", "cold-start P95 time to first token"),
             Figure("cold_start_p50_s", "cold-start P50", "s"))))
