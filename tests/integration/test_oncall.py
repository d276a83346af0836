"""On-call runbooks on the sandbox, executed through Papermill, asserting on recorded values:
triage names the aggressor under noisy-tenant load and nothing on a quiet sandbox; the restore
runbook's dry run changes no byte, a real run needs confirm and leaves verified sessions;
shedding lowers the victim's queue wait and the undo restores the original limit."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from drillbook.config import LoadOptions
from drillbook.errors import ConfigError
from drillbook.execute import execute
from drillbook.load import locustfile_for, profile_env, start_load
from drillbook.runbook import recorded
from drillbook.sandbox.client import TenantClient

pytestmark = pytest.mark.integration


def values(bundle: Path) -> dict:
    return recorded(bundle / "runbook.ipynb")["values"]


def noisy_load(handle, out: Path, seconds: float):
    """Locust's noisy-tenant profile: tenant-a paced, tenant-b flooding inference the whole time."""
    settings = {"victim-tenant": "tenant-a", "aggressor-tenant": "tenant-b", "victim-users": "2",
                "aggressor-users": "12", "aggressor-tokens": "32", "baseline": "0.5", "burst": str(seconds),
                "recovery": "0.5"}
    options = LoadOptions(host=handle.gateway_url, users=14, spawn_rate=70, run_time_s=seconds, stop_timeout_s=2,
                          env=profile_env(settings, seconds))
    load = start_load(options, locustfile_for("noisy-tenant"), handle.tenant_keys, out)
    assert load.wait_until_flowing()
    return load


def test_triage_is_quiet_on_a_quiet_sandbox(sandbox, tmp_path):
    with TenantClient(sandbox.gateway_url, sandbox.tenant_keys["tenant-a"]) as client:
        session = client.create_session()
        client.turn(session, "hello")
    executed = execute("agent-latency-triage", overrides={"window_s": "2"}, results=tmp_path / "results",
                       sandbox_state=sandbox.state_dir)
    assert executed.verdict == "PASS", executed.explain()
    found = values(executed.bundle)
    assert found["findings"][0].startswith("info: nothing alarming") and found["next_runbook"] is None
    assert found["operator"] and found["incident"] == "none"


def test_triage_names_the_aggressor_while_the_noisy_tenant_load_runs(sandbox_factory, tmp_path):
    handle = sandbox_factory(tokens_per_second=400, defects=["no-fair-sharing"])
    load = noisy_load(handle, tmp_path / "load", 40.0)
    try:
        executed = execute("agent-latency-triage", overrides={"window_s": "5", "incident": "INC-7"},
                           results=tmp_path / "results", sandbox_state=handle.state_dir)
    finally:
        load.stop()
    assert executed.verdict == "FAIL", executed.explain()
    found = values(executed.bundle)
    assert any(f.startswith("warning: tenant tenant-b holds") for f in found["findings"]), found["findings"]
    assert found["next_runbook"] == "shed-noisy-tenant"
    assert found["tenants"]["tenant-b"]["slot_share"] > 0.6 and found["incident"] == "INC-7"


