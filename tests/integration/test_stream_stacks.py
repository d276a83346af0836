"""session-continuity on a third-party stack from PyPI whose server streams resumably: a LangGraph
server (`langgraph dev`, in memory; installed once into its own virtual environment, since its
pins are not drillbook's: langserve's sse-starlette<2 and langgraph-api's >=2.1 cannot share one)
serving targets/examples/langgraph, driven only through its profile (preset langgraph). Its runs outlive their client (on_disconnect continue) and are joined
again after the last event id: PASS. Started as LangGraph starts a run by default (on_disconnect
cancel), a dropped client takes its run with it: FAIL, for that reason."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import httpx
import pytest
import yaml

from drillbook.execute import execute
from tests.helpers import cached_venv, free_port, wait_for

pytestmark = pytest.mark.integration
REPOSITORY = Path(__file__).resolve().parents[2]
EXAMPLE = REPOSITORY / "targets" / "examples" / "langgraph"
DROPS_ONLY = {"users": "4", "duration_s": "6", "kill_count": "0"}
LANGGRAPH = "langgraph-cli[inmem]==0.4.40"


@pytest.fixture(scope="module")
def langgraph_server(tmp_path_factory) -> Iterator[str]:
    """`langgraph dev` on a free loopback port, from the example's folder; its whole process group
    is stopped afterwards."""
    port = free_port()
    langgraph = cached_venv(LANGGRAPH) / "bin" / "langgraph"
    log = tmp_path_factory.mktemp("langgraph") / "server.log"
    with open(log, "w") as output:
        server = subprocess.Popen([str(langgraph), "dev", "--host", "127.0.0.1", "--port", str(port), "--no-browser",
                                   "--no-reload", "--n-jobs-per-worker", "16"], cwd=EXAMPLE, start_new_session=True,
                                  stdout=output, stderr=subprocess.STDOUT,
                                  env={**os.environ, "TOKENS_PER_SECOND": "100", "LANGSMITH_TRACING": "false"})
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        if server.poll() is not None:
            raise AssertionError(f"langgraph dev exited {server.returncode}: {log.read_text()[-2000:]}")
        try:
            return httpx.get(f"{url}/ok", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(answers, timeout=90)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(10)


def profile(tmp_path: Path, url: str, on_disconnect: str = "continue") -> Path:
    """The example's profile, with where the server runs filled in (and how runs start)."""
    spec = yaml.safe_load((EXAMPLE / "agent.yaml").read_text())
    spec["workload"]["gateway_url"] = url
    spec["workload"]["agent"]["commands"]["status"] = f"{sys.executable} {EXAMPLE / 'status.py'} {url}"
    preset = yaml.safe_load((REPOSITORY / "targets" / "presets" / "langgraph.yaml").read_text())
    if on_disconnect != "continue":
        spec["api"] = {"turn_body": {**preset["api"]["turn_body"], "on_disconnect": on_disconnect}}
    path = tmp_path / f"langgraph-{on_disconnect}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_langgraph_runs_that_outlive_their_client_resume_whole(langgraph_server, tmp_path, monkeypatch):
    monkeypatch.setenv("AGENT_TEAM_A_KEY", "not-checked-by-langgraph-dev")
    executed = execute("session-continuity", target=str(profile(tmp_path, langgraph_server)), overrides=DROPS_ONLY,
                       results=tmp_path / "results")
    assert executed.verdict == "PASS", executed.explain()
    found = executed.summary["metrics"]
    assert found["streams_dropped"] > 0 and found["resumes"] > 0 and found["tokens_checked"] > 0


def test_langgraph_runs_cancelled_with_their_client_fail_for_it(langgraph_server, tmp_path, monkeypatch):
    monkeypatch.setenv("AGENT_TEAM_A_KEY", "not-checked-by-langgraph-dev")
    executed = execute("session-continuity", target=str(profile(tmp_path, langgraph_server, "cancel")),
                       overrides=DROPS_ONLY, results=tmp_path / "results")
    assert executed.verdict == "FAIL", executed.explain()
    failed = {check["name"] for check in executed.summary["checks"] if not check["passed"]}
    assert "turns a dropped client cancelled" in failed, executed.explain()
