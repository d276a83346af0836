"""The drillbook control: a Chaos Toolkit control that follows an experiment's phases.

Declared in every experiment drillbook ships (and added by drillbook's runner to any experiment
that lacks it), so that plain `chaos run` and `drillbook chaos run` behave the same. It opens the
run's context when the experiment starts, tells it when the method starts and ends (so that a
judging probe knows whether to take a fresh sample or judge what the method recorded, instead
of guessing from what it finds), and writes the run's measurements when the experiment ends.
"""

from __future__ import annotations

from typing import Any

from drillbook.chaos.context import AFTER, METHOD, ROLLBACKS, ContextError, RunContext

MODULE = __name__
DECLARATION = {"name": "drillbook", "provider": {"type": "python", "module": MODULE}}


def declared_in(experiment: dict[str, Any]) -> bool:
    return any((c.get("provider") or {}).get("module") == MODULE for c in experiment.get("controls") or [])


def before_experiment_control(context: Any, configuration: dict[str, Any] | None = None, **kwargs: Any) -> None:
    if configuration is None:  # chaoslib always hands one; a run without it has nothing to carry its context
        raise ContextError("the drillbook control was called without the run's configuration")
    RunContext.of(configuration).follow(configuration)


def before_method_control(context: Any, configuration: dict[str, Any] | None = None, **kwargs: Any) -> None:
    RunContext.of(configuration or {}).enter(METHOD)


def after_method_control(context: Any, configuration: dict[str, Any] | None = None, **kwargs: Any) -> None:
    RunContext.of(configuration or {}).enter(AFTER)


def before_rollback_control(context: Any, configuration: dict[str, Any] | None = None, **kwargs: Any) -> None:
    RunContext.of(configuration or {}).enter(ROLLBACKS)


def after_experiment_control(context: Any, configuration: dict[str, Any] | None = None, **kwargs: Any) -> None:
    RunContext.of(configuration or {}).close()
