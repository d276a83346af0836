"""Sandbox loss: sandboxes die mid-run, and so does the sandbox service; no work is lost."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from drillbook.codeboxes import offers_code_sandboxes
from drillbook.scenarios.limits import Count, Parameters, Seconds
from drillbook.scenarios.registry import Figure, Scenario, register
from drillbook.targets.capabilities import SANDBOXES


class SandboxLossParameters(Parameters):
    sessions: Count = 3  # sessions with a sandbox and files in its workspace
    files: Count = 3  # files each session writes before the kills
    sandbox_kills: Annotated[int, Field(ge=0, le=64)] = 1  # sandboxes killed one by one, each mid-run
    kill_service: bool = True  # then kill the sandbox service itself, with every session's sandbox running
    run_s: Seconds = 5.0  # how long the run the kill interrupts would take
    recreate_timeout_s: Seconds = 30.0  # how long a session may take to get a working sandbox again
    max_recreate_p95_s: Seconds = 10.0  # SLO: P95 from a kill's landing to a working sandbox again


def _sandboxes_to_kill(parameters: SandboxLossParameters, target: object) -> str | None:
    from drillbook.targets.capabilities import CodeSandboxes

    found = offers_code_sandboxes(parameters, target)
    if found is None and parameters.kill_service and isinstance(target, CodeSandboxes) \
            and not target.sandbox_service_killable():
        return ("the target has no way to kill its sandbox service (workload.sandboxes.kill_service): "
                "run with -p kill_service=false")
    return found


SCENARIO = register(Scenario(
    name="sandbox-loss", control="sandbox-loss", parameters=SandboxLossParameters,
    drill="drillbook.scenarios.sandbox_loss.drill:sandbox_loss", target_check=_sandboxes_to_kill,
    needs=((SANDBOXES, "claim"), (SANDBOXES, "kill")),
    summary="kill code sandboxes mid-run, then the sandbox service: every session gets a working sandbox again "
            "with its workspace intact, no claim stuck, recreate P95 in SLO",
    title="Code sandboxes: losing one loses no work",
    figures=(Figure("recreate_p95_s", "time to a working sandbox again P95", "s",
                    "time to a working sandbox again p95"),
             Figure("files_lost", "files lost with their sandbox", "", "files lost with their sandbox"),
             Figure("stuck_claims", "claims left stuck", "", "claims left stuck"))))
