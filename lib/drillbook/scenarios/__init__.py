"""The scenario registry: one declaration per runbook, drills and on-call runbooks alike.

A declaration names the runbook, the control the report files it under, and its parameters as one
typed model: the only place their defaults and limits are written (a test keeps each notebook's
parameters cell equal to it). `-p` values, a profile's SLOs and a game-day plan's parameters are
all checked against it before a kernel starts, and so are the limits that depend on the target
(`check_target`: no more replicas killed than the target runs). Adding a scenario is one module
here, its notebook and its experiment; or, without editing drillbook, a package whose module
registers it, named in the entry-point group `drillbook.scenarios`, with its notebook in
runbooks/ and its experiment in experiments/ beside that module (drillbook.project finds them).
"""

from drillbook.scenarios import cold_start, ha_replica_loss, noisy_neighbour, oncall, restore_drill  # noqa: F401
from drillbook.scenarios.registry import (REGISTRY, UNKNOWN_CONTROL, Figure, Scenario, control_of, controls,
                                          experiment_parameters, load_scenario_packages, register, scenario)

load_scenario_packages()

__all__ = ["REGISTRY", "UNKNOWN_CONTROL", "Figure", "Scenario", "control_of", "controls", "experiment_parameters",
           "load_scenario_packages", "register", "scenario"]
