"""Defects that lie: the platform answers as if it had done the work and did not. No drill may
PASS on them, and each says why: a fault not seen to land is ERROR "fault did not take effect",
a slow recovery is FAIL with a figure never earlier than the truth, a restore that restores
nothing is FAIL naming what was missing, a noisy neighbour that floods nothing (or stops) is
ERROR. On the reference platform (sandbox) and on tinyagent, a
workload driven through a commands profile alone, whose pool logs its own truth."""

from __future__ import annotations

import pytest

from drillbook.chaos import run as chaos_run
from drillbook.chaos.runner import sandbox_configuration
from drillbook.evidence.recompute import recompute_bundle
from drillbook.execute import execute
from drillbook.runbook import recorded
from tests.integration.test_chaos import replicas
from tests.integration.test_own_workload import tinyagent  # noqa: F401 - the fixture

pytestmark = pytest.mark.integration

NOT_LANDED = "fault did not take effect"
# Long enough after the kill for a recovery within max_recovery_s plus the hold to be seen.
HA_SANDBOX = {"users": "4", "duration_s": "11", "kill_after_s": "2", "max_recovery_s": "5"}
HA_TINY = {"users": "4", "duration_s": "14.0", "kill_after_s": "2.0", "max_recovery_s": "5.0", "think_time_s": "0.1"}


def values(executed) -> dict:
    return recorded(executed.bundle / "runbook.ipynb")["values"]


def test_a_kill_that_kills_nothing_is_error_on_the_sandbox(sandbox_factory, tmp_path):
    handle = sandbox_factory(tokens_per_second=200, defects=["noop-kill"])
    executed = execute("ha-replica-loss", overrides=HA_SANDBOX, results=tmp_path / "results",
                       sandbox_state=handle.state_dir)
    assert executed.verdict == "ERROR", executed.explain()
    assert executed.summary["reason"].startswith(NOT_LANDED), executed.explain()
    assert "the same replicas" in executed.summary["reason"] and len(executed.summary["reason"]) <= 200


def test_a_slow_restart_fails_on_its_measured_recovery_on_the_sandbox(sandbox_factory, tmp_path):
    handle = sandbox_factory(tokens_per_second=200, defects=["slow-restart", "stale-status"])
    executed = execute("ha-replica-loss", overrides=HA_SANDBOX, results=tmp_path / "results",
                       sandbox_state=handle.state_dir)
    assert executed.verdict == "FAIL", executed.explain()
    failed = {c["name"]: c for c in executed.summary["checks"] if not c["passed"]}
    # at least the 9 s restart, or all the load after the kill when the load ended first (a lower bound)
    assert failed["service recovery time"]["value"] >= min(9.0, values(executed)["load_after_kill_s"]) - 1e-6, \
        executed.explain()


def test_a_disaster_that_does_nothing_is_error_on_the_sandbox(sandbox_factory, tmp_path):
    handle = sandbox_factory(tokens_per_second=0, defects=["noop-destroy", "noop-restore"])
    executed = execute("restore-drill", overrides={"restore_timeout_s": "3"}, results=tmp_path / "results",
                       sandbox_state=handle.state_dir)
    assert executed.verdict == "ERROR", executed.explain()
    assert executed.summary["reason"].startswith(NOT_LANDED) and "found the store healthy" in executed.summary["reason"]


def test_a_restore_that_restores_nothing_fails_saying_the_store_did_not_serve(sandbox_factory, tmp_path):
    handle = sandbox_factory(tokens_per_second=0, defects=["noop-restore"])
    executed = execute("restore-drill", overrides={"restore_timeout_s": "3"}, results=tmp_path / "results",
                       sandbox_state=handle.state_dir)
    assert executed.verdict == "FAIL", executed.explain()
    assert "the store did not serve again within restore_timeout_s" in executed.explain()
    assert values(executed)["backup_created"] is True
    with handle.control() as control:
        assert control.store()["healthy"] is True  # the rollback re-created a store, and said it was empty


