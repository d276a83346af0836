"""The registry itself: what a scenario declares, and where declarations are kept.

Kept apart from the package's `__init__`, which imports every scenario module, so that those
modules import this one and nothing imports in a circle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from pydantic import BaseModel, ValidationError

from drillbook.config import validation_line
from drillbook.errors import ConfigError

if TYPE_CHECKING:
    from drillbook.targets import Target

UNKNOWN_CONTROL = "unknown"


@dataclass(frozen=True)
class Figure:
    """A figure the report shows for a control: the summary metric, how it reads, and the SLO
    check (by name) whose threshold is drawn with it."""

    metric: str
    label: str
    unit: str = ""
    check: str | None = None
    share: bool = False  # a fraction of a whole (0 to 1): shown as a percentage, never as a count
    meaning: str = ""  # what the figure means, in words, where its label alone could mislead

    def shown(self, value: object) -> str:
        """The value as the report shows it: a share as a percentage, others with their unit."""
        from drillbook.evidence.summary import figure

        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{value}{self.unit}"
        return f"{figure(100 * float(value))}%" if self.share else figure(float(value), self.unit)


@dataclass(frozen=True)
class Scenario:
    """What one runbook is: its name, its control (with the report's title and figures for it),
    its parameters, its experiment, its drill."""

    name: str
    control: str
    parameters: type[BaseModel]
    summary: str
    experiment: str | None = None
    experiment_parameters: type[BaseModel] | None = None  # the experiment's `configuration`, typed and bounded
    oncall: bool = False
    target_check: Callable[[BaseModel, "Target"], str | None] | None = None
    title: str = ""
    figures: tuple[Figure, ...] = ()
    # What it does to the target, as (where, action): where is a role (agent, inference, aggressor),
    # "store" or "tenants"; action is status, kill, scale, pods (read the pods' metrics), backup,
    # restore, destroy or limit. `drillbook target check` turns each into the rights or commands a
    # target kind needs for it (drillbook.access).
    needs: tuple[tuple[str, str], ...] = ()
    # The function that runs it ("module:function", imported only when it runs): called with the
    # run and the validated parameters by name (drillbook.runbook.drill). None for on-call runbooks,
    # whose notebooks walk their own steps.
    drill: str | None = None

    def drill_function(self) -> Callable[..., Any]:
        from importlib import import_module

        if self.drill is None:
            raise ConfigError(f"{self.name} declares no drill")
        module, _, function = self.drill.partition(":")
        return getattr(import_module(module), function)

    def validate(self, values: dict[str, Any]) -> BaseModel:
        """values (already of the right types) against the declared limits; one ConfigError line."""
        try:
            return self.parameters.model_validate(values)
        except ValidationError as error:
            raise ConfigError(f"{self.name}: {validation_line(error)}") from None

    def check_target(self, values: dict[str, Any], target: "Target", validated: BaseModel | None = None) -> None:
        """The limits that depend on the target, asked of it before anything is touched
        (validated: the values' model, when the caller holds it already)."""
        if self.target_check is None:
            return
        problem = self.target_check(validated if validated is not None else self.validate(values), target)
        if problem:
            raise ConfigError(f"{self.name}: {problem}")


REGISTRY: dict[str, Scenario] = {}


def register(scenario: Scenario) -> Scenario:
    if scenario.name in REGISTRY:
        raise ValueError(f"scenario {scenario.name} is declared twice")
    REGISTRY[scenario.name] = scenario
    return scenario


def scenario(name: str) -> Scenario | None:
    """The declaration of a runbook, or None for a runbook of the user's own that declares none."""
    return REGISTRY.get(name)


def controls() -> list[Scenario]:
    """The scenarios a report scores, one per control (on-call runbooks are not controls)."""
    seen: dict[str, Scenario] = {}
    for declared in REGISTRY.values():
        if not declared.oncall and declared.control not in seen:
            seen[declared.control] = declared
    return list(seen.values())


def experiment_parameters(experiment: str) -> type[BaseModel] | None:
    """The typed configuration of an experiment (by its name in experiments/), from the scenario
    that runs it; None for an experiment of the user's own."""
    return next((s.experiment_parameters for s in REGISTRY.values() if s.experiment == experiment), None)


def control_of(runbook: str) -> str:
    """The control a runbook's evidence counts for, from its declaration (never from the notebook,
    which may not have run far enough to say)."""
    declared = REGISTRY.get(runbook)
    return declared.control if declared else UNKNOWN_CONTROL


def load_scenario_packages() -> None:
    """Import every scenario package installed here (entry-point group drillbook.scenarios); each
    registers its scenarios as drillbook's own modules do. One that does not load is named on
    stderr and left out: a broken package must not stop `verify` or a report on other evidence.
    Called once, when drillbook.scenarios is first imported."""
    import sys

    from drillbook.plugins import SCENARIOS, installed

    for entry in installed(SCENARIOS):
        try:
            entry.load()
        except Exception as error:  # noqa: BLE001 - named, not raised
            print(f"drillbook: scenario package {entry.name} ({entry.value}) does not load, left out: "
                  f"{type(error).__name__}: {error}", file=sys.stderr)
