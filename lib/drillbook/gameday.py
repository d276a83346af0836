"""A game day: a plan of runbooks run in order on one target, one lock per target, and a summary
bundle that lists every run's verdict and evidence.

The plan is validated whole before anything runs (unknown runbook, unknown or bad parameter:
one line, exit 2). When the target is the sandbox and none is running, the game day starts one
and stops it at the end.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import yaml
from pydantic import Field, ValidationError

from drillbook import jsonl, project
from drillbook.config import StrictModel, evidence_settings, results_dir, validation_line
from drillbook.errors import ConfigError
from drillbook.evidence.exercise import Exercise
from drillbook.profile import load_profile
from drillbook.runlock import TargetLock

if TYPE_CHECKING:
    from drillbook.execute import ExecutedRun
    from drillbook.shutdown import Interrupted
    from drillbook.profile import LoadedProfile


class PlannedRun(StrictModel):
    runbook: str
    parameters: dict[str, Any] = Field(default_factory=dict)


class GameDayPlan(StrictModel):
    name: str
    target: str = "sandbox"
    runbooks: list[PlannedRun] = Field(min_length=1)
    exercise: Exercise = Field(default_factory=Exercise)  # the exercise record every run of it is sealed with


def plan_path(name_or_path: str | None) -> Path:
    """A plan name from gamedays/ (default: default) or a path to a plan."""
    return project.find(project.PLANS, name_or_path or "default")


def load_plan(path: Path, target: str | None = None) -> GameDayPlan:
    """Read and validate a plan, including every runbook's parameters, before anything runs.

    target: a profile to run the plan on instead of the plan's own target.
    """
    from drillbook.parameters import runbook_path, validate_parameters

    try:
        plan = GameDayPlan.model_validate(yaml.safe_load(path.read_text()))
    except ValidationError as error:
        raise ConfigError(f"{path.name}: {validation_line(error)}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path.name} is not valid YAML: {error}") from None
    if target is not None:
        plan = plan.model_copy(update={"target": target})
    try:
        profile = load_profile(plan.target)
    except ConfigError as error:
        raise ConfigError(f"{path.name}: target: {error}") from None
    for index, planned in enumerate(plan.runbooks, start=1):
        try:
            validate_parameters(runbook_path(planned.runbook),
                                {k: str(v) for k, v in planned.parameters.items()}, profile)
        except ConfigError as error:
            raise ConfigError(f"{path.name}: runbook {index} ({planned.runbook}): {error}") from None
    return plan


def gameday_verdict(verdicts: list[str]) -> tuple[str, str]:
    """A game day FAILs when a runbook showed a failure, is ERROR when a runbook could not judge
    (crashed, errored, aborted) and none failed, and PASSes only when every runbook passed."""
    counts = {verdict: verdicts.count(verdict) for verdict in dict.fromkeys(verdicts)}
    reason = ", ".join(f"{count} {verdict}" for verdict, count in counts.items())
    if "INTERRUPTED" in counts:
        return "INTERRUPTED", reason
    if "FAIL" in counts:
        return "FAIL", reason
    if any(verdict != "PASS" for verdict in counts) or not verdicts:
        return "ERROR", reason or "no runbook ran"
    return "PASS", reason


@dataclass
class GameDayResult:
    plan: GameDayPlan
    runs: list[tuple[str, str, Path]]  # runbook, verdict, bundle
    summary_bundle: Path

    @property
    def verdict(self) -> str:
        return gameday_verdict([verdict for _, verdict, _ in self.runs])[0]

    @property
    def passed(self) -> bool:
        return self.verdict == "PASS"


GAMEDAY = "gameday"  # its process-ledger kind: a summary bundle that `drillbook rollback` seals if the game day dies
RUNS = "runs.jsonl"  # in the game day's scratch folder: each run, as it ended


class GameDaySummary:
    """The game day's own bundle, opened when the game day starts: each run is journalled as it
    ends, so that a game day killed outright (SIGKILL) still has its summary sealed, by
    `drillbook rollback`, naming the runs that ended and the ones that never ran."""

    def __init__(self, bundle: Any, scratch: Path, ledger: Any, entry: Any) -> None:
        self.bundle, self.scratch, self.ledger, self.entry = bundle, scratch, ledger, entry

    @classmethod
    def open(cls, plan: GameDayPlan, target: str, results: Path | None, state: Path,
             exercise: Exercise | None = None) -> "GameDaySummary":
        import tempfile

        from drillbook.evidence import BundleWriter
        from drillbook.evidence.catalog import GAMEDAY_PREFIX
        from drillbook.processes import PROCESSES, ProcessLedger

        record = exercise.sealed() if exercise is not None else None
        bundle = BundleWriter(results_dir(results), f"{GAMEDAY_PREFIX}{plan.name}", target, plan.model_dump(),
                              extra={"exercise": record} if record else None, **evidence_settings())
        scratch = Path(tempfile.mkdtemp(prefix="drillbook-gameday-"))
        ledger = ProcessLedger(state / PROCESSES)
        entry = ledger.started(GAMEDAY, os.getpid(), json.dumps({"bundle": str(bundle.path), "scratch": str(scratch)}))
        return cls(bundle, scratch, ledger, entry)

    def ran(self, runbook: str, verdict: str, bundle: Path) -> None:
        jsonl.append(self.scratch / RUNS, {"runbook": runbook, "verdict": verdict, "bundle": str(bundle)}, durable=True)

    def seal(self, plan: GameDayPlan, runs: list[tuple[str, str, Path]], stopped: "Interrupted | None",
             failed: BaseException | None = None) -> Path:
        verdict, reason = gameday_verdict([verdict for _, verdict, _ in runs])
        not_run = [planned.runbook for planned in plan.runbooks[len(runs):]]
        if stopped is not None:
            verdict = "ABORTED" if stopped.halted else "INTERRUPTED"
            reason = (f"{stopped.cause()} at {stopped.moment}"
                      + (f"; not run: {', '.join(not_run)}" if not_run else "") + (f"; {reason}" if reason else ""))
        elif failed is not None:
            verdict = "ERROR"
            reason = (f"the game day failed: {type(failed).__name__}: {failed}"
                      + (f"; not run: {', '.join(not_run)}" if not_run else "") + (f"; {reason}" if reason else ""))
        write_summary(self.bundle, plan.name, [planned.runbook for planned in plan.runbooks], runs, verdict, reason)
        self.bundle.seal("interrupted" if stopped is not None else "complete")
        self.ledger.stopped(self.entry, "sealed")
        shutil.rmtree(self.scratch, ignore_errors=True)
        return self.bundle.path


def write_summary(bundle: Any, plan_name: str, planned: list[str], runs: list[tuple[str, str, Path]], verdict: str,
                  reason: str) -> None:
    """The game day's summary.json: every run's verdict and bundle, and the ones that never ran."""
    from drillbook.evidence import RunSummary, SloCheck
    from drillbook.evidence.catalog import GAMEDAY_PREFIX

    checks = [SloCheck(name=f"{runbook} passed", comparison="==", threshold=1, value=int(verdict == "PASS"))
              for runbook, verdict, _ in runs]
    metrics = {"runs": [{"runbook": r, "verdict": v, "bundle": b.name} for r, v, b in runs],
               "not_run": planned[len(runs):]}
    bundle.write_json("summary.json", RunSummary(runbook=f"{GAMEDAY_PREFIX}{plan_name}", control="gameday",
                                                 verdict=verdict, metrics=metrics, checks=checks,
                                                 reason=reason).to_json())


def recover_killed_gamedays(state: Path) -> tuple[list[str], list[str]]:
    """Seal the summaries of game days whose process died (`drillbook rollback`, after the runs
    they were in are sealed): a line for each sealed, and one for each that still cannot be
    written (a full disk: it waits for the next rollback)."""
    from drillbook.evidence.bundle import MANIFEST, UNSEALED
    from drillbook.execute import not_written
    from drillbook.processes import PROCESSES, ProcessLedger, same_process

    ledger = ProcessLedger(state / PROCESSES)
    done: list[str] = []
    failed: list[str] = []
    for entry in ledger.open_entries():
        if entry.kind != GAMEDAY or same_process(entry.owner_pid, entry.owner_ticks):
            continue
        detail = json.loads(entry.detail)
        folder, scratch = Path(detail["bundle"]), Path(detail["scratch"])
        if (folder / UNSEALED).is_file() and not (folder / MANIFEST).exists():
            try:
                done.append(seal_killed_gameday(folder, scratch, entry.owner_pid, entry.at))
            except OSError as error:
                failed.append(not_written(folder, scratch, error))
                continue
        ledger.stopped(entry, "recovered by rollback")
    return done, failed


def seal_killed_gameday(folder: Path, scratch: Path, owner_pid: int, started_at: float) -> str:
    """Seal the summary of a game day whose runner died before it could (`drillbook rollback`):
    verdict ERROR, the runs it journalled, the rest not run. One line says what was sealed."""
    from datetime import datetime, timezone

    from drillbook.evidence import BundleWriter

    bundle = BundleWriter.resume(folder, **evidence_settings())
    plan = bundle.parameters
    planned = [str(item.get("runbook")) for item in plan.get("runbooks") or [] if isinstance(item, dict)]
    runs = [(str(r["runbook"]), str(r["verdict"]), Path(str(r["bundle"]))) for r in jsonl.read(scratch / RUNS)]
    counts = gameday_verdict([verdict for _, verdict, _ in runs])[1]
    not_run = planned[len(runs):]
    started = datetime.fromtimestamp(started_at, timezone.utc).isoformat(timespec="seconds")
    reason = (f"game day killed: drillbook (pid {owner_pid}, started {started}) died before it could seal this "
              "summary; sealed afterwards by drillbook rollback" + (f"; did not end: {', '.join(not_run)}" if not_run else "")
              + (f"; {counts}" if counts else ""))
    write_summary(bundle, str(plan.get("name", "")), planned, runs, "ERROR", reason)
    bundle.event("sealed_by_rollback", runner_pid=owner_pid)
    bundle.seal("killed")
    shutil.rmtree(scratch, ignore_errors=True)
    return f"{folder.name}: ERROR, game day killed (pid {owner_pid}); {len(runs)} run(s) ended, {len(not_run)} did not"


def _refuse_if_halted(profile: "LoadedProfile", sandbox_state: Path | None) -> None:
    """A halted target refuses the whole game day here, before its summary bundle is made (a target
    that cannot be opened now is left to the runs, which say why)."""
    from drillbook.errors import DrillbookError
    from drillbook.halt import refuse_if_halted
    from drillbook.targets import target_for

    try:
        target = target_for(profile, sandbox_state)
    except DrillbookError:
        return
    refuse_if_halted(target)


def run_gameday(plan_file: Path, sandbox_state: Path, results: Path | None = None,
                on_start: Callable[[int, int, str], None] | None = None,
                on_done: Callable[[ExecutedRun], None] | None = None, target: str | None = None,
                exercise: Exercise | None = None) -> GameDayResult:
    """Run a plan's runbooks one after the other on its target (exercise: the record every run
    is sealed with, the plan's own when None)."""
    from drillbook.execute import execute
    from drillbook.runspec import resolve_run
    from drillbook.shutdown import SHUTDOWN, Interrupted
    from drillbook.targets import owned_platform

    from drillbook.parameters import check_prometheus

    plan = load_plan(plan_file, target)
    profile = load_profile(plan.target)
    check_prometheus(profile, [planned.runbook for planned in plan.runbooks])  # before a sandbox is started
    platform = owned_platform(profile, sandbox_state)  # None: someone else runs the target
    if platform is not None:
        sandbox_state = platform.state_dir
    record = exercise if exercise is not None else plan.exercise
    specs = [resolve_run(planned.runbook, profile, {k: str(v) for k, v in planned.parameters.items()}, sandbox_state,
                         record) for planned in plan.runbooks]  # each run resolved once, with the profile loaded once
    if platform is None or platform.running():  # a target that runs already may be halted
        _refuse_if_halted(profile, sandbox_state)
    runs: list[tuple[str, str, Path]] = []
    stopped: Interrupted | None = None
    failed: Exception | None = None
    with TargetLock(profile, f"game day {plan.name}", sandbox_state):
        summary = GameDaySummary.open(plan, profile.name, results, specs[0].state, record)
        started_here = platform is not None and not platform.running()
        try:
            if started_here:
                assert platform is not None
                platform.start()
            for index, planned in enumerate(plan.runbooks, start=1):
                if on_start:
                    on_start(index, len(plan.runbooks), planned.runbook)
                try:
                    executed = execute(planned.runbook, results=results, spec=specs[index - 1])
                except Interrupted as stop:  # that runbook's bundle is sealed INTERRUPTED; the plan stops here
                    stopped = stop
                    if stop.bundle is not None:
                        runs.append((planned.runbook, "INTERRUPTED", stop.bundle))
                    break
                runs.append((executed.runbook, executed.verdict, executed.bundle))
                summary.ran(executed.runbook, executed.verdict, executed.bundle)
                if on_done:
                    on_done(executed)
        except Interrupted as stop:  # between runbooks, or while the sandbox started
            stopped = stop
        except Exception as error:  # noqa: BLE001 - the sandbox did not start, say: the summary says so, then it is raised
            failed = error
        finally:
            with SHUTDOWN.shielded():
                if started_here:
                    assert platform is not None
                    platform.stop()
        with SHUTDOWN.shielded():
            summary_bundle = summary.seal(plan, runs, stopped, failed)
    if failed is not None:
        raise failed
    if stopped is not None:
        stopped.outcome = [*stopped.outcome, f"game-day summary sealed as {summary_bundle}"]
        stopped.bundle = summary_bundle  # the game day's own evidence: it names every run and what did not run
        if started_here:
            stopped.outcome.append("sandbox stopped")
        raise stopped
    return GameDayResult(plan, runs, summary_bundle)
