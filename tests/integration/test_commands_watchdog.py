"""A fault outlives nothing on a commands target either: each scale a run makes through the
team's own commands is leased to a watchdog started beside the run (drillbook.watchdog), which
undoes it through the same commands once the runner stops renewing it (killed, its run folder and
ledger deleted), without `drillbook rollback`; a run that ends well leaves it nothing to do, and
the watchdog exits by itself. tinyagent (tests/workloads) is the workload: not drillbook's own."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from drillbook import jsonl
from drillbook.watchdog import IDLE_EXIT_S, LEASES, UNDONE, running
from tests.helpers import wait_for
from tests.integration.test_own_workload import tinyagent  # noqa: F401 - the fixture

pytestmark = pytest.mark.integration

LEASE_S = 3.0


def chaos_run(profile: Path, out: Path, idle_s: float, output: Any = subprocess.PIPE) -> subprocess.Popen:
    """`drillbook chaos run cold-start` on the profile, in a session of its own, with short leases."""
    return subprocess.Popen([sys.executable, "-m", "drillbook", "chaos", "run", "cold-start", "--target", str(profile),
                             "--var", f"idle_s={idle_s}", "--out", str(out)],
                            env={**os.environ, "DRILLBOOK_FAULT_LEASE_S": str(LEASE_S)},
                            stdout=output, stderr=output, text=True, start_new_session=True)


def test_a_lost_runners_scaled_pool_is_scaled_back_by_the_watchdog_beside_it(tinyagent, tmp_path):  # noqa: F811
    agent = tinyagent()
    folder = tmp_path / "watchdogs" / "tinyagent"
    out = tmp_path / "run"
    log = (tmp_path / "runner.log").open("w")  # what the runner said, for a failure's message
    runner = chaos_run(agent.profile, out, idle_s=120, output=log)
    try:
        wait_for(lambda: agent.status()["desired"] == 0 and list((folder / LEASES).glob("*.json")), timeout=60)
        wait_for(lambda: running(folder), timeout=30)  # started beside the run
        # While the runner lives, its heartbeat keeps the lease: three lease lengths on, nothing is undone.
        time.sleep(3 * LEASE_S)
        assert agent.status()["desired"] == 0 and not (folder / UNDONE).exists(), \
            (tmp_path / "runner.log").read_text()
    finally:
        os.killpg(runner.pid, signal.SIGKILL)  # the runner and all it started
        runner.wait(30)
        log.close()
    killed_at = time.time()
    (tmp_path / "ledgers" / "tinyagent.jsonl").unlink()  # what its machine held: the ledger and the run
    shutil.rmtree(out)
    wait_for(lambda: agent.status() == {"desired": 2, "ready": 2, "replicas": 2}, timeout=LEASE_S + 10)
    back_at = time.time()
    wait_for(lambda: any(u["restored"] for u in jsonl.read(folder / UNDONE)), timeout=60)
    undos = jsonl.read(folder / UNDONE)  # a try the workload did not answer is recorded, then tried again
    undo = undos[-1]
    assert undo["kind"] == "fault_undone_by_watchdog" and undo["undone"] == "scaled agent back to 2", undos
    assert [u["restored"] for u in undos] == [False] * (len(undos) - 1) + [True]
    # The undo began after the lease ran out, which was after the runner's last heartbeat, and
    # before the pool was seen back.
    assert killed_at - LEASE_S <= undos[0]["lease_expired_at"] <= undos[0]["began_at"] <= back_at
    print(f"lease {LEASE_S:g} s: kill to the undo's start {undos[0]['began_at'] - killed_at:.2f} s, "
          f"to the pool seen back {back_at - killed_at:.2f} s")
    wait_for(lambda: not running(folder), timeout=IDLE_EXIT_S + 10)  # nothing held: it exits by itself
    assert not list((folder / LEASES).glob("*.json"))


def test_a_run_that_ends_well_leaves_the_watchdog_nothing_and_it_exits(tinyagent, tmp_path):  # noqa: F811
    agent = tinyagent()
    folder = tmp_path / "watchdogs" / "tinyagent"
    runner = chaos_run(agent.profile, tmp_path / "run", idle_s=3 * LEASE_S)  # held three lease lengths
    out, err = runner.communicate(timeout=240)
    assert runner.returncode == 0, out + err
    assert agent.status() == {"desired": 2, "ready": 2, "replicas": 2}
    assert not (folder / UNDONE).exists()  # the run undid its fault and released the lease
    assert (folder / "watchdog.log").exists()  # a watchdog was there all along ...
    wait_for(lambda: not running(folder), timeout=IDLE_EXIT_S + 10)  # ... and went once it held nothing
    assert not list((folder / LEASES).glob("*.json"))


def test_a_halt_on_a_commands_target_undoes_its_faults_stops_the_run_and_refuses_until_lifted(
        tinyagent, tmp_path):  # noqa: F811
    agent = tinyagent()
    folder = tmp_path / "watchdogs" / "tinyagent"
    results = tmp_path / "results"

    def drillbook(*args: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "drillbook", *args], text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env={**os.environ, "COLUMNS": "250"})

    run = drillbook("run", "cold-start", "--target", str(agent.profile), "-p", "trials=1", "-p", "idle_s=90",
                    "--results", str(results))
    try:
        wait_for(lambda: agent.status()["desired"] == 0 and list((folder / LEASES).glob("*.json")), timeout=90)
        halted = drillbook("halt", "--target", str(agent.profile), "--operator", "alice", "--reason", "window closed")
        out, err = halted.communicate(timeout=120)
        assert halted.returncode == 0, out + err
        assert "halted tinyagent by alice: window closed; 1 leased fault(s) undone" in out, out
        assert agent.status()["desired"] == 2  # undone before the halt answered
        run_out, run_err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 143, run_out + run_err
    (summary,) = [p for p in results.glob("*_cold-start_*/summary.json")]
    assert '"verdict": "ABORTED"' in summary.read_text() and "halted by alice: window closed" in summary.read_text()
    refused = drillbook("run", "cold-start", "--target", str(agent.profile), "--results", str(tmp_path / "refused"))
    out, err = refused.communicate(timeout=120)
    assert refused.returncode == 2 and "target tinyagent is halted by alice since" in err, err
    assert not (tmp_path / "refused").exists()
    lifted = drillbook("halt", "--target", str(agent.profile), "--lift")
    out, _ = lifted.communicate(timeout=60)
    assert lifted.returncode == 0 and "halt lifted on tinyagent (halted by alice: window closed)" in out
    # Undone on the halt (by the watchdog, or by the run's own rollback if it saw the halt first),
    # never because a lease ran out.
    assert {u["kind"] for u in jsonl.read(folder / UNDONE)} <= {"fault_undone_by_halt"}
