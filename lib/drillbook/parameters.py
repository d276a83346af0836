"""The runbooks of a project and their parameters: what exists, what each takes, and every check
made before a kernel starts.

A notebook's `parameters` cell (read as papermill's own inspection reads it) gives each
parameter's default and type; a target profile's SLOs and `-p` values are converted to those
types; the scenario's declaration (drillbook.scenarios) adds the limits that make a result
meaningful and the ones that depend on the target; on-call runs say who runs them.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drillbook import project
from drillbook.errors import ConfigError
from drillbook.scenarios import scenario

if TYPE_CHECKING:
    from pydantic import BaseModel

    from drillbook.profile import LoadedProfile
    from drillbook.targets import Target

INJECTED = ("target", "drillbook_work_dir", "drillbook_state_dir")
PARAMETER_LINE = re.compile(r"^(\w+)\s*[:=]")


def runbook_path(name: str) -> Path:
    """A runbook name (drills in runbooks/, on-call runbooks in runbooks/oncall/) or a notebook path."""
    return project.find(project.RUNBOOKS, name)


def available_runbooks(oncall: bool = False) -> list[str]:
    """The drills in runbooks/ (and, with oncall, the on-call runbooks in runbooks/oncall/)."""
    return project.names(project.RUNBOOKS if oncall else project.DRILLS)


@dataclass(frozen=True)
class Parameter:
    name: str
    default: Any
    help: str


def notebook_parameters(path: Path) -> dict[str, Parameter]:
    """The `name: type = literal  # help` lines of the cell tagged `parameters`, as papermill's own
    inspection reads them (so `papermill --help-notebook` shows the same)."""
    import nbformat
    from papermill.inspection import inspect_notebook

    notebook = nbformat.read(str(path), as_version=4)
    cell = next((c for c in notebook.cells if "parameters" in c.get("metadata", {}).get("tags", [])), None)
    if cell is None:
        raise ConfigError(f"{path.name} has no cell tagged 'parameters'")
    inspected = inspect_notebook(str(path))
    for line in cell.source.splitlines():  # papermill skips a line it cannot read, with a warning only
        name = PARAMETER_LINE.match(line)
        if line.strip() and not line.lstrip().startswith("#") and (not name or name[1] not in inspected):
            raise ConfigError(f"{path.name}: parameters cell line {line.strip()!r} is not "
                              "`name: type = literal  # help` (one '=' per line)")
    found = {}
    for name, declared in inspected.items():
        try:
            default = ast.literal_eval(declared["default"])
        except (ValueError, SyntaxError):
            raise ConfigError(f"{path.name}: parameter {name} must default to a literal, "
                              f"not {declared['default']}") from None
        found[name] = Parameter(name, default, declared["help"])
    return found


BOOLEAN_WORDS = {"true": True, "false": False, "yes": True, "no": False}


def _kind(value: Any) -> str:
    return {bool: "true or false", int: "an integer", float: "a number", str: "text"}.get(type(value), type(value).__name__)


def typed_value(label: str, default: Any, value: Any, shown: str) -> Any:
    """value as its notebook default's type (an integer becomes a float where the default is one);
    another kind, a fraction for an integer or a negative number is one ConfigError line."""
    if isinstance(default, bool) != isinstance(value, bool) or \
            (isinstance(default, (int, float)) and not isinstance(value, (int, float))) or \
            (isinstance(default, str) and not isinstance(value, str)):
        raise ConfigError(f"invalid {label}: {shown} is not {_kind(default)}")
    if isinstance(default, float):
        value = float(value)
    elif isinstance(default, int) and not isinstance(default, bool) and isinstance(value, float):
        raise ConfigError(f"invalid {label}: {shown} is not an integer")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
        raise ConfigError(f"invalid {label}: {shown} must not be negative")
    return value


def validate_parameters(path: Path, overrides: dict[str, str], profile: "LoadedProfile | None" = None) -> dict[str, Any]:
    """Defaults (the notebook's, then the target profile's SLOs for this runbook) with overrides
    applied, each converted to its default's type; bad input is a ConfigError."""
    return resolve_parameters(path, overrides, profile)[0]


def resolve_parameters(path: Path, overrides: dict[str, str], profile: "LoadedProfile | None" = None
                       ) -> tuple[dict[str, Any], "BaseModel | None"]:
    """validate_parameters, and the scenario's model of the values where the runbook declares a
    scenario (None for a notebook without one): kept, so nothing validates them again."""
    declared = notebook_parameters(path)
    values = {name: parameter.default for name, parameter in declared.items() if name not in INJECTED}
    if profile is not None:  # checked the same way when the profile was loaded (profile._check_slos)
        for name, value in profile.spec.slos.get(path.stem, {}).items():
            values[name] = typed_value(name, declared[name].default, value, repr(value))
    for name, text in overrides.items():
        if name not in values:
            raise ConfigError(f"unknown parameter {name!r} for {path.stem}; known: {', '.join(values)}")
        default = declared[name].default
        try:
            if isinstance(default, bool) and text.strip().lower() in BOOLEAN_WORDS:  # what the error line offers
                value: Any = BOOLEAN_WORDS[text.strip().lower()]
            else:
                value = ast.literal_eval(text) if not isinstance(default, str) else text
        except (ValueError, SyntaxError):
            raise ConfigError(f"invalid {name}: {text!r} is not {_kind(default)}") from None
        values[name] = typed_value(name, default, value, repr(text))
    for name, parameter in declared.items():
        if parameter.help.startswith("required") and values.get(name) in ("", None):
            raise ConfigError(f"{path.stem} needs -p {name}=...: {parameter.help}")
    declaration = scenario(path.stem)
    # the limits that make a result meaningful (zero trials, negative times, ...)
    return values, declaration.validate(values) if declaration is not None else None


def check_against_target(runbook: str, parameters: dict[str, Any], target: "Target",
                         validated: "BaseModel | None" = None) -> None:
    """The limits that depend on the target (kill no more replicas than it runs), and the
    Prometheus its PromQL SLOs ask, before anything runs. validated: the scenario's model of the
    parameters when the caller holds it (drillbook.runspec), so that they are not validated again."""
    declaration = scenario(runbook)
    if declaration is not None:
        declaration.check_target(parameters, target, validated)
    check_prometheus(target.profile, [runbook])


def check_prometheus(profile: "LoadedProfile", runbooks: list[str]) -> None:
    """Refuse (one line, exit 2) when the runbooks have PromQL SLOs and their Prometheus is not ready."""
    from drillbook import promql

    spec = profile.spec.prometheus
    if spec is not None and any(spec.slos_for(runbook) for runbook in runbooks):
        promql.ready(spec.url)


def check_oncall(runbook: str, target_name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """On-call runs say who runs them; a real change also needs confirm=<target> and an incident."""
    import getpass

    from drillbook.oncall import require_confirmation

    checked = dict(parameters)
    if "operator" in checked and not checked["operator"]:
        checked["operator"] = getpass.getuser()
    if checked.get("dry_run") is False:
        require_confirmation(target_name, False, str(checked.get("confirm", "")))
        if "incident" in checked and not checked["incident"]:
            raise ConfigError(f"{runbook}: a real run needs -p incident=<reference> (who asked for it, and why)")
    return checked
