"""The `drillbook` command as a user runs it: real subprocesses, real exit codes."""

from __future__ import annotations

import json
import re
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from drillbook.sandbox.launcher import _alive

pytestmark = pytest.mark.integration


def drillbook(*args: str, state: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DRILLBOOK_STATE_DIR": str(state), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "drillbook", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("drillbook: ")
    return lines[0]


def test_up_status_second_up_and_down_leave_no_process(tmp_path):
    up = drillbook("sandbox", "up", "--json", "--tenant", "acme", "--tenant", "globex", state=tmp_path)
    assert up.returncode == 0, up.stderr
    details = json.loads(up.stdout)
    assert details["gateway_url"].startswith("http://127.0.0.1:")
    assert set(details["tenant_keys"]) == {"acme", "globex"}
    try:
        status = drillbook("sandbox", "status", "--json", state=tmp_path)
        assert status.returncode == 0, status.stderr
        services = json.loads(status.stdout)["services"]
        assert {name: s["ready"] for name, s in services.items()} == {"model": 1, "agent": 2, "gateway": 1, "aggressor": 0,
                                                                         "codebox": 1}
        pids = [details["supervisor_pid"]] + [r["pid"] for s in services.values() for r in s["replicas"]]

        again = drillbook("sandbox", "up", state=tmp_path)
        assert again.returncode == 2
        assert "already running" in one_error_line(again)
        human = drillbook("sandbox", "status", state=tmp_path)
        assert "agent 2/2 ready" in human.stdout
    finally:
        down = drillbook("sandbox", "down", state=tmp_path)
    assert down.returncode == 0, down.stderr
    assert "sandbox stopped" in down.stdout
    assert [pid for pid in pids if _alive(pid)] == []
    after = drillbook("sandbox", "status", state=tmp_path)
    assert after.returncode == 1 and "no sandbox is running" in one_error_line(after)
    assert drillbook("sandbox", "down", state=tmp_path).returncode == 0  # down twice is fine


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--store", "mysql"], "invalid store"),
        (["--agents", "-1"], "invalid agents"),
        (["--agents", "two"], "--agents"),
        (["--defect", "gremlins"], "invalid --defect: Input should be"),
        (["--store", "postgres", "--dsn", "postgresql://u:hunter2@127.0.0.1:1/db"], "cannot connect to PostgreSQL"),
        (["--no-such-flag"], "No such option"),
    ],
)
def test_bad_input_is_one_line_and_exit_2_before_anything_starts(tmp_path, args, expected):
    result = drillbook("sandbox", "up", *args, state=tmp_path)
    assert result.returncode == 2
    line = one_error_line(result)
    assert expected in line
    assert "hunter2" not in result.stderr + result.stdout
    assert not (tmp_path / "runtime.json").exists()


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["model"], {}, "DRILLBOOK_INTERNAL_TOKEN is not set"),
        (["gateway"], {"DRILLBOOK_INTERNAL_TOKEN": "internal-token-0123456789", "DRILLBOOK_DISCOVERY": "kubernetes"},
         "outside a pod"),
        (["supervisor"], {}, "unknown service 'supervisor'"),
    ],
)
def test_a_container_service_without_its_settings_is_one_line_and_exit_2(tmp_path, args, env, expected):
    result = subprocess.run([sys.executable, "-m", "drillbook", "sandbox", "serve", *args], capture_output=True,
                            text=True, timeout=60, stdin=subprocess.DEVNULL,
                            env={**{k: v for k, v in os.environ.items() if not k.startswith("DRILLBOOK_")}, **env})
    assert result.returncode == 2
    assert expected in one_error_line(result)


def test_a_port_in_use_is_refused(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = drillbook("sandbox", "up", "--gateway-port", str(port), state=tmp_path)
    assert result.returncode == 2
    assert f"port {port}" in one_error_line(result)
    assert not (tmp_path / "runtime.json").exists()


def test_smoke_starts_checks_and_stops_a_sandbox(tmp_path):
    result = drillbook("sandbox", "smoke", "--sessions", "3", "--turns", "4", "--results", str(tmp_path / "results"),
                       state=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "PASS" in result.stdout
    assert re.search(r"acknowledged turns read back\s*│\s*12\b", result.stdout), result.stdout
    assert len(list((tmp_path / "results").glob("*_sandbox-smoke_sandbox_*"))) == 1
    assert not (tmp_path / "sandbox.lock").exists() or drillbook("sandbox", "status", state=tmp_path).returncode == 1
