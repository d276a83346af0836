"""Runs that end badly: real signals to a real `drillbook run` and `drillbook gameday`.

Each case asserts what an auditor and the on-call engineer need afterwards: the target's replica
counts are back, no process of the run is left (Locust and the kernel included), the bundle is
sealed with the journal and load files collected so far, and the verdict and exit code say what
happened.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import nbformat
import pytest
import yaml

from drillbook.evidence import verify_path
from drillbook.parameters import runbook_path
from drillbook.processes import start_ticks
from tests.helpers import wait_for

pytestmark = pytest.mark.integration

HA = ["run", "ha-replica-loss", "-p", "duration_s=10", "-p", "kill_after_s=2", "-p", "max_recovery_s=6", "-p", "users=4"]


def replicas(handle) -> dict[str, int]:
    with handle.control() as control:
        return {name: s["desired"] for name, s in control.status()["services"].items()}


def settled(handle, expected: dict[str, int]) -> bool:
    with handle.control() as control:
        services = control.status()["services"]
    return all(services[name]["desired"] == count and services[name]["ready"] == count
               for name, count in expected.items())


def descendants(root: int) -> dict[int, int | None]:
    """Every process below root right now, with its start time (so a reused pid is not mistaken)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, queue = {}, [root]
    while queue:
        for child in children.get(queue.pop(), []):
            found[child] = start_ticks(child)
            queue.append(child)
    return found


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


