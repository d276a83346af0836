"""Locust against the real sandbox through drillbook.load, and the delivery audit on what it stored."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from drillbook.config import LoadOptions
from drillbook.delivery import audit_delivery
from drillbook.load import LoadRunOverran, locustfile_for, profile_env, run_load, start_load
from drillbook.processes import start_ticks
from drillbook.profile import format_tenant_keys
from drillbook.sandbox.launcher import _alive
from drillbook.sandbox.verifier import ReferenceVerifier

from tests.helpers import free_port, wait_for

pytestmark = pytest.mark.integration


def audit(handle, result):
    verifier = ReferenceVerifier(handle.gateway_url, handle.tenant_keys)
    try:
        return audit_delivery(result.receipts, verifier)
    finally:
        verifier.close()


def sessions_load(handle, out: Path, seconds: float = 4, users: int = 6, think: str = "0.05"):
    options = LoadOptions(host=handle.gateway_url, users=users, spawn_rate=50, run_time_s=seconds,
                          stop_timeout_s=5, env={"DRILLBOOK_THINK_TIME": think})
    return run_load(options, locustfile_for("agent-sessions"), handle.tenant_keys, out)


def test_a_short_run_has_consistent_totals_and_delivers_everything(sandbox, tmp_path):
    result = sessions_load(sandbox, tmp_path / "load")
    assert result.exit_code == 0
    assert result.total_requests > 20 and result.total_failures == 0
    # JSON totals equal the sum of Locust's own per-second histogram...
    assert int(result.per_second["requests"].sum()) == result.total_requests
    # ...and the request log drillbook's locustfiles write has every request.
    assert len(result.requests) == result.total_requests
    assert result.per_second["p95_ms"].notna().sum() >= 3
    turns = result.stats.set_index("name").loc["turn"]
    assert 0 < turns["p50_ms"] <= turns["p95_ms"] <= turns["p99_ms"]
    assert len(result.receipts) == turns["requests"]
    report = audit(sandbox, result)
    assert report.ok and report.acknowledged == len(result.receipts) and len(report.sessions) == 6
    names = {p.name for p in result.files}
    assert {"locust.json", "locust_stats_history.csv"} <= names
    assert any(n.startswith("receipts-") for n in names) and any(n.startswith("requests-") for n in names)


def test_workers_under_a_master_are_merged_and_all_audited(sandbox, tmp_path):
    options = LoadOptions(host=sandbox.gateway_url, users=6, spawn_rate=50, run_time_s=4, stop_timeout_s=5, workers=2,
                          env={"DRILLBOOK_THINK_TIME": "0.05"})
    result = run_load(options, locustfile_for("agent-sessions"), sandbox.tenant_keys, tmp_path / "load")
    assert result.exit_code == 0 and result.total_failures == 0
    receipts = [p for p in result.files if p.name.startswith("receipts-") and p.stat().st_size]
    logs = [p for p in result.files if p.name.startswith("requests-") and p.stat().st_size]
    assert len(receipts) == 2 and len(logs) == 2  # one of each per worker; the master runs no users
    assert all(p.name.startswith(("receipts-worker-", "requests-worker-")) for p in [*receipts, *logs])  # sent to
    # the master, which wrote them: the workers were given no output folder
    lines = sum(len(p.read_text().splitlines()) for p in receipts)
    assert len(result.receipts) == lines == result.stats.set_index("name").loc["turn", "requests"]
    assert len(result.requests) == result.total_requests  # both request logs, merged
    report = audit(sandbox, result)
    assert report.ok and report.acknowledged == lines and len(report.sessions) == 6
    assert (tmp_path / "load" / "locust-worker-1.log").exists()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_a_signal_to_load_with_workers_leaves_no_locust_behind(sandbox, tmp_path, signum):
    from tests.integration.test_interrupts import command_line, descendants

    out = tmp_path / "out"
    env = {**os.environ, "DRILLBOOK_STATE_DIR": str(sandbox.state_dir), "COLUMNS": "200"}
    runner = subprocess.Popen([sys.executable, "-m", "drillbook", "load", "agent-sessions", "--users", "4",
                               "--duration", "60s", "--stop-timeout", "20s", "--workers", "2", "--out", str(out)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: dict[int, int | None] = {}

    def locusts() -> list[int]:
        seen.update(descendants(runner.pid))
        return [pid for pid in seen if "locust" in command_line(pid)]

    wait_for(lambda: len(locusts()) == 3 and any(p.stat().st_size for p in out.glob("requests-*.csv")), timeout=90)
    signalled = time.monotonic()
    runner.send_signal(signum)
    runner.communicate(timeout=60)
    took = time.monotonic() - signalled
    assert runner.returncode == {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGKILL: -9}[signum]
    # Stopped at once, not after the 20 s stop timeout and 10 s more spent waiting for workers whose
    # master was never told (17 s with the default 5 s): well under half of that timeout.
    assert took < 10, took
    wait_for(lambda: not [pid for pid, ticks in seen.items() if ticks is not None and start_ticks(pid) == ticks],
             timeout=20)  # master and both workers gone (the same processes, not reused pids)


def test_workers_started_elsewhere_send_everything_to_the_master(sandbox, tmp_path):
    """As worker pods would: raw Locust workers started by someone else, with the shipped
    locustfile and the tenant keys but no output folder, pointed at the master's port."""
    port = free_port()
    out = tmp_path / "out"
    env = {**os.environ, "DRILLBOOK_STATE_DIR": str(sandbox.state_dir), "COLUMNS": "200"}
    master = subprocess.Popen([sys.executable, "-m", "drillbook", "load", "agent-sessions", "--users", "4",
                               "--duration", "4s", "--set", "think-time=0.05", "--workers", "2", "--remote-workers",
                               "--master-port", str(port), "--out", str(out)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    elsewhere = {k: v for k, v in os.environ.items() if not k.startswith("DRILLBOOK_")}
    elsewhere["DRILLBOOK_TENANT_KEYS"] = format_tenant_keys(sandbox.tenant_keys)
    (tmp_path / "pod").mkdir()
    workers = [subprocess.Popen([sys.executable, "-m", "locust", "-f", str(locustfile_for("agent-sessions")),
                                 "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)],
                                env=elsewhere, cwd=tmp_path / "pod", stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL) for _ in range(2)]
    try:
        stdout, stderr = master.communicate(timeout=180)
        assert master.returncode == 0, stdout + stderr
        assert "delivered True" in stdout and "lost 0" in stdout
        receipts = [p for p in out.glob("receipts-worker-*.jsonl") if p.stat().st_size]
        assert len(receipts) == 2
        summary = json.loads((out / "load-summary.json").read_text())
        assert summary["delivery"]["acknowledged"] == sum(len(p.read_text().splitlines()) for p in receipts)
        assert not list((tmp_path / "pod").iterdir())  # the workers wrote nothing where they ran
        for worker in workers:
            worker.wait(30)  # told to quit by their master
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait(10)


def test_the_audit_finds_turns_deleted_behind_the_gateways_back(sandbox, tmp_path):
    result = sessions_load(sandbox, tmp_path / "load", seconds=3)
    victim = result.receipts[len(result.receipts) // 2]
    with sqlite3.connect(sandbox.runtime.store_path) as db:
        db.execute("DELETE FROM turns WHERE session_id = ? AND seq = ?", (victim.session_id, victim.seq))
    report = audit(sandbox, result)
    assert not report.ok
    assert report.lost == 1
    damaged = next(s for s in report.sessions if s.session_id == victim.session_id)
    assert damaged.lost == [victim.seq]


def load_with_kills(handle, out: Path, seconds: float, users: int, kills: int):
    """Agent-session load; once requests flow, kill an agent replica `kills` times, spread over the run."""
    options = LoadOptions(host=handle.gateway_url, users=users, spawn_rate=50, run_time_s=seconds, stop_timeout_s=5,
                          env={"DRILLBOOK_THINK_TIME": "0"})
    load = start_load(options, locustfile_for("agent-sessions"), handle.tenant_keys, out)
    assert load.wait_until_flowing()
    with handle.control() as control:
        for _ in range(kills):
            time.sleep(seconds / (kills + 2))
            control.kill("agent", count=1, signal="SIGKILL")
    return load.wait()


def test_killing_replicas_loses_nothing_with_idempotency(sandbox_factory, tmp_path):
    handle = sandbox_factory(agents=2, tokens_per_second=0, post_commit_delay_s=0.15)
    result = load_with_kills(handle, tmp_path / "load", seconds=5, users=12, kills=2)
    report = audit(handle, result)
    assert report.ok, report.summary()
    assert report.acknowledged > 50


def test_the_audit_finds_duplicates_when_idempotency_is_off_and_replicas_die(sandbox_factory, tmp_path):
    handle = sandbox_factory(agents=2, tokens_per_second=0, post_commit_delay_s=0.15, defects=["no-idempotency"])
    result = load_with_kills(handle, tmp_path / "load", seconds=5, users=12, kills=2)
    report = audit(handle, result)
    assert not report.ok
    assert report.duplicated > 0


def test_noisy_tenant_records_phases_and_per_phase_percentiles(sandbox_factory, tmp_path):
    handle = sandbox_factory(gpu_slots=2, tokens_per_second=200, max_tokens=4)
    env = profile_env({"victim-tenant": "tenant-a", "aggressor-tenant": "tenant-b", "victim-users": "2",
                       "aggressor-users": "6", "aggressor-tokens": "20"}, 6)
    options = LoadOptions(host=handle.gateway_url, users=8, spawn_rate=80, run_time_s=6, stop_timeout_s=3, env=env)
    result = run_load(options, locustfile_for("noisy-tenant"), handle.tenant_keys, tmp_path / "load")
    assert list(result.phases["phase"]) == ["baseline", "burst", "recovery"]
    phases = result.by_phase(["turn victim", "turn aggressor"]).set_index(["phase", "name"])
    assert phases.loc[("baseline", "turn victim"), "requests"] > 0
    assert phases.loc[("burst", "turn aggressor"), "requests"] > 0
    assert ("baseline", "turn aggressor") not in phases.index  # aggressors idle outside the burst
    assert audit(handle, result).ok


def test_a_run_past_its_bound_is_killed_with_its_children(tmp_path, monkeypatch):
    import drillbook.load as load

    marker = tmp_path / "child.pid"
    locustfile = tmp_path / "hangs.py"
    locustfile.write_text(textwrap.dedent(f"""
        import subprocess
        from locust import HttpUser, events, task, constant

        @events.quitting.add_listener
        def hang(**_):
            child = subprocess.Popen(["sleep", "300"])
            open({str(marker)!r}, "w").write(str(child.pid))
            child.wait()

        class Idle(HttpUser):
            wait_time = constant(1)
            @task
            def nothing(self):
                pass
    """))
    monkeypatch.setattr(load, "STARTUP_MARGIN_S", 10.0)  # room for a slow Locust start on a busy machine
    options = LoadOptions(host="http://127.0.0.1:9", users=1, run_time_s=1, stop_timeout_s=0)
    started = time.monotonic()
    with pytest.raises(LoadRunOverran, match="killed"):
        run_load(options, locustfile, {"t": "k"}, tmp_path / "load")
    assert time.monotonic() - started < 45
    child = int(marker.read_text())
    wait_for(lambda: not _alive(child), timeout=10)  # SIGKILLed with Locust's group; gone within moments


def drillbook(*args: str, state: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DRILLBOOK_STATE_DIR": str(state), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "drillbook", *args], env=env, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["agent-sessions", "--users", "0"], "invalid --users"),
        (["agent-sessions", "--workers", "-1"], "invalid --workers"),
        (["agent-sessions", "--workers", "65"], "invalid --workers"),
        (["agent-sessions", "--remote-workers"], "remote workers need a count"),
        (["agent-sessions", "--workers", "2", "--remote-workers"], "remote workers need the master's port"),
        (["no-such-profile"], "unknown load profile"),
        (["agent-sessions", "--duration", "soon"], "invalid --duration"),
        (["agent-sessions", "--set", "colour=blue"], "unknown load setting"),
        (["agent-sessions"], "no sandbox is running"),
        (["agent-sessions", "--target", "no-such-target"], "unknown target 'no-such-target'"),
    ],
)
def test_bad_load_options_are_one_line_and_exit_2(tmp_path, args, expected):
    result = drillbook("load", *args, "--out", str(tmp_path / "out"), state=tmp_path / "state")
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and expected in lines[0], result.stderr
    assert not (tmp_path / "out").exists()


def test_an_unreachable_gateway_is_refused(tmp_path):
    profile = tmp_path / "elsewhere.yaml"
    profile.write_text("name: elsewhere\nkind: commands\nworkload: {gateway_url: 'http://127.0.0.1:9'}\n"
                       "tenants: {t: {key_env: DRILLBOOK_TEST_KEY}}\n")
    os.environ["DRILLBOOK_TEST_KEY"] = "k"
    try:
        result = drillbook("load", "agent-sessions", "--target", str(profile), "--out", str(tmp_path / "out"),
                           state=tmp_path / "state")
    finally:
        os.environ.pop("DRILLBOOK_TEST_KEY")
    assert result.returncode == 2 and "cannot reach http://127.0.0.1:9" in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


def test_load_command_prints_a_summary_and_writes_the_files(sandbox, tmp_path):
    result = drillbook("load", "agent-sessions", "--users", "3", "--duration", "3s", "--set", "think-time=0.1",
                       "--out", str(tmp_path / "out"), state=sandbox.state_dir)
    assert result.returncode == 0, result.stderr
    assert "delivered True" in result.stdout and "lost 0" in result.stdout
    assert (tmp_path / "out" / "load-summary.json").exists()
