"""`drillbook halt` from another process: the target undoes its leased faults at once, every run on
it stops and is sealed ABORTED naming the operator and the reason, a game day stops at once, and
new runs are refused until the halt is lifted. Real processes, the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers import wait_for

pytestmark = pytest.mark.integration


def cli(state: Path, *args: str, **popen: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "drillbook", *args], text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env={**os.environ, "DRILLBOOK_STATE_DIR": str(state), "COLUMNS": "250"}, **popen)


def done(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    process = cli(state, *args)
    out, err = process.communicate(timeout=300)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def leases(sandbox) -> list[dict]:
    with sandbox.control() as control:
        return control.leases()


def desired(sandbox, service: str) -> int:
    with sandbox.control() as control:
        return int(control.status()["services"][service]["desired"])


def scaled(sandbox) -> list[dict]:
    """The supervisor's scale events, oldest first: who set each tier to what (for a failure's message)."""
    with sandbox.control() as control:
        return [e for e in control.events() if e["kind"] == "scaled"]


def summary(results: Path) -> dict:
    (found,) = [json.loads(p.read_text()) for p in results.glob("*_cold-start_*/summary.json")]
    return found


def test_a_halt_stops_the_run_undoes_its_faults_and_refuses_runs_until_lifted(sandbox, tmp_path):
    results = tmp_path / "results"
    run = cli(sandbox.state_dir, "run", "cold-start", "-p", "trials=3", "--results", str(results))
    try:
        wait_for(lambda: any(lease["what"] for lease in leases(sandbox)), timeout=90)  # a tier is at zero
        assert desired(sandbox, "agent") == 0 or desired(sandbox, "model") == 0
        halted = done(sandbox.state_dir, "halt", "--operator", "alice", "--reason", "drill window closed")
        after_halt = time.monotonic()
        assert halted.returncode == 0, halted.stderr
        assert "halted sandbox by alice: drill window closed" in halted.stdout and "undone: scaled" in halted.stdout
        # The supervisor undid the faults itself, before any runner saw the halt.
        assert leases(sandbox) == [] and desired(sandbox, "agent") == 2 and desired(sandbox, "model") == 1, \
            scaled(sandbox)
        out, err = run.communicate(timeout=60)
        stopped_after = time.monotonic() - after_halt
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 143, err
    assert "the target was halted by alice" in err and "halted by alice: drill window closed; faults rolled back" in err
    found = summary(results)
    assert found["verdict"] == "ABORTED" and found["reason"].startswith("halted by alice: drill window closed at ")
    print(f"runner stopped {stopped_after:.2f}s after the halt returned")

    refused = done(sandbox.state_dir, "run", "cold-start", "--results", str(tmp_path / "refused"))
    assert refused.returncode == 2 and not (tmp_path / "refused").exists()
    assert "target sandbox is halted by alice since" in refused.stderr and "drillbook halt --lift" in refused.stderr
    plan = tmp_path / "one.yaml"
    plan.write_text(yaml.safe_dump({"name": "one", "target": "sandbox", "runbooks": [{"runbook": "cold-start"}]}))
    day = done(sandbox.state_dir, "gameday", str(plan), "--results", str(tmp_path / "refused"))
    assert day.returncode == 2 and "is halted by alice" in day.stderr
    assert not [p for p in (tmp_path / "refused").glob("*") if p.is_dir()]  # no summary bundle: refused at once
    lifted = done(sandbox.state_dir, "halt", "--lift")
    assert lifted.returncode == 0 and "halt lifted on sandbox (halted by alice: drill window closed)" in lifted.stdout
    again = done(sandbox.state_dir, "run", "cold-start", "-p", "trials=1", "--results", str(tmp_path / "again"))
    assert again.returncode == 0, again.stderr
    with sandbox.control() as control:
        kinds = [event["kind"] for event in control.events()]
    assert kinds.count("halted") == 1 and kinds.count("halt_lifted") == 1 and "fault_undone_by_halt" in kinds


def test_a_halt_stops_a_game_day_at_once_and_its_summary_says_who(sandbox, tmp_path):
    plan = tmp_path / "two.yaml"
    plan.write_text(yaml.safe_dump({"name": "two", "target": "sandbox", "runbooks": [
        {"runbook": "cold-start", "parameters": {"trials": 3}}, {"runbook": "restore-drill"}]}))
    results = tmp_path / "results"
    gameday = cli(sandbox.state_dir, "gameday", str(plan), "--results", str(results))
    try:
        wait_for(lambda: any(lease["what"] for lease in leases(sandbox)), timeout=120)
        assert done(sandbox.state_dir, "halt", "--reason", "stop everything").returncode == 0
        out, err = gameday.communicate(timeout=60)
    finally:
        if gameday.poll() is None:
            gameday.kill()
    assert gameday.returncode == 143, err
    assert summary(results)["verdict"] == "ABORTED"
    (day,) = [json.loads(p.read_text()) for p in results.glob("*_gameday-two_*/summary.json")]
    assert day["verdict"] == "ABORTED" and "stop everything" in day["reason"] and "not run: restore-drill" in day["reason"]
    assert not list(results.glob("*_restore-drill_*"))
