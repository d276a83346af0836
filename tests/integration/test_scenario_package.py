"""A scenario that is not part of drillbook: a package (tests/plugins/drillbook_replica_restart)
installed as a distribution would be, found through the entry-point group drillbook.scenarios,
listed and run by `drillbook run` with its own notebook and experiment, and shown to fail when
the platform restarts too slowly.

Everything runs in `drillbook` processes with the package on their Python path: the registry of
this test process stays drillbook's own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import install_distribution

pytestmark = pytest.mark.integration
PACKAGE = Path(__file__).resolve().parents[1] / "plugins" / "drillbook_replica_restart"


def install_scenario_package(folder: Path) -> Path:
    return install_distribution(folder, "drillbook-replica-restart", [PACKAGE],
                                {"drillbook.scenarios": {"replica-restart": "drillbook_replica_restart"}})


def drillbook(*args: str, state: Path, path: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DRILLBOOK_STATE_DIR": str(state), "COLUMNS": "200",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(path), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "drillbook", *args], env=env, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL, cwd=cwd)


def summary(results: Path) -> dict:
    (bundle,) = [p for p in results.iterdir() if p.is_dir() and "replica-restart" in p.name]
    return json.loads((bundle / "summary.json").read_text())


def test_a_scenario_package_is_found_run_and_fails_when_the_platform_restarts_too_slowly(sandbox_factory, tmp_path):
    path = install_scenario_package(tmp_path / "site")
    healthy = sandbox_factory(tokens_per_second=0)
    listed = drillbook("run", state=healthy.state_dir, path=path, cwd=tmp_path)
    assert listed.returncode == 0 and "replica-restart" in listed.stdout, listed.stdout + listed.stderr
    assert listed.stderr == ""

    passed = drillbook("run", "replica-restart", "--results", str(tmp_path / "healthy"), state=healthy.state_dir,
                       path=path, cwd=tmp_path)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    found = summary(tmp_path / "healthy")
    assert found["verdict"] == "PASS" and found["control"] == "replica-restart", found
    with healthy.control() as control:  # the platform itself saw one agent replica die
        killed = [e for e in control.events() if e["kind"] == "replica_killed"]
    assert [e["service"] for e in killed] == ["agent"], killed

    # A platform that brings a killed replica back only after 9 s misses a 3 s budget: FAIL, measured.
    slow = sandbox_factory(tokens_per_second=0, defects=["slow-restart"])
    failed = drillbook("run", "replica-restart", "-p", "max_ready_s=3", "--results", str(tmp_path / "slow"),
                       state=slow.state_dir, path=path, cwd=tmp_path)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    found = summary(tmp_path / "slow")
    assert found["verdict"] == "FAIL", found
    assert [c["name"] for c in found["checks"] if not c["passed"]] == ["every agent replica ready again within max_ready_s"]

    bad = drillbook("run", "replica-restart", "-p", "max_ready_s=-1", state=healthy.state_dir, path=path, cwd=tmp_path)
    assert bad.returncode == 2 and "max_ready_s" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr

    # A package whose module is not there is named once and left out; the others still run.
    install_distribution(path, "drillbook-broken-scenario", [], {"drillbook.scenarios": {"broken": "no_such_scenarios"}})
    broken = drillbook("run", state=healthy.state_dir, path=path, cwd=tmp_path)
    assert broken.returncode == 0 and "replica-restart" in broken.stdout
    assert broken.stderr.strip() == ("drillbook: scenario package broken (no_such_scenarios) does not load, left out: "
                                     "ModuleNotFoundError: No module named 'no_such_scenarios'")


def test_a_scenario_package_with_a_fault_of_its_own_runs_and_its_undo_puts_the_target_back(sandbox_factory, tmp_path):
    """one-replica-left brings its fault (faults.py: action, undo and Kubernetes rights in one
    module): drillbook runs it, records it with the package's undo, and the rollback undoes it."""
    from drillbook.chaos.ledger import FaultLedger

    path = install_scenario_package(tmp_path / "site")
    handle = sandbox_factory(tokens_per_second=0)
    with handle.control() as control:
        before = control.status()["services"]["agent"]["desired"]
    done = drillbook("run", "one-replica-left", "--results", str(tmp_path / "results"), state=handle.state_dir,
                     path=path, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    (bundle,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir() and "one-replica-left" in p.name]
    found = json.loads((bundle / "summary.json").read_text())
    assert found["verdict"] == "PASS" and found["control"] == "one-replica-left", found
    assert found["metrics"]["squeezed_from"] == before
    with handle.control() as control:  # the platform itself was squeezed to one and put back
        scaled = [(e["from"], e["to"]) for e in control.events() if e["kind"] == "scaled" and e["service"] == "agent"]
        assert control.status()["services"]["agent"]["desired"] == before
    assert scaled == [(before, 1), (1, before)], scaled
    records = [json.loads(line) for line in FaultLedger(handle.state_dir / "faults.jsonl").path.read_text().splitlines()]
    (squeeze,) = [r["fault"] for r in records if "fault" in r]
    assert squeeze["kind"] == "squeeze" and squeeze["undo"]["op"] == "unsqueeze"
    assert [r["how"] for r in records if r.get("undone") == squeeze["id"]] == [f"agent back to {before}"]