class Runner:
    """`drillbook` as a subprocess, with every process it started written down as it runs."""

    def __init__(self, args: list[str], state: Path, results: Path | None) -> None:
        """results: the --results folder, for the commands that take one (None: the command takes none)."""
        env = {**os.environ, "DRILLBOOK_STATE_DIR": str(state), "COLUMNS": "200"}
        self.results = results
        extra = ["--results", str(results)] if results is not None else []
        self.process = subprocess.Popen([sys.executable, "-m", "drillbook", *args, *extra],
                                        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.seen: dict[int, int | None] = {}

    def watch(self) -> dict[int, int | None]:
        self.seen.update(descendants(self.process.pid))
        return self.seen

    def wait_for_child(self, word: str, timeout: float = 90) -> None:
        wait_for(lambda: any(word in command_line(pid) for pid in self.watch()), timeout=timeout, interval=0.1)

    def finish(self, timeout: float = 120) -> tuple[int, str, str]:
        out, err = self.process.communicate(timeout=timeout)
        return self.process.returncode, out, err

    def left_over(self) -> list[str]:
        """Processes of the run still alive (the same processes, not reused pids)."""
        return [f"{pid} {command_line(pid)}" for pid, ticks in self.seen.items()
                if ticks is not None and start_ticks(pid) == ticks]


def ledger_entries(state: Path, kind: str) -> list[dict]:
    """What drillbook wrote down in the state dir's process ledger about children of this kind."""
    path = state / "processes.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [r["started"] for r in records if "started" in r and r["started"]["kind"] == kind]


def requests_flowing(state: Path) -> bool:
    """The run's Locust has logged requests (its output folder is in the process ledger)."""
    for entry in ledger_entries(state, "locust"):
        if any(p.stat().st_size > 0 for p in Path(entry["detail"]).glob("requests-*.csv")):
            return True
    return False


def fault_injected(handle) -> bool:
    events = handle.state_dir / "events.jsonl"
    return events.exists() and '"replica_killed"' in events.read_text()


def only_bundle(results: Path, runbook: str) -> Path:
    found = [p for p in results.iterdir() if p.is_dir() and f"_{runbook}_" in p.name]
    assert len(found) == 1, found
    return found[0]


def sealed(bundle: Path) -> tuple[dict, dict]:
    manifest = json.loads((bundle / "manifest.json").read_text())
    summary = json.loads((bundle / "summary.json").read_text())
    report = verify_path(bundle)
    assert report.ok, report.findings
    return manifest, summary


@pytest.mark.parametrize("moment", ["kernel-starting", "load-running", "fault-injected"])
def test_sigint_stops_the_run_rolls_back_and_seals_what_it_had(sandbox, tmp_path, moment):
    before = replicas(sandbox)
    results = tmp_path / "results"
    runner = Runner(HA, sandbox.state_dir, results)
    if moment == "kernel-starting":
        runner.wait_for_child("ipykernel_launcher")
    elif moment == "load-running":
        runner.wait_for_child("locust")
        wait_for(lambda: runner.watch() is not None and requests_flowing(sandbox.state_dir), timeout=60)
        assert not fault_injected(sandbox)  # the kill comes 2 s after requests flow
    else:
        runner.wait_for_child("locust")
        wait_for(lambda: runner.watch() is not None and fault_injected(sandbox), timeout=60, interval=0.05)
    runner.watch()
    runner.process.send_signal(signal.SIGINT)
    code, out, err = runner.finish()
    assert code == 130, err
    bundle = only_bundle(results, "ha-replica-loss")
    assert err.strip().splitlines()[-1] == (f"drillbook: interrupted by SIGINT; faults rolled back; "
                                            f"evidence sealed as {bundle}")
    manifest, summary = sealed(bundle)
    assert manifest["status"] == "interrupted" and summary["verdict"] == "INTERRUPTED"
    assert summary["control"] == "ha" and summary["reason"].startswith("interrupted by SIGINT at ")
    wait_for(lambda: settled(sandbox, before), timeout=30)
    assert runner.left_over() == []
    files = set(manifest["files"])
    assert {"runbook.ipynb", "summary.json", "timeline.jsonl"} <= files
    if moment != "kernel-starting":
        assert any(f.startswith("load/requests-") for f in files), files
        assert any(f.startswith("load/receipts-") for f in files), files
    if moment == "fault-injected":
        assert "chaos/01-ha-replica-loss/journal.json" in files
        journal = json.loads((bundle / "chaos/01-ha-replica-loss/journal.json").read_text())
        assert journal["status"] == "interrupted" and journal["rollbacks"]


def test_sigterm_during_the_fault_rolls_back_and_exits_143(sandbox, tmp_path):
    before = replicas(sandbox)
    results = tmp_path / "results"
    runner = Runner(HA, sandbox.state_dir, results)
    runner.wait_for_child("locust")
    wait_for(lambda: runner.watch() is not None and fault_injected(sandbox), timeout=60, interval=0.05)
    runner.process.send_signal(signal.SIGTERM)
    code, _, err = runner.finish()
    assert code == 143, err
    bundle = only_bundle(results, "ha-replica-loss")
    assert f"interrupted by SIGTERM; faults rolled back; evidence sealed as {bundle}" in err
    manifest, summary = sealed(bundle)
    assert summary["verdict"] == "INTERRUPTED" and "SIGTERM" in summary["reason"]
    wait_for(lambda: settled(sandbox, before), timeout=30)
    assert runner.left_over() == []
    assert "chaos/01-ha-replica-loss/journal.json" in manifest["files"]


def test_after_sigkill_nothing_keeps_running_and_rollback_seals_the_evidence(sandbox, tmp_path):
    before = replicas(sandbox)
    results = tmp_path / "results"
    runner = Runner(HA, sandbox.state_dir, results)
    runner.wait_for_child("locust")
    wait_for(lambda: runner.watch() is not None and fault_injected(sandbox), timeout=60, interval=0.05)
    runner.watch()
    runner.process.send_signal(signal.SIGKILL)
    runner.finish()
    # the kernel sees its parent gone, and Locust dies with the kernel: no load outlives drillbook
    wait_for(lambda: runner.left_over() == [], timeout=15)
    bundle = only_bundle(results, "ha-replica-loss")
    assert (bundle / ".unsealed").exists() and not (bundle / "manifest.json").exists()
    env = {**os.environ, "DRILLBOOK_STATE_DIR": str(sandbox.state_dir)}
    rollback = subprocess.run([sys.executable, "-m", "drillbook", "rollback"], env=env, capture_output=True,
                              text=True, timeout=120)
    assert rollback.returncode == 0, rollback.stderr
    assert f"{bundle.name}: ERROR, runner killed" in rollback.stdout
    manifest, summary = sealed(bundle)
    assert manifest["status"] == "killed" and summary["verdict"] == "ERROR"
    assert summary["reason"].startswith("runner killed") and summary["control"] == "ha"
    assert any(f.startswith("load/requests-") for f in manifest["files"])
    assert "runbook.ipynb" in manifest["files"]
    wait_for(lambda: settled(sandbox, before), timeout=30)
    scratch = [Path(json.loads(e["detail"])["scratch"]) for e in ledger_entries(sandbox.state_dir, "run")]
    assert scratch and not any(p.exists() for p in scratch)  # the dead run's scratch folder is gone
    again = subprocess.run([sys.executable, "-m", "drillbook", "rollback"], env=env, capture_output=True, text=True,
                           timeout=120)
    assert again.returncode == 0 and "nothing to roll back" in again.stdout
    verify = subprocess.run([sys.executable, "-m", "drillbook", "verify", str(results)], env=env,
                            capture_output=True, text=True, timeout=60)
    assert verify.returncode == 1 and "1 killed" in verify.stdout
    allowed = subprocess.run([sys.executable, "-m", "drillbook", "verify", str(results), "--allow-incomplete"],
                             env=env, capture_output=True, text=True, timeout=60)
    assert allowed.returncode == 0, allowed.stdout


def test_a_failing_cell_mid_load_stops_the_load_and_names_the_cell(sandbox, tmp_path):
    before = replicas(sandbox)
    notebook = nbformat.read(str(runbook_path("ha-replica-loss")), as_version=4)
    breaking = nbformat.v4.new_code_cell(
        "from drillbook import runbook\n"
        "run = runbook.Run.begin('ha-replica-loss', 'ha', target, {}, drillbook_work_dir, drillbook_state_dir)\n"
        "load = run.start_load('agent-sessions', users=2, duration_s=120)\n"
        "load.wait_until_flowing()\n"
        "raise RuntimeError('the runbook broke mid-load')")
    notebook.cells = [notebook.cells[0], notebook.cells[1], breaking]
    for index, cell in enumerate(notebook.cells):
        cell["id"] = f"c{index}"
    path = tmp_path / "ha-replica-loss.ipynb"
    nbformat.write(notebook, str(path))
    results = tmp_path / "results"
    runner = Runner(["run", str(path)], sandbox.state_dir, results)
    runner.wait_for_child("locust")
    while runner.process.poll() is None:
        runner.watch()
        time.sleep(0.1)
    code, _, err = runner.finish()
    assert code == 1, err
    assert runner.left_over() == []  # Locust would have gone on for two minutes
    bundle = only_bundle(results, "ha-replica-loss")
    manifest, summary = sealed(bundle)
    assert summary["verdict"] == "ERROR" and summary["control"] == "ha"
    assert "cell 4 failed: RuntimeError: the runbook broke mid-load" in summary["reason"]
    assert any(f.startswith("load/requests-") for f in manifest["files"])
    assert replicas(sandbox) == before


def test_an_interrupted_game_day_stops_its_sandbox_and_seals_a_summary(tmp_path):
    from drillbook.sandbox import launcher

    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"name": "short", "target": "sandbox", "runbooks": [
        {"runbook": "cold-start", "parameters": {"trials": 1}},
        {"runbook": "ha-replica-loss", "parameters": {"duration_s": 10, "kill_after_s": 2, "max_recovery_s": 6, "users": 4}},
        {"runbook": "restore-drill"}]}))
    state, results = tmp_path / "state", tmp_path / "results"
    junit = tmp_path / "gameday.xml"
    runner = Runner(["gameday", str(plan), "--junit", str(junit)], state, results)
    wait_for(lambda: runner.watch() is not None and any(results.glob("*_ha-replica-loss_*")), timeout=120,
             interval=0.1)
    runner.wait_for_child("locust")
    runner.process.send_signal(signal.SIGINT)
    code, _, err = runner.finish()
    assert code == 130, err
    summary_bundle = only_bundle(results, "gameday-short")
    last = err.strip().splitlines()[-1]
    assert last.startswith("drillbook: interrupted by SIGINT; faults rolled back; evidence sealed as ")
    assert f"game-day summary sealed as {summary_bundle}; sandbox stopped" in last
    manifest, summary = sealed(summary_bundle)
    assert manifest["status"] == "interrupted" and summary["verdict"] == "INTERRUPTED"
    assert [r["verdict"] for r in summary["metrics"]["runs"]] == ["PASS", "INTERRUPTED"]
    assert summary["metrics"]["not_run"] == ["restore-drill"] and "not run: restore-drill" in summary["reason"]
    ha_manifest, ha_summary = sealed(only_bundle(results, "ha-replica-loss"))
    assert ha_summary["verdict"] == "INTERRUPTED"
    assert launcher.find(state) is None
    assert runner.left_over() == []  # the sandbox it started is gone with it
    assert f"JUnit XML written to {junit}" in last  # CI still gets the verdicts, the interruption an error
    suites = {suite.get("name"): suite for suite in ElementTree.parse(junit).getroot().iter("testsuite")}
    assert set(suites) == {"cold-start/cold-start", "ha/ha-replica-loss", "restore/restore-drill"}
    assert suites["cold-start/cold-start"].get("errors") == "0"
    ha_error = next(c for c in suites["ha/ha-replica-loss"].iter("testcase") if c.get("name") == "run completed")
    assert ha_error.find("error").get("message").startswith("INTERRUPTED")
    assert "not run" in suites["restore/restore-drill"].find("testcase/error").get("message")