def test_a_backup_of_nothing_fails_naming_the_missing_turns(sandbox_factory, tmp_path):
    handle = sandbox_factory(tokens_per_second=0, defects=["empty-backups"])
    executed = execute("restore-drill", overrides={"restore_timeout_s": "3"}, results=tmp_path / "results",
                       sandbox_state=handle.state_dir)
    assert executed.verdict == "FAIL", executed.explain()
    assert "the store served again, but 9 of 9 turns acknowledged before the backup were missing" in executed.explain()
    assert "no backup was taken" not in executed.explain()
    assert values(executed)["integrity"] == 0.0


def test_a_kill_that_kills_nothing_is_error_through_commands(tinyagent, tmp_path):  # noqa: F811
    agent = tinyagent(lies=("noop-kill",))
    executed = execute("ha-replica-loss", str(agent.profile), HA_TINY, results=tmp_path / "results")
    assert executed.verdict == "ERROR", executed.explain()
    assert executed.summary["reason"].startswith(NOT_LANDED), executed.explain()
    assert not [e for e in agent.truth() if e["event"] == "killed"]


def test_stale_status_cannot_make_a_slow_restart_look_fast_through_commands(tinyagent, tmp_path):  # noqa: F811
    """The false PASS: a status reading that began before the kill said 'ready again'. The pool's
    own log says when the replacement was really ready; drillbook's figure is never earlier."""
    agent = tinyagent(lies=("slow-restart", "stale-status"))
    executed = execute("ha-replica-loss", str(agent.profile), HA_TINY, results=tmp_path / "results")
    assert executed.verdict == "FAIL", executed.explain()
    truth = agent.truth()
    killed = next(e["t"] for e in truth if e["event"] == "killed")
    back = [e["t"] for e in truth if e["event"] == "ready" and e["t"] > killed]
    found = values(executed)
    recovery = next(c for c in executed.summary["checks"] if c["name"] == "service recovery time")
    # at least the 9 s restart; or, when the load ended before the replica was back, a lower bound
    # over the 5 s allowed: all the load after the kill, or the last reading that saw the replica
    # missing (how much load followed the kill, and when the kill landed, depend on the machine:
    # under load it landed 2 s after the call and the load ended 8.4 s after it, CI run 14)
    assert not recovery["passed"] and recovery["value"] > 5.0, found
    if not found.get("recovery_time_lower_bound"):
        assert recovery["value"] >= 9.0 - 1e-6, found
    if back and found["replicas_recovered_s"] is not None:  # never early against the pool's own clock
        assert found["replicas_recovered_s"] >= back[0] - killed - 0.05
    figures = recompute_bundle(executed.bundle)  # the readings path, derived again from the kept readings
    assert figures and all(f.agrees for f in figures), [f.describe() for f in figures if not f.agrees]


def test_a_disaster_that_does_nothing_is_error_through_commands(tinyagent, tmp_path):  # noqa: F811
    agent = tinyagent(lies=("noop-destroy",))
    executed = execute("restore-drill", str(agent.profile), {"restore_timeout_s": "3"}, results=tmp_path / "results")
    assert executed.verdict == "ERROR", executed.explain()
    assert executed.summary["reason"].startswith(NOT_LANDED)


def test_a_restore_that_restores_nothing_fails_through_commands(tinyagent, tmp_path):  # noqa: F811
    agent = tinyagent(lies=("noop-restore",))
    executed = execute("restore-drill", str(agent.profile), {"restore_timeout_s": "3"}, results=tmp_path / "results")
    assert executed.verdict == "FAIL", executed.explain()
    assert "the store did not serve again within restore_timeout_s" in executed.explain()


def test_a_missing_kubeconfig_is_error_naming_it_not_a_measured_fail(tmp_path, monkeypatch):
    """A setup problem is never a FAIL: every trial errors before the fault, and the one line says why."""
    import os
    import subprocess
    import sys

    import yaml

    from tests.helpers import free_port, wait_for

    port = free_port()
    gateway = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                               cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        profile = tmp_path / "cluster.yaml"
        profile.write_text(yaml.safe_dump({
            "name": "no-kubeconfig", "kind": "kubernetes",
            "kubernetes": {"context": "staging", "namespace": "agents", "allowed_contexts": ["staging"],
                           "allowed_namespaces": ["agents"]},
            "workload": {"gateway_url": f"http://127.0.0.1:{port}", "agent": {"deployment": "agent",
                                                                              "selector": "app=agent"}},
            "tenants": {"acme": {"key_env": "ACME_AGENT_KEY"}}}))
        monkeypatch.setenv("ACME_AGENT_KEY", "key")
        monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
        monkeypatch.setenv("DRILLBOOK_STATE_DIR", str(tmp_path / "state"))
        wait_for(lambda: subprocess.run(["python3", "-c", f"import socket; socket.create_connection(('127.0.0.1', {port}))"],
                                        capture_output=True).returncode == 0, timeout=10)
        executed = execute("cold-start", str(profile), {"trials": "1"}, results=tmp_path / "results")
    finally:
        gateway.terminate()
        gateway.wait(10)
    assert executed.verdict == "ERROR", executed.explain()
    assert f"kubeconfig {tmp_path / 'no-such-kubeconfig'} does not exist" in executed.summary["reason"]
    assert len(executed.summary["reason"]) <= 200
    # The list, the auditor's report and JUnit say the same: ERROR, naming the kubeconfig, no failure.
    import xml.etree.ElementTree as ElementTree

    def drillbook(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "drillbook", *args], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "COLUMNS": "250"})

    listed = drillbook("list", str(tmp_path / "results"))
    assert listed.returncode == 0 and "ERROR" in listed.stdout and "FAIL" not in listed.stdout, listed.stdout
    junit = tmp_path / "junit.xml"
    reported = drillbook("report", str(tmp_path / "results"), "-o", str(tmp_path / "report.html"), "--junit", str(junit))
    assert reported.returncode == 0, reported.stderr
    root = ElementTree.parse(junit).getroot()
    assert root.get("failures") == "0" and int(root.get("errors")) >= 1, ElementTree.tostring(root)[:600]
    errors = [e.get("message", "") + (e.text or "") for e in root.iter("error")]
    assert any("no-such-kubeconfig" in text for text in errors), errors
    page = (tmp_path / "report.html").read_text()
    assert "ERROR" in page and "no-such-kubeconfig" in page


def test_an_aggressor_that_floods_nothing_is_error_not_a_pass_for_isolation(sandbox_factory, tmp_path):
    # Ready and quiet: a victim measured beside it would pass on an idle tier, first come first served or not.
    handle = sandbox_factory(tokens_per_second=200, defects=["noop-flood", "no-fair-sharing"])
    result = chaos_run("noisy-neighbour", sandbox_configuration(handle.state_dir), tmp_path / "run",
                       {"flood_timeout_s": 3})
    assert result.verdict == "ERROR", result.reasons
    assert result.reasons[0].startswith(NOT_LANDED) and "held no slot between any two" in result.reasons[0]
    flood = result.measurements["flood"]  # every reading of the tier is kept, from the call on
    assert not flood["landed"]["landed"] and len(flood["observations"]) >= 2
    assert all(o["started"] >= flood["at"] for o in flood["observations"])
    assert replicas(handle)["aggressor"] == 0  # the rollback scaled it back all the same


def test_a_flood_that_stops_in_the_victims_window_is_error_not_a_pass(sandbox_factory, tmp_path):
    # It floods for 2.5 s from its start: seen to land, then gone before the 5 s window ends.
    handle = sandbox_factory(tokens_per_second=200, defects=["no-fair-sharing"], aggressor_max_s=2.5)
    executed = execute("noisy-neighbour", overrides={}, results=tmp_path / "results", sandbox_state=handle.state_dir)
    assert executed.verdict == "ERROR", executed.explain()
    reason = executed.summary["reason"]
    assert reason.startswith(NOT_LANDED) and "held through the victim's window" in reason, reason
    assert "at its end, the other tenants held no slot" in reason, reason
    found = values(executed)
    assert found["flood_seen"] and 0 < found["flood_landed_after_s"] < 2.5
