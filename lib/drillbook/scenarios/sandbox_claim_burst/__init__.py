"""Sandbox claim burst: more sessions claim a code sandbox at once than the warm pool holds."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from drillbook.codeboxes import offers_code_sandboxes
from drillbook.scenarios.limits import Count, Parameters, Seconds
from drillbook.scenarios.registry import Figure, Scenario, register
from drillbook.targets.capabilities import SANDBOXES


class SandboxClaimBurstParameters(Parameters):
    working_sessions: Annotated[int, Field(ge=0, le=64)] = 2  # sessions running code through the burst
    beyond_pool: Count = 1  # claims beyond the pool's size (or the warm sandboxes seen, if more)
    refill_timeout_s: Seconds = 30.0  # how long the pool may take to be full again (before and after)
    max_claim_p50_s: Seconds = 1.0
    max_claim_p90_s: Seconds = 1.0
    max_claim_p99_s: Seconds = 5.0
    max_failed_claims: Annotated[int, Field(ge=0, le=100_000)] = 0


SCENARIO = register(Scenario(
    name="sandbox-claim-burst", control="sandbox-claim-burst", parameters=SandboxClaimBurstParameters,
    drill="drillbook.scenarios.sandbox_claim_burst.drill:sandbox_claim_burst", target_check=offers_code_sandboxes,
    needs=((SANDBOXES, "claim"),),
    summary="claim more code sandboxes at once than the warm pool holds, sessions working: claim latency "
            "P50/P90/P99 in SLO, no claim failed, the pool refilled",
    title="Code sandboxes: a claim burst beyond the warm pool",
    figures=(Figure("claim_p50_s", "claim latency P50", "s", "claim latency p50"),
             Figure("claim_p99_s", "claim latency P99", "s", "claim latency p99"),
             Figure("pool_refill_s", "pool refill", "s", "pool refill"))))
