"""drillbook on third-party agent stacks from PyPI, with only a profile.

The LangChain stack is the worked example in targets/examples/langchain: a LangServe app over
RunnableWithMessageHistory with SQL chat history (service.py, its launch script), run as two
uvicorn replicas behind the test platform's router and replica pool (tests/workloads/tinyagent.py
``serve --worker-command``: the part a team's compose file or cluster plays). drillbook gets the
example profile (agent.yaml, ``preset: langserve``) with only what belongs to where it runs
changed: the gateway URL, the platform's commands and the router's auth header. HA, cold start
and the restore drill must PASS, and each must FAIL, for the right reason, on a deliberate
mistake: chat history in each replica's memory, no activator in front of the replicas, backups
that hold nothing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import pytest
import yaml

from drillbook.execute import execute
from drillbook.runbook import recorded
from tests.helpers import cached_venv, free_port, wait_for

pytestmark = pytest.mark.integration
REPOSITORY = Path(__file__).resolve().parents[2]
LANGCHAIN = REPOSITORY / "targets" / "examples" / "langchain"
AGNO = REPOSITORY / "targets" / "examples" / "agno"
PLATFORM = REPOSITORY / "tests" / "workloads" / "tinyagent.py"
KEY = "team-a-secret"


@dataclass
class Stack:
    profile: Path
    admin: str
    gateway: str

    def ctl(self, *args: str) -> str:
        return subprocess.run([sys.executable, str(PLATFORM), "ctl", "--admin", self.admin, *args],
                              capture_output=True, text=True, timeout=60, check=True).stdout


def example_profile(example: Path, path: Path, gateway: str, admin: str) -> Path:
    """A worked example's profile, with where it runs filled in (gateway, commands, auth header)."""
    spec = yaml.safe_load((example / "agent.yaml").read_text())
    ctl = f"{sys.executable} {PLATFORM} ctl --admin {admin}"
    spec["workload"]["gateway_url"] = gateway
    spec["workload"]["agent"]["commands"] = {"status": f"{ctl} status", "kill": f"{ctl} kill {{count}} {{signal}}",
                                             "scale": f"{ctl} scale {{replicas}}"}
    spec["workload"]["store"] = {op: f"{ctl} {op}" + (" {backup}" if op == "restore" else "")
                                 for op in ("backup", "restore", "destroy", "recreate", "healthy")}
    spec["api"] = {"auth_header": "X-Api-Key", "auth_scheme": ""}  # the router's, not the service's
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


