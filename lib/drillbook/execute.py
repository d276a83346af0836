"""Papermill wrapper: one runbook run -> one evidence bundle.

Parameters are checked (drillbook.parameters) before a kernel starts (unknown name or a value of
the wrong type: one line, exit 2). The notebook runs in a hermetic
environment (Jupyter, IPython and matplotlib write under the run's folder, not $HOME); the
executed notebook, its HTML and everything the run wrote are sealed into the bundle. A failing
cell yields verdict ERROR naming the cell, and the target is still rolled back.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from drillbook import jsonl
from drillbook.config import evidence_settings, results_dir
from drillbook.errors import EvidenceError
from drillbook.processes import PROCESSES, ProcessLedger
from drillbook.parameters import check_against_target
from drillbook.runspec import RunSpec, resolve_run
from drillbook.scenarios import control_of

if TYPE_CHECKING:
    from drillbook.evidence import BundleWriter
    from drillbook.profile import LoadedProfile
    from drillbook.shutdown import Interrupted
    from drillbook.targets import Target

@dataclass(frozen=True)
class ExecutedRun:
    runbook: str
    verdict: str
    bundle: Path
    summary: dict[str, Any]

    def why(self) -> str:
        """The run's reason and each failed check with its value, in one line."""
        failed = [f"{check['name']} {check.get('value')} {check.get('comparison')} {check.get('threshold')}"
                  + (f" ({check['note']})" if check.get("note") else "")
                  for check in self.summary.get("checks", []) if not check.get("passed")]
        return f"{self.summary.get('reason') or 'no reason recorded'}; failed checks: {'; '.join(failed) or 'none'}"

    def explain(self) -> str:
        """Why the run ended as it did, in one line: verdict, why, and where the evidence is (what
        a failing test or a pager message shows)."""
        return f"{self.runbook} {self.verdict}: {self.why()}; evidence in {self.bundle}"


def render_html(notebook_path: Path) -> str:
    import nbformat
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter().from_notebook_node(nbformat.read(str(notebook_path), as_version=4))
    return body


def execute(name: str, target: str = "sandbox", overrides: dict[str, str] | None = None,
            results: Path | None = None, sandbox_state: Path | None = None,
            execution_timeout: int = 1800, on_start: Callable[[Path], None] | None = None,
            spec: RunSpec | None = None) -> ExecutedRun:
    """Run one runbook with Papermill and seal everything it produced as one evidence bundle.

    target: a profile name from targets/ or a path to a profile.
    spec: the run as the caller resolved it already (drillbook.runspec); then name, target,
    overrides and sandbox_state are not read again.
    on_start: called with the bundle's folder once the target answered, before the kernel starts.

    However the run ends, the target is rolled back, no load it started is left running and the
    bundle is sealed with every file the run wrote: PASS/FAIL as the notebook judged, ERROR (a
    failing cell or a dead kernel, named), or INTERRUPTED (SIGINT or SIGTERM, named with its
    moment; `Interrupted` is raised again after sealing, for the CLI's exit code).
    """
    import papermill

    from drillbook.evidence import BundleWriter
    from drillbook.halt import HaltWatch, refuse_if_halted
    from drillbook.kernel import hermetic, interrupt_kernels
    from drillbook.runlock import run_lock
    from drillbook.shutdown import SHUTDOWN, Interrupted
    from drillbook.targets import open_target

    spec = spec or resolve_run(name, target, overrides or {}, sandbox_state)
    path, profile, parameters, state = spec.notebook, spec.profile, spec.parameters, spec.state
    workload = open_target(profile, state)  # unreachable, or a tenant key missing: refused here
    refuse_if_halted(workload)
    check_against_target(path.stem, parameters, workload, spec.validated)
    with run_lock(profile, path.stem, parameters, state):  # held until the run is rolled back and sealed
        results = results_dir(results)  # made here, once nothing else (the lock too) can refuse the run
        target_argument = spec.target_argument
        scratch = Path(tempfile.mkdtemp(prefix="drillbook-run-"))
        work, executed = scratch / "work", scratch / "runbook.ipynb"
        work.mkdir()
        record = spec.exercise.sealed() if spec.exercise is not None else None
        bundle = BundleWriter(results, path.stem, profile.name, parameters, secrets=workload.secrets(),
                              extra={"exercise": record} if record else None, **evidence_settings())
        ledger = ProcessLedger(state / PROCESSES)
        run_entry = ledger.started("run", os.getpid(), json.dumps({"bundle": str(bundle.path), "scratch": str(scratch)}))
        ending = RunEnding()
        bundle.event("runner_started", runbook=path.stem, target=profile.name, pid=os.getpid())

        def stop_between_cells(**_: Any) -> None:  # a signal that came while the kernel was idle
            SHUTDOWN.check()

        try:
            if on_start:
                on_start(bundle.path)
            with hermetic(scratch / KERNEL_HOME) as kernel, SHUTDOWN.gently(interrupt_kernels), HaltWatch(workload):
                try:
                    papermill.execute_notebook(
                        str(path), str(executed), **kernel, progress_bar=False, cwd=str(work),
                        execution_timeout=execution_timeout, log_output=False, on_cell_start=stop_between_cells,
                        parameters={**parameters, "target": target_argument, "drillbook_work_dir": str(work),
                                    "drillbook_state_dir": str(state)})
                except papermill.PapermillExecutionError as failure:
                    ending.cell_failed(failure)
                except Interrupted as stop:
                    ending.interrupted = stop
                except Exception as error:  # noqa: BLE001 - a dead kernel, a broken notebook: named in the verdict
                    ending.error = f"the kernel failed: {type(error).__name__}: {error}"
        except Interrupted as stop:  # before the kernel started
            ending.interrupted = stop
        finally:
            with SHUTDOWN.shielded():
                if SHUTDOWN.requested and ending.interrupted is None:
                    ending.interrupted = SHUTDOWN.interrupted()
                summary = wind_up(bundle, path.stem, profile, state, work, executed, ending, workload)
                ledger.stopped(run_entry, "sealed")
                shutil.rmtree(scratch, ignore_errors=True)
        if ending.interrupted is not None:
            stop = ending.interrupted
            stop.outcome = [*ending.undone_line(), f"evidence sealed as {bundle.path}"]
            stop.bundle = bundle.path
            raise stop
        return ExecutedRun(path.stem, summary["verdict"], bundle.path, summary)


