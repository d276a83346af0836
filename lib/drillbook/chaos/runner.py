"""Run a Chaos Toolkit experiment with chaoslib: validated, rollbacks always, verdict from the journal.

- Variables are checked against the scenario's typed parameters before anything runs.
- The target is resolved (and, on kubernetes, checked against the allow-list) before anything runs.
- The rollback strategy is always ``always``: SIGINT and SIGTERM interrupt the run, and the
  rollbacks still put the target back. Whatever a run left open in the fault ledger is undone
  afterwards as well, so no fault outlives the run; `drillbook rollback` covers a killed runner.
- Every activity's start and end goes into the run's timeline.
- The run's context (target, ledger, phase, traffic windows, measurements) is opened once and
  handed to every provider as a value; the drillbook control follows the phases
  (drillbook.chaos.context, drillbook.chaos.control).
- The verdict comes from the journal (hypotheses before, during and after, activity statuses,
  process exit codes, rollbacks), never from an exit code.
"""

from __future__ import annotations

import copy
import json
import logging
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from drillbook import project
from drillbook.chaos import control as drill_control
from drillbook.chaos.actions import close_on_stopped_platform, undo_open_faults
from drillbook.chaos.context import CONTEXT, RunContext
from drillbook.config import validation_line
from drillbook.errors import LANDING_MARK, ConfigError
from drillbook.scenarios import experiment_parameters
from drillbook.shutdown import SHUTDOWN, Interrupted
from drillbook.timeline import TIMELINE, Timeline, written_to

if TYPE_CHECKING:
    from drillbook.profile import LoadedProfile
    from drillbook.targets import Target

ROLLBACKS_ALWAYS = {"runtime": {"rollbacks": {"strategy": "always"}}}
INJECTED_PREFIX = "drillbook_"


@contextmanager
def chaoslib_quiet() -> Iterator[None]:
    """chaoslib narrates every step at INFO and WARNING; drillbook keeps its own timeline instead,
    so while drillbook runs an experiment only its errors are logged. Only then: importing
    drillbook (a plain `chaos run` loads its control and providers) leaves chaostoolkit's
    logging as the user set it."""
    logger = logging.getLogger("chaostoolkit")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def experiment_path(name_or_path: str) -> Path:
    """A scenario name from experiments/ or a path to an experiment file."""
    return project.find(project.EXPERIMENTS, name_or_path)


def load(path: Path) -> dict[str, Any]:
    from chaoslib.exceptions import ChaosException
    from chaoslib.loader import load_experiment

    try:
        return load_experiment(str(path), verify_tls=False)
    except ChaosException as error:
        raise ConfigError(f"cannot load experiment {path}: {error}") from None


def parameters_for(experiment: dict[str, Any], scenario: str | None, variables: dict[str, Any]) -> dict[str, Any]:
    """The experiment's configuration with variables applied, validated against the scenario's model."""
    defaults = {k: v for k, v in (experiment.get("configuration") or {}).items() if not k.startswith(INJECTED_PREFIX)}
    unknown = sorted(set(variables) - set(defaults))
    if unknown:
        raise ConfigError(f"unknown parameter {unknown[0]!r} for this experiment; known: {', '.join(sorted(defaults))}")
    merged = {**defaults, **variables}
    model = experiment_parameters(scenario or "")
    if model is not None:
        try:
            return model.model_validate(merged).model_dump()
        except ValidationError as error:
            raise ConfigError(validation_line(error)) from None
    return merged


@dataclass
class ChaosResult:
    """One experiment run: its journal, verdict and reasons, timeline and measurements."""

    experiment: str
    run_id: str
    journal: dict[str, Any]
    verdict: str
    reasons: list[str]
    timeline: list[dict[str, Any]]
    measurements: dict[str, Any]
    run_dir: Path


def _missed(state: dict[str, Any]) -> list[str]:
    """The probes of a steady-state check that missed their tolerance."""
    return [probe["activity"]["name"] for probe in state.get("probes", []) if not probe.get("tolerance_met")]




def _exception_text(run: dict[str, Any]) -> str:
    exception = run.get("exception", "")
    return "".join(exception) if isinstance(exception, list) else str(exception)


def _last_line(activity: dict[str, Any]) -> str:
    """The error an activity raised, as its one last line (without the exception's module path)."""
    lines = [line.strip() for line in _exception_text(activity).splitlines() if line.strip()]
    last = lines[-1] if lines else "no exception recorded"
    while last.startswith(("chaoslib.", "drillbook.")) and ": " in last:
        last = last.split(": ", 1)[1]
    return last


def _unlanded(run: dict[str, Any]) -> str:
    """The FaultNotLanded line of a failed activity."""
    text = _exception_text(run)
    return text[text.index(LANDING_MARK):].splitlines()[0].strip()


def verdict_of(journal: dict[str, Any]) -> tuple[str, list[str]]:
    """PASS / FAIL / ERROR / ABORTED from what the journal records."""
    reasons: list[str] = []
    states = journal.get("steady_states") or {}
    before, after, during = states.get("before"), states.get("after"), states.get("during") or []
    failed_runs = [r for r in journal.get("run", []) if r.get("status") == "failed"]
    for run in failed_runs:
        reasons.append(f"activity {run['activity'].get('name')} failed: {str(run.get('exception', ''))[-200:].strip()}")
    for run in journal.get("run", []):
        output = run.get("output")
        if run["activity"].get("provider", {}).get("type") == "process" and isinstance(output, dict) \
                and output.get("status") not in (0, None):
            reasons.append(f"process {run['activity'].get('name')} exited {output.get('status')}")
    unlanded = [_unlanded(r) for r in failed_runs if LANDING_MARK in _exception_text(r)]
    if unlanded:  # nothing after a fault that never landed can be judged, whatever the probes said
        return "ERROR", unlanded
    failed_rollbacks = [r for r in journal.get("rollbacks", []) if r.get("status") == "failed"]
    for run in failed_rollbacks:
        reasons.append(f"rollback {run['activity'].get('name')} failed")
    if journal.get("status") in ("interrupted", "aborted"):
        return "ABORTED", [f"run {journal['status']}"] + reasons
    if before is not None and not before.get("steady_state_met"):
        raised = [_last_line(p) for p in before.get("probes", []) if p.get("status") == "failed" and p.get("exception")]
        if raised:  # the probe could not ask the target at all: say why, not that a tolerance was missed
            return "ERROR", [f"probe {_missed(before)[0] if _missed(before) else 'before the fault'} failed: "
                             f"{raised[0]}"] + reasons
        return "ERROR", [f"steady state not met before the fault (probe {', '.join(_missed(before)) or 'unknown'} "
                         "missed its tolerance): nothing was judged"] + reasons
    deviated = False
    for state in during:
        if not state.get("steady_state_met"):
            deviated = True
            reasons.append("steady state not met during the method")
            break
    if journal.get("deviated") or (after is not None and not after.get("steady_state_met")):
        deviated = True
        reasons.extend(f"probe {name} missed its tolerance after the fault" for name in _missed(after or {}))
    if deviated:
        return "FAIL", reasons
    if failed_runs or failed_rollbacks or reasons:
        return "ERROR", reasons
    return "PASS", reasons


def _timeline_handler(timeline: Timeline, restore: list[tuple[int, Any]]) -> Any:
    from chaoslib.run import RunEventHandler

    class TimelineHandler(RunEventHandler):  # type: ignore[misc]
        """Writes every activity's start and end into the run's timeline, and turns a SIGINT or
        SIGTERM during the run into Interrupted, noted in the timeline (chaoslib keeps no record
        of which signal it was; a safeguard's stop looks the same to it)."""

        def _add(self, kind: str, **fields: Any) -> None:
            timeline.add(kind, **fields)

        def started(self, experiment: dict[str, Any], journal: dict[str, Any]) -> None:
            if threading.current_thread() is not threading.main_thread():
                return
            for signum in (signal.SIGINT, signal.SIGTERM):
                handler = signal.getsignal(signum)
                restore.append((signum, handler))

                def noting(received: int, frame: Any, handler: Any = handler) -> None:
                    if handler == signal.SIG_IGN:
                        return
                    SHUTDOWN.note(received)
                    self._add("signal_received", signal=signal.Signals(received).name)
                    # Raised as Ctrl-C whichever it was: chaoslib stops the method at once and rolls
                    # back (its SIGTERM exception, raised inside an activity, is only that activity
                    # failing, and the method goes on).
                    raise Interrupted(received, time.time())
                signal.signal(signum, noting)

        def start_activity(self, activity: dict[str, Any]) -> None:
            self._add("activity_started", name=activity.get("name"), type=activity.get("type"))

        def activity_completed(self, activity: dict[str, Any], run: dict[str, Any]) -> None:
            self._add("activity_finished", name=activity.get("name"), status=run.get("status") if run else None)

        def start_method(self, experiment: dict[str, Any]) -> None:
            self._add("method_started")

        def method_completed(self, experiment: dict[str, Any], state: Any) -> None:
            self._add("method_finished")

        def start_rollbacks(self, experiment: dict[str, Any]) -> None:
            self._add("rollbacks_started")

        def rollbacks_completed(self, experiment: dict[str, Any], journal: dict[str, Any]) -> None:
            self._add("rollbacks_finished")

    return TimelineHandler()


