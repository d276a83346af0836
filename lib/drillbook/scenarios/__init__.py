"""The scenario registry: one declaration per runbook, drills and on-call runbooks alike.

A declaration names the runbook, the control the report files it under, and its parameters as one
typed model: the only place their defaults and limits are written (a test keeps each notebook's
parameters cell equal to it). `-p` values, a profile's SLOs and a game-day plan's parameters are
all checked against it before a kernel starts, and so are the limits that depend on the target
(`check_target`: no more replicas killed than the target runs). Adding a scenario is one package
here (found by being here: nothing lists it), its notebook and its experiment; or, without editing drillbook, a package whose module
registers it, named in the entry-point group `drillbook.scenarios`, with its notebook in
runbooks/ and its experiment in experiments/ beside that module (drillbook.project finds them).
"""

import importlib
import pkgutil

from drillbook.scenarios.registry import (REGISTRY, UNKNOWN_CONTROL, Figure, Scenario, control_of, controls,
                                          experiment_parameters, load_scenario_packages, register, scenario)

SHARED = ("registry", "limits")  # the modules here that declare no scenario

for _found in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):  # drillbook's own: each declares itself
    if _found.name not in SHARED:
        importlib.import_module(f"{__name__}.{_found.name}")
load_scenario_packages()

__all__ = ["REGISTRY", "UNKNOWN_CONTROL", "Figure", "Scenario", "control_of", "controls", "experiment_parameters",
           "load_scenario_packages", "register", "scenario"]
