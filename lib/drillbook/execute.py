"""Papermill wrapper: one runbook run -> one evidence bundle.

Parameters are checked against the notebook's own `parameters` cell before a kernel starts
(unknown name or a value of the wrong type: one line, exit 2). The notebook runs in a hermetic
environment (Jupyter, IPython and matplotlib write under the run's folder, not $HOME); the
executed notebook, its HTML and everything the run wrote are sealed into the bundle. A failing
cell yields verdict ERROR naming the cell, and the target is still rolled back.
"""

from __future__ import annotations

import ast
import json
import os
import re
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from drillbook import project
from drillbook.config import project_dir, results_dir, signing_key
from drillbook.errors import ConfigError
from drillbook.profile import load_profile

if TYPE_CHECKING:
    from drillbook.profile import LoadedProfile

INJECTED = ("target", "drillbook_work_dir", "drillbook_state_dir")
PARAMETER_LINE = re.compile(r"^(\w+)\s*[:=]")
HERMETIC_DIRS = ("IPYTHONDIR", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "MPLCONFIGDIR")


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
            value: Any = ast.literal_eval(text) if not isinstance(default, str) else text
        except (ValueError, SyntaxError):
            raise ConfigError(f"invalid {name}: {text!r} is not {_kind(default)}") from None
        values[name] = typed_value(name, default, value, repr(text))
    for name, parameter in declared.items():
        if parameter.help.startswith("required") and values.get(name) in ("", None):
            raise ConfigError(f"{path.stem} needs -p {name}=...: {parameter.help}")
    return values


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


KERNEL_NAME = "drillbook"


@contextmanager
def hermetic(folder: Path) -> Iterator[dict[str, Any]]:
    """For the duration: Jupyter, IPython and matplotlib write under folder, not $HOME; the kernel
    is this interpreter (a kernelspec of its own, so no other Python's `python3` kernel can stand
    in for it), talks to us over Unix sockets in folder (not loopback TCP), and finds runbooks,
    experiments and profiles in the same project folder as this process. Yields the keyword
    arguments for papermill that select that kernel."""
    import sys

    from traitlets.config import Config

    from drillbook.config import ENV_HOME, project_dir

    overrides = {name: str(folder / name.lower()) for name in HERMETIC_DIRS}
    overrides[ENV_HOME] = str(project_dir())
    saved = {name: os.environ.get(name) for name in overrides}
    spec = folder / "jupyter_data_dir" / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python {sys.version_info.major}.{sys.version_info.minor} (drillbook)",
        "language": "python"}))
    kernel = Config()
    kernel.KernelManager.transport = "ipc"
    kernel.KernelManager.ip = str(folder / "kernel")  # sockets kernel-1..5; short: AF_UNIX paths stop at 107
    try:
        for name, value in overrides.items():
            if name in HERMETIC_DIRS:
                Path(value).mkdir(parents=True, exist_ok=True)
            os.environ[name] = value
        yield {"kernel_name": KERNEL_NAME, "config": kernel}
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@dataclass(frozen=True)
class ExecutedRun:
    runbook: str
    verdict: str
    bundle: Path
    summary: dict[str, Any]


def render_html(notebook_path: Path) -> str:
    import nbformat
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter().from_notebook_node(nbformat.read(str(notebook_path), as_version=4))
    return body


def execute(name: str, target: str = "sandbox", overrides: dict[str, str] | None = None,
            results: Path | None = None, sandbox_state: Path | None = None,
            execution_timeout: int = 1800, on_start: Callable[[Path], None] | None = None) -> ExecutedRun:
    """Run one runbook with Papermill and seal everything it produced as one evidence bundle.

    target: a profile name from targets/ or a path to a profile.
    on_start: called with the bundle's folder once the target answered, before the kernel starts.
    """
    import papermill

    from drillbook.chaos import rollback_all
    from drillbook.chaos.runner import target_configuration
    from drillbook.evidence import BundleWriter, RunSummary
    from drillbook.targets import open_target

    path = runbook_path(name)
    profile = load_profile(target)
    parameters = check_oncall(path.stem, profile.name, validate_parameters(path, overrides or {}, profile))
    state = profile.state_dir(sandbox_state)
    workload = open_target(target, state)  # unreachable, or a tenant key missing: refused here
    secrets = workload.secrets()
    target_argument = str(profile.path) if profile.path.is_file() else profile.name
    with tempfile.TemporaryDirectory(prefix="drillbook-run-") as scratch:
        work = Path(scratch) / "work"
        work.mkdir()
        executed = Path(scratch) / "runbook.ipynb"
        with BundleWriter(results_dir(results), path.stem, profile.name, parameters, secrets=secrets,
                          signing_key=signing_key(), project_root=project_dir()) as bundle:
            error: str | None = None
            if on_start:
                on_start(bundle.path)
            with hermetic(Path(scratch) / "home") as kernel:
                try:
                    papermill.execute_notebook(
                        str(path), str(executed), **kernel, progress_bar=False, cwd=str(work),
                        execution_timeout=execution_timeout, log_output=False,
                        parameters={**parameters, "target": target_argument, "drillbook_work_dir": str(work),
                                    "drillbook_state_dir": str(state)})
                except papermill.PapermillExecutionError as failure:
                    error = f"cell {failure.cell_index + 1} failed: {failure.ename}: {failure.evalue}"
                finally:
                    undone = rollback_all(target_configuration(profile, state))  # nothing stays injected
                    if undone:
                        bundle.event("fallback_rollback", undone=undone)
            if profile.path.is_file():
                bundle.copy_file(profile.path, "target-profile.yaml")  # names key variables, never keys
            if executed.exists():
                bundle.copy_file(executed, "runbook.ipynb")
                bundle.write_text("runbook.html", render_html(executed))
            summary_path = work / "summary.json"
            if error is not None or not summary_path.exists():
                summary = RunSummary(runbook=path.stem, control="unknown", verdict="ERROR",
                                     reason=error or "the runbook did not record a verdict").to_json()
                summary_path.unlink(missing_ok=True)
                bundle.write_json("summary.json", summary)
            else:
                summary = json.loads(summary_path.read_text())
            bundle.copy_tree(work, ".")
    return ExecutedRun(path.stem, summary["verdict"], bundle.path, summary)