@dataclass
class RunEnding:
    """How the notebook's execution ended, as the runner saw it."""

    error: str | None = None
    interrupted: "Interrupted | None" = None
    cell: int | None = None
    undone: list[str] = field(default_factory=list)
    platform: str | None = None  # why the target could not be rolled back (its platform died under the run, say)

    def cell_failed(self, failure: Any) -> None:
        from drillbook.shutdown import SHUTDOWN

        self.cell = failure.cell_index + 1
        if SHUTDOWN.requested or failure.ename in ("KeyboardInterrupt", "Interrupted"):
            self.interrupted = SHUTDOWN.interrupted() if SHUTDOWN.requested else None
            if self.interrupted is None:  # the kernel was interrupted by someone else
                self.error = f"cell {self.cell} was interrupted ({failure.ename})"
            return
        self.error = f"cell {self.cell} failed: {failure.ename}: {failure.evalue}"

    def undone_line(self) -> list[str]:
        return [f"faults rolled back ({len(self.undone)} by the runner's fallback)" if self.undone
                else "faults rolled back"]

    def reason(self) -> str:
        if self.interrupted is not None:
            where = f" during cell {self.cell}" if self.cell else ""
            return f"{self.interrupted.cause()} at {self.interrupted.moment}{where}"
        return "; ".join(filter(None, [self.platform, self.error]))


