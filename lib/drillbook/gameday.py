"""A game day: a plan of runbooks run in order on one target, one lock per target, and a summary
bundle that lists every run's verdict and evidence.

The plan is validated whole before anything runs (unknown runbook, unknown or bad parameter:
one line, exit 2). When the target is the sandbox and none is running, the game day starts one
and stops it at the end.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import yaml
from pydantic import Field, ValidationError

from drillbook import project
from drillbook.config import StrictModel, evidence_settings, results_dir, validation_line
from drillbook.errors import ConfigError
from drillbook.profile import load_profile
from drillbook.runlock import TargetLock

if TYPE_CHECKING:
    from drillbook.execute import ExecutedRun
    from drillbook.shutdown import Interrupted


class PlannedRun(StrictModel):
    runbook: str
    parameters: dict[str, Any] = Field(default_factory=dict)


class GameDayPlan(StrictModel):
    name: str
    target: str = "sandbox"
    runbooks: list[PlannedRun] = Field(min_length=1)


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


def run_gameday(plan_file: Path, sandbox_state: Path, results: Path | None = None,
                on_start: Callable[[int, int, str], None] | None = None,
                on_done: Callable[[ExecutedRun], None] | None = None, target: str | None = None) -> GameDayResult:
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
    specs = [resolve_run(planned.runbook, profile, {k: str(v) for k, v in planned.parameters.items()}, sandbox_state)
             for planned in plan.runbooks]  # each run resolved once, with the profile loaded once
    runs: list[tuple[str, str, Path]] = []
    stopped: Interrupted | None = None
    with TargetLock(profile, f"game day {plan.name}", sandbox_state):
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
                if on_done:
                    on_done(executed)
        except Interrupted as stop:  # between runbooks, or while the sandbox started
            stopped = stop
        finally:
            with SHUTDOWN.shielded():
                if started_here:
                    assert platform is not None
                    platform.stop()
        with SHUTDOWN.shielded():
            summary_bundle = _seal_summary(plan, profile.name, runs, results, stopped)
    if stopped is not None:
        stopped.outcome = [*stopped.outcome, f"game-day summary sealed as {summary_bundle}"]
        stopped.bundle = summary_bundle  # the game day's own evidence: it names every run and what did not run
        if started_here:
            stopped.outcome.append("sandbox stopped")
        raise stopped
    return GameDayResult(plan, runs, summary_bundle)


def _seal_summary(plan: GameDayPlan, target: str, runs: list[tuple[str, str, Path]], results: Path | None,
                  stopped: "Interrupted | None") -> Path:
    """The game day's own bundle: every run's verdict and bundle, and the ones that never ran."""
    from drillbook.evidence import BundleWriter, RunSummary, SloCheck
    from drillbook.evidence.catalog import GAMEDAY_PREFIX

    checks = [SloCheck(name=f"{runbook} passed", comparison="==", threshold=1, value=int(verdict == "PASS"))
              for runbook, verdict, _ in runs]
    not_run = [planned.runbook for planned in plan.runbooks[len(runs):]]
    metrics = {"runs": [{"runbook": r, "verdict": v, "bundle": b.name} for r, v, b in runs], "not_run": not_run}
    verdict, reason = gameday_verdict([verdict for _, verdict, _ in runs])
    if stopped is not None:
        verdict = "INTERRUPTED"
        reason = (f"interrupted by {stopped.signal_name} at {stopped.moment}"
                  + (f"; not run: {', '.join(not_run)}" if not_run else "") + (f"; {reason}" if reason else ""))
    summary = RunSummary(runbook=f"{GAMEDAY_PREFIX}{plan.name}", control="gameday", verdict=verdict, metrics=metrics,
                         checks=checks, reason=reason)
    bundle = BundleWriter(results_dir(results), f"{GAMEDAY_PREFIX}{plan.name}", target, plan.model_dump(),
                          **evidence_settings())
    bundle.write_json("summary.json", summary.to_json())
    bundle.seal("interrupted" if stopped is not None else "complete")
    return bundle.path
