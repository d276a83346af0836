"""The concurrency family: two drillbook commands on one target, or on the evidence, at once.
A run that changes a target holds it: a second run, a chaos run or a game day on the same target
is refused in one line naming the holder, before anything is touched; a run on another sandbox
beside it, and a read-only runbook on the held one, are not refused; verify and report during a
live run show it running, not failed. Each probe starts its own sandboxes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from pathlib import Path

import yaml

from drillbook.config import SandboxConfig
from drillbook.profile import builtin_sandbox
from drillbook.sandbox import launcher
from drillbook.targets import run_lock_path
from tests.helpers import poll
from tests.integration.test_evidence import write_bundle
from tests.probes import Probe, drillbook
from tests.probes.interrupts import Watched

FAMILY = "concurrency"
# The run that holds the target: an HA drill long enough to judge its recovery on a busy machine.
HOLDING_RUN = ["run", "ha-replica-loss", "-p", "duration_s=24", "-p", "kill_after_s=3", "-p", "users=4"]


def holder_pid(state: Path) -> int | None:
    try:
        return json.loads(run_lock_path(builtin_sandbox(), state).read_text() or "{}").get("pid")
    except (OSError, ValueError):
        return None


def with_a_held_sandbox(second: Callable[[Path, Path, Watched], str | None], folder: Path) -> str | None:
    """Start a sandbox, a real HA run on it that holds it, then `second` (folder, state, the
    first run) while the first runs; the first must still PASS."""
    state = folder / "held"
    launcher.start(SandboxConfig(tokens_per_second=0), state)
    first = Watched(HOLDING_RUN, state, folder / "first")
    try:
        poll("the first run holding the sandbox", lambda: holder_pid(state) == first.process.pid, 120)
        missed = second(folder, state, first)
        code, out, err = first.finish()
        if missed is None and code != 0:
            missed = f"the first run did not pass beside it (exit {code}): {(out + err).strip()[-200:]}"
        return missed
    finally:
        if first.process.poll() is None:
            first.process.kill()
            first.process.wait()
        for found in (state, folder / "beside"):
            if launcher.find(found) is not None:
                launcher.stop(found)


def refused(args: list[str], folder: Path, state: Path, first: Watched) -> str | None:
    results = folder / "second"
    done = drillbook([*args, "--results", results] if args[0] in ("run", "gameday") else args,
                     env={"DRILLBOOK_STATE_DIR": str(state)}, timeout=300)
    lines = [line for line in done.stderr.strip().splitlines() if not line.startswith("… ")]  # progress
    if done.returncode != 2:
        return f"not refused: exit {done.returncode}: {(lines or [''])[-1][:200]}"
    if len(lines) != 1 or f"(pid {first.process.pid}" not in lines[0]:
        return f"refused without naming the holder in one line: {done.stderr[:300]!r}"
    if results.exists() and any(results.iterdir()):
        return f"a bundle was begun before the refusal: {sorted(p.name for p in results.iterdir())[:3]}"
    return None


def beside(folder: Path, state: Path, first: Watched) -> str | None:
    """A run on another sandbox (the same parent folder) goes ahead while the first runs."""
    other = folder / "beside"
    launcher.start(SandboxConfig(tokens_per_second=0), other)
    second = Watched(["run", "cold-start", "-p", "trials=1"], other, folder / "beside-results")
    at_once = first.process.poll() is None
    code, _, err = second.finish()
    if code != 0:
        return f"refused or failed beside the first (exit {code}): {err.strip()[-200:]}"
    return None if at_once else "the first run was over before the second began: not at once"


def read_only(folder: Path, state: Path, first: Watched) -> str | None:
    """A read-only on-call triage on the held sandbox is not refused."""
    done = drillbook(["run", "agent-latency-triage", "-p", "window_s=2", "--results", folder / "triage"],
                     env={"DRILLBOOK_STATE_DIR": str(state)}, timeout=300)
    if done.returncode not in (0, 1) or not any((folder / "triage").glob("*/manifest.json")):
        return f"a read-only runbook was refused (exit {done.returncode}): {done.stderr.strip()[-200:]}"
    return None


def evidence_while_running(folder: Path, state: Path, first: Watched) -> str | None:
    """verify and report over the first run's results folder (two sealed PASSes in it) while it
    runs: the live run is shown running, verify finds nothing wrong, the score is not lowered."""
    results = folder / "first"
    poll("the live run's bundle", lambda: any(p.is_dir() for p in results.glob("*_ha-replica-loss_*")), 60)
    checked = drillbook(["verify", results])
    page = folder / "report.html"
    reported = drillbook(["report", results, "-o", page])
    if first.process.poll() is not None:
        return "the run ended before verify and report were done: not at once"
    if checked.returncode != 0 or "running: a run in progress" not in checked.stdout:
        return f"verify during the run: exit {checked.returncode}: {checked.stdout.strip()[-200:]}"
    html = page.read_text() if page.exists() else ""
    if reported.returncode != 0 or ">RUNNING<" not in html or "100.0 / 100" not in html:
        return f"report during the run: exit {reported.returncode}, running shown: {'>RUNNING<' in html}"
    return None


def _sealed_before(folder: Path) -> None:
    for _ in range(2):
        write_bundle(folder / "first")


def _second_game_day(folder: Path, state: Path, first: Watched) -> str | None:
    plan = folder / "plan.yaml"
    plan.write_text(yaml.safe_dump({"name": "second", "target": "sandbox",
                                    "runbooks": [{"runbook": "cold-start", "parameters": {"trials": 1}}]}))
    return refused(["gameday", str(plan)], folder, state, first)


def _with_history(folder: Path) -> str | None:
    _sealed_before(folder)
    return with_a_held_sandbox(evidence_while_running, folder)


def probes() -> list[Probe]:
    return [
        Probe(FAMILY, "a second run on a held sandbox is refused",
              partial(with_a_held_sandbox, partial(refused, ["run", "cold-start", "-p", "trials=1"]))),
        Probe(FAMILY, "a chaos run on a held sandbox is refused",
              partial(with_a_held_sandbox, partial(refused, ["chaos", "run", "cold-start"]))),
        Probe(FAMILY, "a game day on a held sandbox is refused", partial(with_a_held_sandbox, _second_game_day)),
        Probe(FAMILY, "a run on another sandbox beside it goes ahead", partial(with_a_held_sandbox, beside)),
        Probe(FAMILY, "a read-only runbook on a held sandbox goes ahead", partial(with_a_held_sandbox, read_only)),
        Probe(FAMILY, "verify and report during a live run", _with_history),
    ]


__all__ = ["FAMILY", "probes"]