def wind_up(bundle: "BundleWriter", runbook: str, profile: "LoadedProfile", state: Path, work: Path,
            executed: Path, ending: RunEnding, workload: "Target | None" = None) -> dict[str, Any]:
    """After the notebook, whatever happened: stop what is still running, roll the target back
    (through workload, the run's target, when the caller opened it), put every file the run wrote
    into the bundle with its verdict, and seal it."""
    from drillbook.chaos import rollback_all
    from drillbook.chaos.runner import target_configuration
    from drillbook.kernel import forget_kernels
    from drillbook.targets.capabilities import OwnPlatform

    if ending.interrupted is not None:
        bundle.event("interrupted", signal=ending.interrupted.signal_name, at=ending.interrupted.moment,
                     cell=ending.cell, halted=ending.interrupted.halted)
    elif ending.error is not None:
        bundle.event("run_failed", reason=ending.error)
    forget_kernels()  # a kernel still alive after an escalated stop goes now; its load follows it
    stopped = ProcessLedger(state / PROCESSES).stop_orphans()
    failed = None
    try:
        ending.undone = rollback_all(target_configuration(profile, state), workload)  # nothing stays injected
    except Exception as error:  # noqa: BLE001 - the target stopped answering: the run is still sealed, saying so
        failed = f"{type(error).__name__}: {error}"[:REASON_MAX]
        bundle.event("rollback_failed", error=failed)
    if isinstance(workload, OwnPlatform) and not workload.platform_running():  # its faults were closed with it
        ending.platform = (f"the platform stopped under the run: {profile.name} is no longer running, and the "
                           "faults open on it were closed (it starts clean)")
        bundle.event("platform_stopped", reason=ending.platform)
    elif failed is not None:  # its faults stay open for `drillbook rollback`
        ending.platform = (f"the target could not be rolled back: {failed}; its open faults stay in the fault "
                           "ledger for `drillbook rollback`")
    if stopped:
        bundle.event("leftover_load_stopped", processes=stopped)
    if ending.undone:
        bundle.event("fallback_rollback", undone=ending.undone)
    try:
        try:
            summary = collect_run(bundle, runbook, profile, work, executed, ending)
        except OSError:
            raise
        except Exception as error:
            bundle.seal("incomplete", error=f"collecting the run's files failed: {type(error).__name__}: {error}")
            raise
        bundle.seal("interrupted" if ending.interrupted is not None else "complete")
    except OSError as error:  # a full disk, an I/O error: the run is kept for rollback to seal
        try:  # why, for the verdict rollback seals (the scratch folder is elsewhere, and may have room)
            (work.parent / NOT_SEALED).write_text(f"the runner could not write its evidence: {error.strerror or error}; "
                                                  f"sealed afterwards by drillbook rollback")
        except OSError:
            pass
        raise EvidenceError(not_written(bundle.path, work.parent, error)) from None
    return summary


KERNEL_HOME = "home"  # in a run's scratch folder: the kernel's hermetic folder
NOT_SEALED = "not-sealed.txt"  # in a run's scratch folder: why its runner could not seal it
# The states rollback seals a run in: its runner died before sealing (killed), or it lived and
# could not write its evidence (unwritten: a full disk, an I/O error).
KILLED, UNWRITTEN = "killed", "unwritten"
REASON_MAX = 300


def not_written(folder: Path, scratch: Path, error: OSError) -> str:
    """Why a run's evidence could not be sealed, and what seals it: one line."""
    return (f"evidence could not be written to {folder}: {error.strerror or error}; the run's files are kept in "
            f"{scratch}: free space, then `drillbook rollback` seals it")


def collect_run(bundle: "BundleWriter", runbook: str, profile: "LoadedProfile", work: Path, executed: Path,
                ending: RunEnding) -> dict[str, Any]:
    """Copy the run's files into the bundle, merge its timeline, and write its summary: the
    notebook's own when it finished, else one built from what it had recorded so far."""
    from drillbook.kernel import KERNEL_LOG
    from drillbook.timeline import TIMELINE

    if profile.path.is_file():
        bundle.copy_file(profile.path, "target-profile.yaml")  # names key variables, never keys
    if executed.exists():
        bundle.copy_file(executed, "runbook.ipynb")
        try:
            bundle.write_text("runbook.html", render_html(executed))
        except Exception as error:  # noqa: BLE001 - a half-written notebook still goes in as it is
            bundle.event("html_not_rendered", error=f"{type(error).__name__}: {error}")
    timeline = work / TIMELINE
    if timeline.exists():
        bundle.add_events(jsonl.read(timeline))
        timeline.unlink()
    summary_path = work / "summary.json"
    finished = (summary_path.exists() and ending.error is None and ending.interrupted is None
                and ending.platform is None)
    summary = json.loads(summary_path.read_text()) if finished else partial_summary(runbook, work, ending)
    summary_path.unlink(missing_ok=True)
    bundle.write_json("summary.json", summary)
    bundle.copy_tree(work, ".")
    kernel_log = work.parent / KERNEL_HOME / KERNEL_LOG
    if kernel_log.is_file() and kernel_log.stat().st_size:  # what the kernel said outside its cells
        bundle.copy_file(kernel_log, KERNEL_LOG)
    return summary