@pytest.mark.parametrize(("args", "message"), [
    (["run", "ha-replica-loss", "-p", "kill_count=5"], "kill_count 5 is more than the 2 agent replicas"),
    (["run", "ha-replica-loss", "-p", "kill_count=0"], "invalid kill_count"),
    (["run", "cold-start", "-p", "trials=0"], "invalid trials"),
    (["run", "noisy-neighbour", "-p", "victim_tenant=nobody"], "victim_tenant 'nobody' is not a tenant"),
    (["run", "shed-noisy-tenant", "-p", "tenant=nobody"], "tenant 'nobody' is not a tenant of the target"),
    (["run", "shed-noisy-tenant"], "shed-noisy-tenant needs -p tenant=...: required: the tenant to shed"),
    (["load", "agent-sessions", "--duration", "5s", "--set", "think-time=-1"], "invalid --set think-time=-1"),
    (["run", "r" * 300], "is not a name or a path: a part of it is 300 bytes long (at most 255)"),
    (["run", "ha-replica-loss", "--target", "t" * 300], "is not a name or a path: a part of it is 300 bytes long"),
    (["run", "restore-agent-state", "-p", "backup=--delete-everything"],
     "invalid backup: '--delete-everything' is not a backup's name: it must not begin with '-'"),
    (["run", "ha-replica-loss", "--results", "/proc/drillbook-nowhere"],
     "results folder /proc/drillbook-nowhere cannot be made"),
    (["load", "agent-sessions", "--duration", "5s", "--out", "/proc/drillbook-nowhere"],
     "--out /proc/drillbook-nowhere cannot be made"),
])
def test_parameters_that_cannot_work_are_refused_before_anything_is_touched(sandbox, tmp_path, args, message):
    before = replicas(sandbox)
    results = tmp_path / "results"
    extra = [] if {"--out", "--results"} & set(args) else \
        ["--out", str(tmp_path / "load")] if args[0] == "load" else ["--results", str(results)]
    env = {**os.environ, "DRILLBOOK_STATE_DIR": str(sandbox.state_dir)}
    result = subprocess.run([sys.executable, "-m", "drillbook", *args, *extra], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert not results.exists() and not (tmp_path / "load").exists()
    assert replicas(sandbox) == before and not ledger_entries(sandbox.state_dir, "locust")


def test_a_run_whose_platform_dies_under_it_is_sealed_error_naming_it(sandbox_factory, tmp_path):
    from drillbook.chaos.ledger import FaultLedger

    handle = sandbox_factory(tokens_per_second=0)
    results = tmp_path / "results"
    runner = Runner(["run", "ha-replica-loss", "-p", "duration_s=20", "-p", "kill_after_s=3", "-p", "users=2"],
                    handle.state_dir, results)
    wait_for(lambda: fault_injected(handle), timeout=120, interval=0.05)
    os.kill(handle.pid, signal.SIGKILL)  # the platform dies while its replica is down and the fault is open
    if handle.process is not None:
        handle.process.wait(30)  # reaped here: this test started it
    code, out, err = runner.finish(timeout=180)
    assert code == 1, out + err
    manifest, summary = sealed(only_bundle(results, "ha-replica-loss"))
    assert summary["verdict"] == "ERROR", summary
    assert summary["reason"].startswith("the platform stopped under the run: sandbox is no longer running, and "
                                        "the faults open on it were closed"), summary
    assert FaultLedger(handle.state_dir / "faults.jsonl").open_faults() == []
    assert not [e for e in ledger_entries(handle.state_dir, "run")
                if Path(json.loads(e["detail"])["scratch"]).exists()]  # its scratch folder is gone
    env = {**os.environ, "DRILLBOOK_STATE_DIR": str(handle.state_dir), "COLUMNS": "200"}
    after = subprocess.run([sys.executable, "-m", "drillbook", "rollback"], env=env, capture_output=True, text=True,
                           timeout=120)
    assert after.returncode == 0 and "nothing to roll back" in after.stdout, after.stdout + after.stderr


def test_a_game_day_killed_outright_leaves_its_sandbox_and_summary_to_rollback(tmp_path):
    from drillbook.sandbox import launcher

    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"name": "killed", "target": "sandbox", "runbooks": [
        {"runbook": "ha-replica-loss", "parameters": {"duration_s": 40, "kill_after_s": 25, "users": 2}},
        {"runbook": "cold-start", "parameters": {"trials": 1}}]}))
    state, results = tmp_path / "state", tmp_path / "results"
    runner = Runner(["gameday", str(plan)], state, results)
    wait_for(lambda: runner.watch() is not None and any(results.glob("*_ha-replica-loss_*")), timeout=120,
             interval=0.1)
    runner.wait_for_child("locust")
    runner.watch()
    runner.process.send_signal(signal.SIGKILL)  # no handler runs: nothing it started is stopped by it
    runner.finish()
    assert launcher.find(state) is not None and ledger_entries(state, "sandbox")
    env = {**os.environ, "DRILLBOOK_STATE_DIR": str(state), "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-m", "drillbook", "rollback"], env=env, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "stopped: sandbox pid" in done.stdout and "sealed: " in done.stdout, done.stdout
    assert "game day killed" in done.stdout and "2 bundles sealed" in done.stdout, done.stdout
    assert launcher.find(state) is None
    # The game day's own summary is sealed too: ERROR, why, and the runbooks that did not end.
    (summary_bundle,) = [p for p in results.iterdir() if "_gameday-killed_" in p.name]
    summary = json.loads((summary_bundle / "summary.json").read_text())
    assert summary["verdict"] == "ERROR" and summary["control"] == "gameday", summary
    assert "game day killed" in summary["reason"] and "did not end: ha-replica-loss, cold-start" in summary["reason"]
    verified = subprocess.run([sys.executable, "-m", "drillbook", "verify", "--allow-incomplete", str(results)],
                              env=env, capture_output=True, text=True, timeout=120)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    wait_for(lambda: runner.left_over() == [], timeout=30)  # supervisor, services, Locust, kernel: all gone
    again = subprocess.run([sys.executable, "-m", "drillbook", "rollback"], env=env, capture_output=True, text=True,
                           timeout=60)
    assert again.returncode == 0 and "nothing to roll back" in again.stdout, again.stderr  # safe to repeat