def plan(name_or_path: str, variables: dict[str, Any], target_configuration: dict[str, Any]) -> list[str]:
    """What a run would do, with arguments resolved, touching nothing (dry run)."""
    from chaoslib import substitute

    path = experiment_path(name_or_path)
    experiment = load(path)
    parameters = parameters_for(experiment, path.stem, variables)
    RunContext.of(target_configuration)  # resolves the target: the allow-list refuses here
    lines = [f"experiment {path.stem} on {target_configuration.get('drillbook_target')}: {experiment['title']}"]
    for section in ("method", "rollbacks"):
        for activity in experiment.get(section, []):
            provider = activity.get("provider", {})
            arguments = substitute(provider.get("arguments", {}), parameters, {})
            lines.append(f"{section}: {activity['type']} {activity['name']} -> {provider.get('func')}({arguments})")
    return lines


def safeguard_control(probes: list[dict[str, Any]]) -> dict[str, Any]:
    """A chaostoolkit-addons safeguard: when one of these probes misses its tolerance the run is
    interrupted as soon as possible, and the rollbacks run."""
    return {"name": "drillbook-safeguard",
            "provider": {"type": "python", "module": "chaosaddons.controls.safeguards",
                         "arguments": {"probes": probes}}}


def run(name_or_path: str, target_configuration: dict[str, Any], run_dir: Path, variables: dict[str, Any] | None = None,
        safeguards: list[dict[str, Any]] | None = None, target: "Target | None" = None) -> ChaosResult:
    """Validate, then run the experiment; rollbacks always run and leftover faults are undone.

    safeguards: extra probe definitions (with ``frequency`` and ``tolerance``) that abort the
    fault when they fail, for example the victim's error rate passing a limit.
    target: the target the configuration names, when the caller has built it already.
    """
    from chaoslib.experiment import ensure_experiment_is_valid, run_experiment

    path = experiment_path(name_or_path)
    experiment = load(path)
    parameters = parameters_for(experiment, path.stem, variables or {})
    run_id = uuid.uuid4().hex[:12]
    if run_dir.exists() and any(run_dir.iterdir()):
        raise ConfigError(f"run folder {run_dir} is not empty; each run needs its own")
    run_dir.mkdir(parents=True, exist_ok=True)
    configuration = {**parameters, **target_configuration, "drillbook_run_id": run_id,
                     "drillbook_run_dir": str(run_dir)}
    context = RunContext.of(configuration, target)  # the target once; the allow-list refuses here
    experiment = copy.deepcopy(experiment)
    experiment["configuration"] = configuration
    if not drill_control.declared_in(experiment):  # an experiment of the user's own: its phases are followed too
        experiment["controls"] = [drill_control.DECLARATION, *experiment.get("controls", [])]
    if safeguards:
        experiment["controls"] = [*experiment.get("controls", []), safeguard_control(safeguards)]
    ensure_experiment_is_valid(experiment)
    timeline = Timeline(written_to(run_dir / TIMELINE))  # as it happens: a runner killed mid-run leaves it
    timeline.add("experiment_started", experiment=path.stem, run_id=run_id)
    fallback: list[str] = []
    journal: dict[str, Any] = {}
    handlers: list[tuple[int, Any]] = []
    context.follow(configuration)  # it travels in the configuration to every control and provider of the run
    try:
        with chaoslib_quiet():
            journal = run_experiment(experiment, settings=copy.deepcopy(ROLLBACKS_ALWAYS), experiment_vars=({}, {}),
                                     event_handlers=[_timeline_handler(timeline, handlers)])
    finally:
        for signum, handler in reversed(handlers):
            signal.signal(signum, handler)
        # Belt and braces: whatever the journal says, nothing this run injected stays in place.
        for fault, how in undo_open_faults(context, run_id):
            fallback.append(f"{fault.kind}: {how}")
            timeline.add("fallback_rollback", fault=fault.kind, how=how)
        measurements = context.close()  # the control closed it already unless the run was cut short
        configuration.pop(CONTEXT, None)  # the journal's copy of the experiment shares this dict: not evidence
    verdict, reasons = verdict_of(journal)
    if fallback:
        reasons.append("faults left open after the rollbacks were undone: " + "; ".join(fallback))
    left = context.ledger.open_faults(run_id)
    if left:  # a rollback not seen to restore: the target is not as it was, nothing can be trusted
        verdict = "ERROR"
        reasons.insert(0, "rollback not seen to restore the target: " + "; ".join(
            f"{fault.kind} of {fault.detail.get('service', 'the store')} still open" for fault in left)
            + " (`drillbook rollback` tries again)")
    timeline.add("experiment_finished", verdict=verdict)
    (run_dir / "journal.json").write_text(json.dumps(journal, indent=2, default=str))
    noted = next((e for e in timeline if e["kind"] == "signal_received"), None)
    if noted is not None:  # the run was stopped by a signal: its rollbacks ran; stop what called it too
        stop = Interrupted(signal.Signals[noted["signal"]], noted["t"])
        stop.outcome.append(f"experiment {path.stem} rolled back; journal {run_dir / 'journal.json'}")
        raise stop
    return ChaosResult(path.stem, run_id, journal, verdict, reasons, timeline.events, measurements, run_dir)


