"""One run that changes a target at a time (drillbook.runlock), through the real CLI: a second run
on a sandbox another run holds is refused naming the holder, before anything is touched; a run on
another sandbox beside it is not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from drillbook.profile import builtin_sandbox
from drillbook.targets import run_lock_path
from tests.helpers import wait_for

pytestmark = pytest.mark.integration


def drillbook(*args: str) -> list[str]:
    return [sys.executable, "-m", "drillbook", *args]


def environment(state: Path) -> dict[str, str]:
    return {**os.environ, "DRILLBOOK_STATE_DIR": str(state), "COLUMNS": "250"}


def holder_of(state: Path) -> dict:
    """What the run holding the sandbox's lock wrote in it ({} while nobody has)."""
    path = run_lock_path(builtin_sandbox(), state)
    try:
        return json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return {}


def test_a_second_run_on_a_held_sandbox_is_refused_and_a_run_on_another_sandbox_is_not(sandbox_factory, tmp_path):
    held, beside = sandbox_factory(tokens_per_second=0), sandbox_factory(tokens_per_second=0)
    assert held.state_dir.parent == beside.state_dir.parent  # the old game-day lock refused this pair
    first = subprocess.Popen(drillbook("run", "ha-replica-loss", "--results", str(tmp_path / "first")),
                             env=environment(held.state_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, stdin=subprocess.DEVNULL)
    try:
        wait_for(lambda: holder_of(held.state_dir).get("pid") == first.pid, timeout=60)
        second = subprocess.run(drillbook("run", "cold-start", "--results", str(tmp_path / "second")),
                                env=environment(held.state_dir), capture_output=True, text=True, timeout=120)
        assert second.returncode == 2, second.stdout + second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("drillbook: target sandbox (sandbox "), second.stderr
        assert f"is in use by drillbook run ha-replica-loss (pid {first.pid}, since " in lines[0]
        assert not (tmp_path / "second").exists()  # refused before a bundle was begun
        with held.control() as control:  # and before anything was done to the sandbox
            assert not [e for e in control.events() if e["kind"] == "scaled" and e.get("service") == "agent"]

        alongside = subprocess.run(drillbook("run", "restore-drill", "--results", str(tmp_path / "beside")),
                                   env=environment(beside.state_dir), capture_output=True, text=True, timeout=300)
        assert alongside.returncode == 0, alongside.stdout + alongside.stderr
        assert first.poll() is None  # the two ran at once
    finally:
        out, err = first.communicate(timeout=300)
    assert first.returncode == 0, out + err
    assert holder_of(held.state_dir).get("pid") == first.pid  # what it wrote stays; the flock went with it
    again = subprocess.run(drillbook("run", "restore-drill", "--results", str(tmp_path / "again")),
                           env=environment(held.state_dir), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr

