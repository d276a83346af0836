"""The interrupts family: real signals to real drillbook processes at the moments that matter
(a run's kernel starting, its load running, its fault injected; a game day mid-run; a chaos run
mid-fault; a load; a sandbox starting; the platform itself killed under a run). After each, what
an on-call engineer needs must hold: the exit code says what happened, no process of the run is
left, no fault is open and the target is back at its replica counts, every bundle is sealed (after
`drillbook rollback` where the runner was SIGKILLed) and verifies, and no traceback was printed.

Each probe starts a sandbox of its own (a probe that broke one cannot break the next); the family
takes several minutes, so it runs from `python -m tests.probes --family interrupts`, not in CI,
where tests/integration/test_interrupts.py, test_chaos.py and test_load.py hold the same moments.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import yaml

from drillbook.chaos.ledger import FaultLedger
from drillbook.config import SandboxConfig
from drillbook.sandbox import launcher
from tests.helpers import poll
from tests.integration.test_interrupts import (HA, Runner, command_line, fault_injected, replicas,
                                               requests_flowing, settled)
from tests.probes import Probe, drillbook

FAMILY = "interrupts"
EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGKILL: -9}
SHORT_DAY = {"name": "short", "target": "sandbox", "runbooks": [
    {"runbook": "cold-start", "parameters": {"trials": 1}},
    {"runbook": "ha-replica-loss", "parameters": {"duration_s": 10, "kill_after_s": 2, "max_recovery_s": 6,
                                                  "users": 4}},
    {"runbook": "restore-drill"}]}


class Watched(Runner):
    """A Runner (tests/integration/test_interrupts.py) that waits on conditions as it watches."""

    def running(self, word: str) -> bool:
        return any(word in command_line(pid) for pid in self.seen)

    def wait(self, what: str, condition: Callable[[], object], timeout: float = 120) -> None:
        poll(what, lambda: self.watch() is not None and condition(), timeout, 0.05)

    def finish(self, timeout: float = 240) -> tuple[int, str, str]:
        return super().finish(timeout)


def moment_reached(moment: str, runner: Watched, state: Path) -> None:
    """Block until the command reaches the moment the signal is aimed at."""
    events = state / "events.jsonl"
    if moment == "kernel-starting":
        runner.wait("the kernel", lambda: runner.running("ipykernel_launcher"))
    elif moment.startswith("load-running"):
        runner.wait("requests flowing", lambda: requests_flowing(state))
    elif moment == "fault-injected":
        runner.wait("the fault", lambda: events.exists() and any(
            kind in events.read_text() for kind in ('"replica_killed"', '"scaled"')))
    elif moment == "game-day-mid-run":
        runner.wait("the game day's second run", lambda: runner.results is not None and any(
            runner.results.glob("*_ha-replica-loss_*")) and runner.running("locust"))
    elif moment == "sandbox-starting":
        runner.wait("a service process", lambda: runner.running("drillbook.sandbox") or
                    runner.running("sandbox serve") or len(runner.seen) >= 2, 60)


def command_for(command: str, moment: str, folder: Path, state: Path) -> list[str]:
    return {"run": HA,
            "chaos run": ["chaos", "run", "cold-start", "--var", "idle_s=30", "--out", str(folder / "chaos")],
            "load": ["load", "agent-sessions", "--users", "4", "--duration", "60s", "--out", str(folder / "load"),
                     *(["--workers", "2"] if moment == "load-running-2-workers" else [])],
            "gameday": ["gameday", str(_plan(folder))],
            "sandbox up": ["sandbox", "up", "--state-dir", str(state)]}[command]


def judge(command: str, moment: str, signum: signal.Signals, folder: Path) -> str | None:
    state, results = folder / "state", folder / "results"
    starts_sandbox = command in ("gameday", "sandbox up")
    handle = None if starts_sandbox else launcher.start(SandboxConfig(tokens_per_second=0), state)
    try:
        before = replicas(handle) if handle else None
        takes_results = command in ("run", "gameday")
        runner = Watched(command_for(command, moment, folder, state), state, results if takes_results else None)
        moment_reached(moment, runner, state)
        runner.watch()
        sent = time.monotonic()
        runner.process.send_signal(signum)
        code, _, err = runner.finish()
        STOP_TIMES[f"{command}: {signum.name} at {moment}"] = time.monotonic() - sent
        if "Traceback" in err:
            return "a traceback: " + err.strip().splitlines()[-1][:200]
        if code != EXIT[signum]:
            return f"exit {code}, not {EXIT[signum]}: {(err.strip().splitlines() or [''])[-1][:200]}"
        if signum == signal.SIGKILL:
            rolled = drillbook(["rollback"], env={"DRILLBOOK_STATE_DIR": str(state)}, timeout=240)
            if rolled.returncode != 0:
                return f"rollback exited {rolled.returncode}: {rolled.stderr.strip()[-200:]}"
        try:
            poll("the run's processes gone", lambda: runner.left_over() == [], 30)
        except TimeoutError:
            return f"processes left: {runner.left_over()[:3]}"
        if handle is not None:
            try:
                poll("the target back", lambda: settled(handle, before), 30)
            except TimeoutError:
                return f"the target is not back at {before}: {replicas(handle)}"
        faults = state / "faults.jsonl"
        if faults.exists() and FaultLedger(faults).open_faults():
            return f"{len(FaultLedger(faults).open_faults())} fault(s) left open"
        if starts_sandbox and launcher.find(state) is not None:
            return "the sandbox it started still runs"
        if takes_results:
            if not any(results.glob("*/manifest.json")):
                return "no bundle was sealed"
            verified = drillbook(["verify", results, "--allow-incomplete"])
            if verified.returncode != 0:
                return f"verify exited {verified.returncode}: {verified.stdout.strip()[-200:]}"
        return None
    finally:
        if launcher.find(state) is not None:
            launcher.stop(state, handle=handle)


# How long each probed command took to exit after its signal (seconds), for the table's notes.
STOP_TIMES: dict[str, float] = {}


def _plan(folder: Path) -> Path:
    plan = folder / "plan.yaml"
    plan.write_text(yaml.safe_dump(SHORT_DAY))
    return plan


def platform_killed(folder: Path) -> str | None:
    """The sandbox's supervisor SIGKILLed while a run's fault is open: the run is sealed ERROR
    naming the platform, and nothing is left open."""
    state, results = folder / "state", folder / "results"
    handle = launcher.start(SandboxConfig(tokens_per_second=0), state)
    runner = Watched(["run", "ha-replica-loss", "-p", "duration_s=20", "-p", "kill_after_s=3", "-p", "users=2"],
                     state, results)
    try:
        runner.wait("the fault", lambda: fault_injected(handle))
        os.kill(handle.pid, signal.SIGKILL)
        if handle.process is not None:
            handle.process.wait(30)
        code, _, err = runner.finish(timeout=240)
        if code != 1 or "Traceback" in err:
            return f"exit {code}: {(err.strip().splitlines() or [''])[-1][:200]}"
        (summary,) = [json.loads(p.read_text()) for p in results.glob("*/summary.json")]
        if summary["verdict"] != "ERROR" or "platform stopped under the run" not in summary["reason"]:
            return f"sealed {summary['verdict']}: {summary['reason'][:200]}"
        if FaultLedger(state / "faults.jsonl").open_faults():
            return "a fault is left open"
        return None
    finally:
        if launcher.find(state) is not None:
            launcher.stop(state)


KINDS: list[tuple[str, str, signal.Signals]] = [
    *[("run", moment, signum) for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)
      for moment in ("kernel-starting", "load-running", "fault-injected")],
    ("chaos run", "fault-injected", signal.SIGINT),
    ("chaos run", "fault-injected", signal.SIGTERM),
    ("chaos run", "fault-injected", signal.SIGKILL),
    ("load", "load-running", signal.SIGINT),
    ("load", "load-running-2-workers", signal.SIGINT),
    ("load", "load-running", signal.SIGTERM),
    ("gameday", "game-day-mid-run", signal.SIGINT),
    ("gameday", "game-day-mid-run", signal.SIGKILL),
    ("sandbox up", "sandbox-starting", signal.SIGINT),
]


def probes() -> list[Probe]:
    made = [Probe(FAMILY, f"{command}: {signum.name} at {moment}", partial(judge, command, moment, signum))
            for command, moment, signum in KINDS]
    made.append(Probe(FAMILY, "run: the platform SIGKILLed under it", platform_killed))
    return made


__all__ = ["FAMILY", "KINDS", "probes"]