def rollback_all(target_configuration: dict[str, Any], target: "Target | None" = None) -> list[str]:
    """Undo every open fault in the target's ledger (what `drillbook rollback` does); safe to repeat.
    target: the configuration's target, when the caller has it open already."""
    context = RunContext.of({**target_configuration, "drillbook_run_id": "rollback"}, target)
    return [f"{fault.kind} ({fault.detail}): {how}" for fault, how in undo_open_faults(context, None)]


def rollback_profile(profile: "LoadedProfile", state_dir: Path | None = None) -> list[str]:
    """Undo the faults still open on a profile's target (`drillbook rollback`). A platform
    drillbook runs itself (the sandbox) that is no longer running holds none of them (it starts
    clean): its open faults are closed as such, without asking it. Any other target is checked
    (allow-list, running sandbox, tenant keys) before anything is undone."""
    from drillbook.chaos.ledger import FaultLedger
    from drillbook.targets import owned_platform, run_paths, target_for

    platform = owned_platform(profile, state_dir)  # None: someone else runs the target
    if platform is not None and not platform.running():
        ledger = FaultLedger(run_paths(profile, state_dir)[1])
        closed = close_on_stopped_platform(ledger, ledger.open_faults())
        return [f"{fault.kind} ({fault.detail}): {how}" for fault, how in closed]
    directory = profile.state_dir(state_dir)
    target = target_for(profile, directory)  # refuses here: no sandbox running, or a context off the allow-list
    return rollback_all(target_configuration(profile, directory), target)


def target_configuration(profile: "LoadedProfile", state_dir: Path | None = None) -> dict[str, Any]:
    """What the runner injects into an experiment so that providers find the target and its ledger."""
    from drillbook.targets import run_paths

    state, ledger = run_paths(profile, state_dir)
    return {"drillbook_target": profile.kind, "drillbook_profile": str(profile.path) if profile.path.is_file() else "",
            "drillbook_state_dir": str(state), "drillbook_ledger": str(ledger)}


def sandbox_configuration(state_dir: Path) -> dict[str, Any]:
    """The configuration for the sandbox profile on the sandbox in state_dir."""
    from drillbook.profile import builtin_sandbox

    return target_configuration(builtin_sandbox(), state_dir)


__all__ = ["ChaosResult", "experiment_path", "target_configuration", "parameters_for", "plan", "rollback_all",
           "rollback_profile", "run", "sandbox_configuration", "verdict_of"]
