"""Sandbox isolation: from inside a claimed code sandbox, try to reach what a sandbox must not."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from drillbook.codeboxes import offers_code_sandboxes
from drillbook.scenarios.limits import Count, Parameters, Ratio, Seconds
from drillbook.scenarios.registry import Figure, Scenario, register
from drillbook.targets.capabilities import SANDBOXES


class SandboxIsolationParameters(Parameters):
    memory_mib: Annotated[int, Field(ge=64, le=8192)] = 1024  # what the memory probe tries to hold
    processes: Annotated[int, Field(ge=16, le=4096)] = 256  # what the process probe tries to start
    cpu_workers: Annotated[int, Field(ge=1, le=64)] = 4  # busy processes of the CPU hog
    cpu_s: Seconds = 4.0  # how long the CPU hog runs
    cpu_budget: Ratio = 1.0  # CPUs one sandbox may take; more is an escape from its limit
    neighbour_runs: Count = 8  # a neighbour's trivial runs timed before the hog
    max_neighbour_slowdown: Ratio = 5.0  # the neighbour's median run while the hog runs / before it


SCENARIO = register(Scenario(
    name="sandbox-isolation", control="sandbox-isolation", parameters=SandboxIsolationParameters,
    drill="drillbook.scenarios.sandbox_isolation.drill:sandbox_isolation",
    summary="escape probes from inside a code sandbox: the platform's ports and files, another tenant's sandbox "
            "and workspace, secrets, processes, memory, process count and CPU; every one refused",
    target_check=offers_code_sandboxes, needs=((SANDBOXES, "run"),),
    title="Code sandboxes: isolation that holds",
    figures=(Figure("escape_attempts", "escape attempts"), Figure("escapes_refused", "escapes refused"),
             Figure("neighbour_slowdown", "neighbour slowdown under a CPU hog", "",
                    "neighbour slowdown while a sandbox hogs the CPU"))))