class Platform:
    """The test platform (router, replica pool, store commands) running someone else's service as
    its replicas, with the example profile pointed at it; everything it started stops with it."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.started: list[subprocess.Popen] = []

    def start(self, example: Path, replica: str, *platform_flags: str) -> Stack:
        port, admin_port = free_port(), free_port()
        data = self.tmp_path / f"stack-{len(self.started)}"
        process = subprocess.Popen(
            [sys.executable, str(PLATFORM), "serve", "--port", str(port), "--admin-port", str(admin_port),
             "--data", str(data), "--replicas", "2", "--worker-command", replica, *platform_flags],
            env={**os.environ, "TINYAGENT_KEYS": f"team-a={KEY}"}, start_new_session=True)
        self.started.append(process)
        admin, gateway = f"http://127.0.0.1:{admin_port}", f"http://127.0.0.1:{port}"
        profile = example_profile(example, self.tmp_path / f"agent-{len(self.started)}.yaml", gateway, admin)
        stack = Stack(profile, admin, gateway)

        def ready() -> bool:
            try:
                return '"ready": 2' in stack.ctl("status")
            except subprocess.CalledProcessError:
                return False

        wait_for(ready, timeout=90)
        return stack

    def stop(self) -> None:
        for process in self.started:
            stop_process(process)


def stop_process(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)


@pytest.fixture
def platform(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Platform]:
    monkeypatch.setenv("AGENT_TEAM_A_KEY", KEY)
    monkeypatch.setenv("DRILLBOOK_STATE_DIR", str(tmp_path / "state"))
    started = Platform(tmp_path)
    yield started
    started.stop()


@pytest.fixture
def langchain_stack(platform: Platform) -> Callable[..., Stack]:
    def start(*platform_flags: str, memory: bool = False) -> Stack:
        url = "memory" if memory else "sqlite+aiosqlite:///{db}"
        replica = (f"env CHAT_HISTORY_URL={url} {sys.executable} -m uvicorn service:app --host 127.0.0.1 "
                   f"--port {{port}} --app-dir {LANGCHAIN} --log-level warning")
        return platform.start(LANGCHAIN, replica, *platform_flags)

    return start


def drillbook(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "drillbook", *args], env={**os.environ, "COLUMNS": "250"},
                          capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)


def values(executed) -> dict:
    return recorded(executed.bundle / "runbook.ipynb")["values"]


def failed_checks(executed) -> set[str]:
    return {c["name"] for c in executed.summary["checks"] if not c["passed"]}


# Graceful replica loss (an eviction, a rolling update): neither LangServe nor AgentOS takes an
# idempotency key, so under SIGKILL a kill that lands between a reply's headers and its body leaves
# a turn stored that the client never heard of; the client's retry stores it again, and drillbook
# rightly reports it duplicated (seen once in 797 turns). SIGTERM lets the replica finish what it is
# sending, so these verdicts do not hang on where in a reply the kill lands.
HA = {"users": "6", "think_time_s": "0.1", "kill_signal": "SIGTERM"}


def test_target_check_tests_the_langserve_contract_end_to_end(langchain_stack):
    stack = langchain_stack()
    checked = drillbook("target", "check", str(stack.profile))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    out = checked.stdout
    assert "the check turn found by content" in out and "chain not offered" in out
    assert "reply 'Noted.'" in out and '{"desired": 2, "ready": 2, "replicas": 2, "ids": [' in out
    assert "not offered by this profile: no aggressor scale command" in out
    asked = drillbook("target", "check", str(stack.profile), "-r", "ha-replica-loss", "-r", "noisy-neighbour")
    assert asked.returncode == 1 and "cannot run" in asked.stdout and "no aggressor scale command" in asked.stdout


def test_ha_cold_start_and_restore_pass_on_a_langchain_service_with_only_a_profile(langchain_stack, tmp_path):
    stack = langchain_stack()
    # The profile's 18 s of load leaves 14 s after a kill at 4 s; beside the real node the kill
    # landed 11 s into the load (CI run 17: ERROR, too short to judge). 30 s leaves 19 s after it.
    ha = execute("ha-replica-loss", str(stack.profile), {**HA, "duration_s": "30"}, results=tmp_path / "results")
    assert ha.verdict == "PASS", ha.explain()
    found = values(ha)
    assert found["acknowledged_turns"] > 20 and found["lost_turns"] == 0 and len(found["killed_replicas"]) == 1
    # drillbook's own receipts carry the audit: LangServe gives neither a position nor a digest.
    receipts = [yaml.safe_load(line) for p in (ha.bundle / "load").glob("receipts-*.jsonl")
                for line in p.read_text().splitlines()]
    assert receipts and all(r["seq"] is None and r["hash"] is None and r["sent"] for r in receipts)

    # The profile leaves cold start at drillbook's 5 s: a LangServe replica started, loaded its chain
    # and answered in 5.21 s (P95) with the other test worker busy beside it; 10 s is the margin.
    cold = execute("cold-start", str(stack.profile), {"trials": "2", "slo_p95_s": "10"}, results=tmp_path / "results")
    assert cold.verdict == "PASS", cold.explain()
    assert values(cold)["first_turns_acknowledged"] == 2 and values(cold)["first_turns_lost"] == 0

    restore = execute("restore-drill", str(stack.profile), {}, results=tmp_path / "results")
    assert restore.verdict == "PASS", restore.explain()
    assert values(restore)["integrity"] == 1.0


def test_chat_history_in_each_replicas_memory_fails_ha_for_lost_turns(langchain_stack, tmp_path):
    stack = langchain_stack(memory=True)
    ha = execute("ha-replica-loss", str(stack.profile), HA, results=tmp_path / "results")
    assert ha.verdict == "FAIL"
    assert values(ha)["lost_turns"] > 0
    assert "acknowledged turns lost" in failed_checks(ha)
    assert "error rate in the fault window" not in failed_checks(ha)  # every turn was answered: it was not kept


STACKS = ["langchain_stack", "agno_stack"]


@pytest.mark.parametrize("stack", STACKS)
def test_replicas_with_no_activator_in_front_fail_cold_start(stack, request, tmp_path):
    started = request.getfixturevalue(stack)("--no-activator")
    # The tier never serves again without an activator: ten seconds tell that as well as sixty.
    cold = execute("cold-start", str(started.profile), {"trials": "1", "ready_timeout_s": "10"},
                   results=tmp_path / "results")
    assert cold.verdict == "FAIL"
    assert values(cold)["trials_completed"] == 0
    assert "cold-start trials that did not complete" in failed_checks(cold)
    wait_for(lambda: '"desired": 2' in started.ctl("status"), timeout=30)  # the rollback scaled it back


@pytest.mark.parametrize("stack", STACKS)
def test_backups_that_hold_nothing_fail_the_restore_drill(stack, request, tmp_path):
    started = request.getfixturevalue(stack)("--store-bug", "empty-backups")
    restore = execute("restore-drill", str(started.profile), {"restore_timeout_s": "5"}, results=tmp_path / "results")
    assert restore.verdict == "FAIL"
    assert "integrity of restored sessions" in failed_checks(restore)


# Platforms that lie (the router and replica pool's --lie): the answer says the work was done and
# it was not. No drill may PASS on them; each says why.
NOT_LANDED = "fault did not take effect"


@pytest.mark.parametrize("stack", STACKS)
def test_a_kill_and_a_disaster_that_do_nothing_are_errors_not_passes(stack, request, tmp_path):
    started = request.getfixturevalue(stack)("--lie=noop-kill", "--lie=noop-destroy")
    ha = execute("ha-replica-loss", str(started.profile), {**HA, "duration_s": "12", "kill_after_s": "2",
                                                           "max_recovery_s": "5"}, results=tmp_path / "results")
    assert ha.verdict == "ERROR" and ha.summary["reason"].startswith(NOT_LANDED), ha.explain()
    restore = execute("restore-drill", str(started.profile), {"restore_timeout_s": "5"}, results=tmp_path / "results")
    assert restore.verdict == "ERROR" and restore.summary["reason"].startswith(NOT_LANDED), restore.explain()


def test_a_slow_restart_and_a_restore_that_restores_nothing_fail_on_langchain(langchain_stack, tmp_path):
    started = langchain_stack("--lie=slow-restart", "--lie=noop-restore")
    # 20 s, not the 9 s the rule needs (2 s + 5 s + 2 s): with the other test worker busy, a 14 s
    # run saw only 4.3 s of load after the kill where 12 s were planned.
    ha = execute("ha-replica-loss", str(started.profile), {**HA, "duration_s": "20", "kill_after_s": "2",
                                                           "max_recovery_s": "5"}, results=tmp_path / "results")
    assert ha.verdict == "FAIL", ha.explain()
    recovery = next(c for c in ha.summary["checks"] if c["name"] == "service recovery time")
    assert not recovery["passed"] and recovery["value"] >= 7.0, ha.explain()
    restore = execute("restore-drill", str(started.profile), {"restore_timeout_s": "5"}, results=tmp_path / "results")
    assert restore.verdict == "FAIL", restore.explain()
    assert "the store did not serve again within restore_timeout_s" in restore.explain()


# -- an OpenAI-compatible chat API: the LiteLLM proxy with mock responses --------------------------

LITELLM = "litellm[proxy]==1.108.7"  # in its own virtual environment: its pins are not drillbook's
MASTER_KEY = "sk-drillbook-test-master-key-0123456789"


@pytest.fixture(scope="session")
def litellm_venv() -> Path:
    return cached_venv(LITELLM)


@pytest.fixture(scope="module")
def litellm_proxy(litellm_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One LiteLLM proxy with mock responses for this module's tests (it keeps no state)."""
    config = tmp_path_factory.mktemp("litellm") / "litellm.yaml"
    config.write_text(yaml.safe_dump({
        "model_list": [{"model_name": "default", "litellm_params": {"model": "openai/mock", "mock_response": "Noted."}}],
        "general_settings": {"master_key": MASTER_KEY}}))
    port = free_port()
    process = subprocess.Popen([str(litellm_venv / "bin" / "litellm"), "--config", str(config), "--host", "127.0.0.1",
                                "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}, start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def live() -> bool:
        import urllib.request

        try:
            with urllib.request.urlopen(f"{url}/health/liveliness", timeout=2):
                return True
        except OSError:
            return False

    try:
        wait_for(live, timeout=120)
        yield url
    finally:
        stop_process(process)


def test_the_openai_chat_preset_speaks_to_the_litellm_proxy_and_says_delivery_is_not_verifiable(
        litellm_proxy, tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_KEY", MASTER_KEY)
    monkeypatch.setenv("DRILLBOOK_STATE_DIR", str(tmp_path / "state"))
    profile = tmp_path / "llm.yaml"
    profile.write_text(yaml.safe_dump({"name": "llm", "kind": "commands", "preset": "openai-chat",
                                       "workload": {"gateway_url": litellm_proxy},
                                       "tenants": {"team-a": {"key_env": "LLM_KEY"}}}))
    checked = drillbook("target", "check", str(profile), "-r", "ha-replica-loss")
    out = checked.stdout
    assert "reply 'Noted.'" in out and "the API opens none" in out, out  # the turn went through the preset
    assert "delivery.verifier none" in out and checked.returncode == 1  # and nothing can be read back
    assert "no agent kill command" in out

    # Load through the preset: every turn acknowledged, and the audit refuses to call it delivered.
    loaded = drillbook("load", "agent-sessions", "--target", str(profile), "--users", "2", "--duration", "3s",
                       "--out", str(tmp_path / "load"))
    summary = yaml.safe_load((tmp_path / "load" / "load-summary.json").read_text())
    # a count, not a rate: a busy machine served 2 requests in the 3 s (6 or more when quiet)
    assert summary["requests"] >= 2 and summary["failures"] == 0
    assert summary["delivery"]["verifiable"] is False and summary["delivery"]["delivered"] is False
    assert loaded.returncode != 0 and "delivery not verifiable" in loaded.stderr


# -- an Agno AgentOS service, with the LiteLLM proxy as its model gateway --------------------------

AGNO_OS = "agno[os,openai,sqlite]==3.1.10"


@pytest.fixture(scope="session")
def agno_venv() -> Path:
    return cached_venv(AGNO_OS)


@pytest.fixture
def agno_stack(platform: Platform, agno_venv: Path, litellm_proxy: str) -> Callable[..., Stack]:
    """The worked example targets/examples/agno: AgentOS (app.py, its launch script) as two uvicorn
    replicas over one sessions database, calling the LiteLLM proxy for its model."""
    def start(*platform_flags: str, memory: bool = False) -> Stack:
        db = "memory" if memory else "{db}"
        replica = (f"env AGENT_DB={db} MODEL_URL={litellm_proxy} MODEL_KEY={MASTER_KEY} "
                   f"{agno_venv / 'bin' / 'python'} -m uvicorn app:app --host 127.0.0.1 --port {{port}} "
                   f"--app-dir {AGNO} --log-level warning")
        return platform.start(AGNO, replica, *platform_flags)

    return start


def test_target_check_tests_the_agno_contract_end_to_end(agno_stack):
    stack = agno_stack()
    checked = drillbook("target", "check", str(stack.profile))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "the check turn found by content" in checked.stdout and "reply 'Noted.'" in checked.stdout


def test_ha_cold_start_and_restore_pass_on_an_agno_service_with_only_a_profile(agno_stack, tmp_path):
    stack = agno_stack()
    # The profile allows 12 s to recover and 10 s for a cold start (an AgentOS replica starts in 3-7 s
    # on a quiet machine). With the other test worker running the real node's game day beside it, a
    # replacement took 26.4 s from its predecessor's exit to ready (CI run 16, the pool's own log),
    # and the kill landed about 11 s into the load. 45 s is the margin; 60 s of load leaves it and the
    # 2 s hold after a late landing.
    ha = execute("ha-replica-loss", str(stack.profile), {**HA, "duration_s": "60", "max_recovery_s": "45"},
                 results=tmp_path / "results")
    assert ha.verdict == "PASS", ha.explain()
    found = values(ha)
    assert found["acknowledged_turns"] > 20 and found["lost_turns"] == 0 and len(found["killed_replicas"]) == 1

    cold = execute("cold-start", str(stack.profile), {"trials": "2", "slo_p95_s": "45"}, results=tmp_path / "results")
    assert cold.verdict == "PASS", cold.explain()
    assert values(cold)["first_turns_acknowledged"] == 2 and values(cold)["first_turns_lost"] == 0

    restore = execute("restore-drill", str(stack.profile), {}, results=tmp_path / "results")
    assert restore.verdict == "PASS", restore.explain()
    assert values(restore)["integrity"] == 1.0


def test_agno_sessions_in_each_replicas_memory_fail_ha_for_lost_turns(agno_stack, tmp_path):
    stack = agno_stack(memory=True)
    ha = execute("ha-replica-loss", str(stack.profile), HA, results=tmp_path / "results")
    assert ha.verdict == "FAIL"
    assert values(ha)["lost_turns"] > 0
    assert "acknowledged turns lost" in failed_checks(ha)


# LangServe streams a turn as Server-Sent Events (/chat/stream: a metadata event, the reply's
# chunks, an `end` event) with no event ids and nothing to resume by: what a stack without resume
# gets from session-continuity is a FAIL that says so, never a PASS and never an ERROR.
LANGSERVE_STREAMS = {"start": "/chat/stream", "resume": None, "token": "content", "ack": None, "ack_event": "end",
                     "failed": None, "stored_reply": None, "stored_input": "data.content"}


def test_langserve_streams_cannot_be_resumed_and_session_continuity_says_so(langchain_stack, tmp_path):
    started = langchain_stack()
    spec = yaml.safe_load(started.profile.read_text())
    spec["api"]["streams"] = LANGSERVE_STREAMS
    profile = tmp_path / "langserve-streams.yaml"
    profile.write_text(yaml.safe_dump(spec, sort_keys=False))
    # max_tokens 2: each dropped stream is dropped after its first chunk, inside the fake model's reply.
    executed = execute("session-continuity", str(profile), {"users": "4", "duration_s": "5", "kill_count": "0",
                                                           "max_tokens": "2"}, results=tmp_path / "results")
    assert executed.verdict == "FAIL", executed.explain()
    resume = next(c for c in executed.summary["checks"] if c["name"] == "resume latency p95")
    assert "cannot resume" in resume["note"], resume
    found = executed.summary["metrics"]
    assert found["streams_dropped"] > 0 and found["orphaned_turns"] == found["streams_dropped"]
    assert found["acknowledged_turns"] > 0  # the streams no one dropped ended: the stack streams, it cannot resume
