"""Cold start: scale to zero, idle, first request; P95 time to first token within SLO."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from drillbook.scenarios.registry import Figure, Scenario, register
from drillbook.scenarios.limits import Parameters, Seconds, Wait


class ColdStartParameters(Parameters):
    trials: Annotated[int, Field(ge=1, le=1000)] = 3
    idle_s: Wait = 1.0
    slo_p95_s: Seconds = 5.0


SCENARIO = register(Scenario(
    name="cold-start", control="cold-start", parameters=ColdStartParameters, experiment="cold-start",
    summary="scale-from-zero, N trials: P95 time to first token within SLO, every first turn stored",
    title="Scale from zero: cold start",
    figures=(Figure("cold_start_p95_s", "cold-start P95", "s", "cold-start P95 time to first token"),
             Figure("cold_start_p50_s", "cold-start P50", "s"))))