def _store_bytes(state: Path) -> dict[str, str]:
    """The store's data: the database and its write-ahead log (not -shm, SQLite's shared-memory
    index, which every reader touches)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((state / "store").glob("state.db*"))
            if p.is_file() and not p.name.endswith("-shm")}


def test_restore_runbook_dry_run_changes_nothing_and_a_real_run_needs_confirm(sandbox, tmp_path):
    with TenantClient(sandbox.gateway_url, sandbox.tenant_keys["tenant-a"]) as client:
        session = client.create_session()
        for index in range(3):
            client.turn(session, f"before {index}")
        with sandbox.control() as control:
            control.backup()
        for index in range(2):
            client.turn(session, f"after {index}")
    before = _store_bytes(sandbox.state_dir)
    assert before
    executed = execute("restore-agent-state", results=tmp_path / "results", sandbox_state=sandbox.state_dir)
    assert executed.verdict == "PASS", executed.explain()
    found = values(executed.bundle)
    assert found["dry_run"] is True and found["precheck"]["live_turns"] == 5
    assert found["plan"][0].startswith("restore backup ") and "3 turns" in found["plan"][0]
    assert _store_bytes(sandbox.state_dir) == before

    with pytest.raises(ConfigError, match="set confirm=sandbox"):
        execute("restore-agent-state", overrides={"dry_run": "False", "confirm": "production", "incident": "INC-1"},
                results=tmp_path / "refused", sandbox_state=sandbox.state_dir)
    with pytest.raises(ConfigError, match="needs -p incident"):
        execute("restore-agent-state", overrides={"dry_run": "False", "confirm": "sandbox"},
                results=tmp_path / "refused", sandbox_state=sandbox.state_dir)
    cli = subprocess.run([sys.executable, "-m", "drillbook", "run", "restore-agent-state", "-p", "dry_run=False",
                          "--results", str(tmp_path / "refused")], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "DRILLBOOK_STATE_DIR": str(sandbox.state_dir)})
    assert cli.returncode == 2 and "set confirm=sandbox" in cli.stderr
    assert not (tmp_path / "refused").exists() and _store_bytes(sandbox.state_dir) == before

    executed = execute("restore-agent-state", overrides={"dry_run": "False", "confirm": "sandbox",
                                                         "incident": "INC-1", "operator": "alice"},
                       results=tmp_path / "results", sandbox_state=sandbox.state_dir)
    assert executed.verdict == "PASS", executed.explain()
    found = values(executed.bundle)
    assert found["turns_lost"] == 2 and found["sessions_with_lost_turns"] == {session: 2}
    assert found["operator"] == "alice" and found["incident"] == "INC-1"
    manifest = json.loads((executed.bundle / "manifest.json").read_text())
    assert manifest["parameters"]["operator"] == "alice" and manifest["parameters"]["incident"] == "INC-1"
    with sandbox.control() as control:
        sessions = control.store_sessions()
    assert [(s["turns"], s["chain_ok"]) for s in sessions] == [(3, True)]


def test_restore_runbook_without_a_backup_fails_its_dry_run(sandbox, tmp_path):
    executed = execute("restore-agent-state", results=tmp_path / "results", sandbox_state=sandbox.state_dir)
    assert executed.verdict == "FAIL"
    assert values(executed.bundle)["plan"][0].startswith("NOTHING TO RESTORE")


def test_shedding_the_aggressor_lowers_the_victims_queue_wait_and_the_undo_restores_the_limit(sandbox_factory,
                                                                                               tmp_path):
    handle = sandbox_factory(tokens_per_second=400, defects=["no-fair-sharing"])
    with handle.control() as control:
        original = control.tenant_limits()["tenant-b"]
    load = noisy_load(handle, tmp_path / "load", 60.0)
    try:
        shed = execute("shed-noisy-tenant", overrides={"tenant": "tenant-b", "rps": "2", "burst": "2",
                                                       "measure_s": "5", "dry_run": "False", "confirm": "sandbox",
                                                       "incident": "INC-9"},
                       results=tmp_path / "results", sandbox_state=handle.state_dir)
        with handle.control() as control:
            assert control.tenant_limits()["tenant-b"] == {"rps": 2.0, "burst": 2}  # stays after the run
        undo = execute("shed-noisy-tenant", overrides={"tenant": "tenant-b", "undo": "True", "measure_s": "1",
                                                       "dry_run": "False", "confirm": "sandbox", "incident": "INC-9"},
                       results=tmp_path / "results", sandbox_state=handle.state_dir)
    finally:
        load.stop()
    assert shed.verdict == "PASS", shed.explain()
    found = values(shed.bundle)
    assert found["others_queue_wait_ms_after"] < 0.5 * found["others_queue_wait_ms_before"], found
    assert "undo=True" in found["undo_command"]
    assert undo.verdict == "PASS", undo.explain()
    with handle.control() as control:
        assert control.tenant_limits()["tenant-b"] == original
    ledger = [json.loads(line) for line in (handle.state_dir / "mitigations.jsonl").read_text().splitlines()]
    assert len(ledger) == 2 and "fault" in ledger[0] and "undone" in ledger[1]  # the change and its undo, recorded
    assert ledger[0]["fault"]["detail"]["incident"] == "INC-9" and ledger[0]["fault"]["undo"]["limit"] == original


def test_drillbook_run_lists_on_call_runbooks_separately(tmp_path):
    listing = subprocess.run([sys.executable, "-m", "drillbook", "run"], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "COLUMNS": "250"})
    assert listing.returncode == 0
    drills, _, oncall = listing.stdout.partition("on-call runbooks")
    assert "ha-replica-loss" in drills and "restore-agent-state" not in drills
    assert all(name in oncall for name in ("restore-agent-state", "agent-latency-triage", "shed-noisy-tenant"))
