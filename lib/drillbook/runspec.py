"""One runbook run resolved once, in the process that starts it.

The command line resolves the run (runbook, target profile, parameters, where the target keeps
its state) before anything is touched, and hands the result on: the runner (drillbook.execute)
opens the target from it, checks the parameters against that target, takes the run lock, starts
the kernel and rolls back with it, without reading the profile or validating the parameters
again. Bad input is one ConfigError line here, before a kernel starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

if TYPE_CHECKING:
    from drillbook.evidence.exercise import Exercise
    from drillbook.profile import LoadedProfile


@dataclass(frozen=True)
class RunSpec:
    """What one run is: its runbook (and notebook), the target profile as loaded, the parameters
    as validated (values by name, and the scenario's model of them where it declares one), and
    the state folder of the target (the sandbox's, or the profile's own)."""

    runbook: str
    notebook: Path
    profile: "LoadedProfile"
    parameters: dict[str, Any]
    validated: BaseModel | None
    state: Path
    exercise: "Exercise | None" = None  # scope, participants, objectives, reference: sealed with the run

    @property
    def target_argument(self) -> str:
        """How the kernel names the target: the profile's file when it has one, else its name."""
        return str(self.profile.path) if self.profile.path.is_file() else self.profile.name


def resolve_run(runbook: str, target: "str | LoadedProfile", overrides: dict[str, str],
                sandbox_state: Path | None = None, exercise: "Exercise | None" = None) -> RunSpec:
    """Resolve a run once: the notebook by name, the profile (loaded unless given), the
    parameters (defaults, the profile's SLOs, overrides; typed, checked against the scenario's
    limits; who runs an on-call runbook), and the target's state folder."""
    from drillbook.parameters import check_oncall, resolve_parameters, runbook_path
    from drillbook.profile import LoadedProfile, load_profile

    notebook = runbook_path(runbook)
    profile = target if isinstance(target, LoadedProfile) else load_profile(target)
    values, validated = resolve_parameters(notebook, overrides, profile)
    parameters = check_oncall(notebook.stem, profile.name, values)
    return RunSpec(notebook.stem, notebook, profile, parameters, validated, profile.state_dir(sandbox_state), exercise)
