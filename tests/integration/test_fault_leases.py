"""A fault outlives nothing on the sandbox: its supervisor holds a lease on each scale and store
destruction a run makes, the run renews the leases while it lives, and when the runner is killed
and its machine is gone (its fault ledger and run folder deleted), the supervisor undoes the
faults itself once the leases run out — without `drillbook rollback`."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers import wait_for

pytestmark = pytest.mark.integration

LEASE_S = 3.0


def desired(handle) -> dict[str, int]:
    with handle.control() as control:
        return {name: s["desired"] for name, s in control.status()["services"].items()}


def watchdog_undos(handle) -> list[dict]:
    with handle.control() as control:
        return [e for e in control.events() if e["kind"] == "fault_undone_by_watchdog"]


def store_healthy(handle) -> bool:
    with handle.control() as control:
        return bool(control.store()["healthy"])


def all_ready(handle) -> bool:
    with handle.control() as control:
        return all(s["ready"] == s["desired"] for s in control.status()["services"].values())


def leases(handle) -> list[dict]:
    with handle.control() as control:
        return control.leases()


def start_runner(handle, out: Path, *args: str) -> subprocess.Popen:
    """`drillbook chaos run ...` in a session of its own, with short leases."""
    env = {**os.environ, "DRILLBOOK_STATE_DIR": str(handle.state_dir), "DRILLBOOK_FAULT_LEASE_S": str(LEASE_S)}
    return subprocess.Popen([sys.executable, "-m", "drillbook", "chaos", "run", *args, "--out", str(out)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def lose_the_runner(runner: subprocess.Popen, handle, out: Path) -> float:
    """SIGKILL the runner and everything it started, and delete what its machine held: the fault
    ledger and the run's folder. Returns when it was killed."""
    os.killpg(runner.pid, signal.SIGKILL)
    runner.wait(30)
    killed_at = time.time()
    (handle.state_dir / "faults.jsonl").unlink()
    shutil.rmtree(out)
    return killed_at


def test_a_lost_runners_scaled_tiers_are_scaled_back_by_the_supervisor_once_its_leases_run_out(
        sandbox_factory, tmp_path):
    handle = sandbox_factory(tokens_per_second=0)
    before = desired(handle)
    out = tmp_path / "run"
    runner = start_runner(handle, out, "cold-start", "--var", "idle_s=120")
    wait_for(lambda: desired(handle)["agent"] == 0 and desired(handle)["model"] == 0, timeout=60)
    held = leases(handle)
    assert sorted(lease["undo"]["service"] for lease in held) == ["agent", "model"], held
    # While the runner lives, its heartbeat keeps the leases: three lease lengths on, nothing is undone.
    time.sleep(3 * LEASE_S)
    assert desired(handle)["agent"] == 0 and watchdog_undos(handle) == []
    killed_at = lose_the_runner(runner, handle, out)
    assert desired(handle)["agent"] == 0  # nothing undone at the kill itself: the lease still runs

    wait_for(lambda: desired(handle) == before, timeout=LEASE_S + 10)
    undone = watchdog_undos(handle)
    assert sorted(e["undone"] for e in undone) == [f"scaled agent back to {before['agent']}",
                                                   f"scaled model back to {before['model']}"], undone
    assert {e["run"] for e in undone} == {lease["run"] for lease in held}
    for event in undone:  # undone after the lease ran out, and the lease ran out after the kill
        assert event["t"] >= event["lease_expired_at"] > killed_at - LEASE_S
    assert leases(handle) == []
    wait_for(lambda: all_ready(handle), timeout=60)


def test_a_lost_runners_destroyed_store_is_restored_by_the_supervisor(sandbox_factory, tmp_path):
    handle = sandbox_factory(tokens_per_second=0)
    experiment = tmp_path / "disaster.yaml"
    experiment.write_text(yaml.safe_dump({
        "version": "1.0.0", "title": "the state store destroyed, and the runner lost before the restore",
        "description": "a backup, then the disaster, then a long wait", "tags": ["drillbook"],
        "controls": [{"name": "drillbook", "provider": {"type": "python", "module": "drillbook.chaos.control"}}],
        "method": [
            {"type": "action", "name": "back-up", "provider": {
                "type": "python", "module": "drillbook.chaos.actions", "func": "backup_store"}},
            {"type": "action", "name": "destroy", "pauses": {"after": 120}, "provider": {
                "type": "python", "module": "drillbook.chaos.actions", "func": "destroy_store"}}]}))
    assert store_healthy(handle)
    out = tmp_path / "run"
    runner = start_runner(handle, out, str(experiment))
    wait_for(lambda: not store_healthy(handle), timeout=60)
    (held,) = leases(handle)
    assert held["undo"] == {"op": "restore_store"}
    lose_the_runner(runner, handle, out)

    wait_for(lambda: store_healthy(handle), timeout=LEASE_S + 10)
    (undone,) = watchdog_undos(handle)
    assert undone["run"] == held["run"] and undone["undone"].startswith("restored the store from backup ")
    assert leases(handle) == []


def test_a_run_that_undoes_its_faults_releases_their_leases(sandbox_factory, tmp_path):
    # The negative control: a run that outlives its leases many times over and ends normally
    # leaves the watchdog nothing to do.
    handle = sandbox_factory(tokens_per_second=0)
    before = desired(handle)
    runner = start_runner(handle, tmp_path / "run", "cold-start", "--var", f"idle_s={3 * LEASE_S}")
    assert runner.wait(180) in (0, 1)  # judged, whatever the verdict: the faults were undone by the run
    time.sleep(2 * LEASE_S)
    assert desired(handle) == before and watchdog_undos(handle) == [] and leases(handle) == []
    with handle.control() as control:
        kinds = [e["kind"] for e in control.events()]
    assert kinds.count("fault_leased") == kinds.count("fault_lease_released") == 2, kinds


def test_a_killed_runbook_run_is_sealed_by_rollback_naming_what_the_watchdog_undid(sandbox_factory, tmp_path):
    # The runner's machine lives on (its ledger and scratch are kept): the faults are undone by the
    # supervisor once their leases run out, and `drillbook rollback` later seals the run ERROR
    # saying so, with nothing left for it to undo.
    from drillbook.evidence import verify_path

    handle = sandbox_factory(tokens_per_second=0)
    before = desired(handle)
    results = tmp_path / "results"
    env = {**os.environ, "DRILLBOOK_STATE_DIR": str(handle.state_dir), "DRILLBOOK_FAULT_LEASE_S": str(LEASE_S),
           "COLUMNS": "200"}
    runner = subprocess.Popen([sys.executable, "-m", "drillbook", "run", "cold-start", "-p", "idle_s=120", "-p",
                               "trials=1", "--results", str(results)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    wait_for(lambda: desired(handle)["agent"] == 0 and len(leases(handle)) == 2, timeout=120)
    os.killpg(runner.pid, signal.SIGKILL)
    runner.wait(30)
    wait_for(lambda: desired(handle) == before, timeout=LEASE_S + 10)

    done = subprocess.run([sys.executable, "-m", "drillbook", "rollback"], env=env, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    (bundle,) = [p for p in results.iterdir() if p.is_dir()]
    assert verify_path(bundle).ok
    summary = yaml.safe_load((bundle / "summary.json").read_text())
    assert summary["verdict"] == "ERROR" and summary["reason"].startswith("runner killed: "), summary["reason"]
    assert "the platform's watchdog undid its faults when their leases ran out: " in summary["reason"]
    assert f"scaled agent back to {before['agent']} at " in summary["reason"], summary["reason"]
    assert desired(handle) == before and leases(handle) == []