def partial_summary(runbook: str, work: Path, ending: RunEnding) -> dict[str, Any]:
    """The summary of a run that did not finish: what it recorded and checked so far, its verdict
    INTERRUPTED or ERROR, and why."""
    from drillbook.evidence import RunSummary, SloCheck
    from drillbook.runbook import RECORDS

    metrics: dict[str, Any] = {}
    checks: list[SloCheck] = []
    records = work / RECORDS
    for entry in jsonl.read(records):
        if "record" in entry:
            metrics[entry["record"]] = entry.get("value")
        elif "check" in entry:
            checks.append(SloCheck(**entry["check"]))
    verdict = "ERROR" if ending.interrupted is None else "ABORTED" if ending.interrupted.halted else "INTERRUPTED"
    reason = ending.reason() or "the runbook did not record a verdict"
    return RunSummary(runbook=runbook, control=control_of(runbook), verdict=verdict, metrics=metrics,
                      checks=checks, reason=reason).to_json()


def recover_killed_runs(profile: "LoadedProfile", state: Path) -> list[str]:
    """Seal the bundles of runs whose runner was killed (SIGKILL, a crash) or could not write its
    evidence (a full disk): verdict ERROR, state ``killed`` or ``unwritten``, with the true reason
    and every file the run had written; then remove their scratch folders.
    Runs whose runner still lives are left alone."""
    from drillbook.evidence import BundleWriter
    from drillbook.evidence.bundle import MANIFEST, UNSEALED
    from drillbook.processes import same_process
    from drillbook.targets import target_for

    ledger = ProcessLedger(state / PROCESSES)
    done: list[str] = []
    failed: list[str] = []
    for entry in ledger.open_entries():
        if entry.kind != "run" or same_process(entry.owner_pid, entry.owner_ticks):
            continue  # a game day's summary is drillbook.gameday's to seal
        detail = json.loads(entry.detail)
        folder, scratch = Path(detail["bundle"]), Path(detail["scratch"])
        if (folder / UNSEALED).is_file() and not (folder / MANIFEST).exists():
            try:
                target: Any = target_for(profile, state)
                secrets = target.secrets()
            except Exception:  # noqa: BLE001 - the target may be gone; the bundle's own values are redacted
                target, secrets = None, []
            bundle = BundleWriter.resume(folder, secrets=secrets, **evidence_settings())
            killed = datetime.fromtimestamp(entry.at, timezone.utc).isoformat(timespec="seconds")
            why = scratch / NOT_SEALED  # its runner lived, but could not write the evidence
            reason, line, state = ((why.read_text(), "its runner could not write its evidence", UNWRITTEN)
                                   if why.is_file() else
                                   (f"runner killed: drillbook (pid {entry.owner_pid}, started {killed}) died before "
                                    "it could seal this run; sealed afterwards by drillbook rollback",
                                    f"runner killed (pid {entry.owner_pid})", KILLED))
            undone = undone_by_watchdog(target, scratch / "work")
            if undone:
                reason += "; the platform's watchdog undid its faults when their leases ran out: " + "; ".join(undone)
            ending = RunEnding(error=reason)
            try:
                collect_run(bundle, bundle.runbook, profile, scratch / "work", scratch / "runbook.ipynb", ending)
                bundle.event("sealed_by_rollback", runner_pid=entry.owner_pid)
                bundle.seal(state)
            except OSError as error:  # still no space: this run waits, the others are sealed
                failed.append(not_written(folder, scratch, error))
                continue
            done.append(f"{folder.name}: ERROR, {line}")
        shutil.rmtree(scratch, ignore_errors=True)
        ledger.stopped(entry, "recovered by rollback")
    if failed:
        raise RunsNotSealed(done, failed)
    return done


def undone_by_watchdog(target: Any, work: Path) -> list[str]:
    """What the platform's fault-lease watchdog undid of a killed run's chaos runs (their run ids
    from the timelines the run left in work/chaos/), with when: from the target's events, where
    it has any (the sandbox's supervisor records each undo)."""
    from drillbook import jsonl

    runs = {event.get("run_id") for path in sorted(work.glob("chaos/*/timeline.jsonl")) for event in jsonl.read(path)
            if event.get("kind") == "experiment_started"}
    if target is None or not runs:
        return []
    try:
        events = target.events()
    except Exception:  # noqa: BLE001 - a platform that cannot answer: the reason goes without it
        return []
    return [f"{event['undone']} at {datetime.fromtimestamp(event['t'], timezone.utc).isoformat(timespec='seconds')}"
            for event in events if event.get("kind") == "fault_undone_by_watchdog" and event.get("run") in runs]


class RunsNotSealed(EvidenceError):
    """rollback sealed some killed runs and could not write the evidence of others."""

    def __init__(self, sealed: list[str], failed: list[str]) -> None:
        super().__init__(f"{len(failed)} run(s) not sealed: " + "; ".join(failed))
        self.sealed, self.failed = sealed, failed
