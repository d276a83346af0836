"""drillbook on someone else's agent service, through a target profile alone.

tinyagent (tests/workloads/tinyagent.py) is not the reference platform: other paths, another
auth header, its own store and digest chain, no streaming, and a read-back that is not
drillbook's contract, so its delivery audit goes through a verifier plug-in registered in the
``drillbook.verifiers`` entry point group (a real dist-info folder on the Python path). The HA
and cold-start runbooks must pass on it, and fail when it is started with a bug that loses
acknowledged turns.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import pytest
import yaml

from drillbook.errors import ConfigError
from drillbook.evidence import verify_path
from drillbook.execute import execute
from drillbook.runbook import recorded
from tests.helpers import free_port, install_distribution, wait_for

pytestmark = pytest.mark.integration
WORKLOADS = Path(__file__).resolve().parents[1] / "workloads"
TINYAGENT = WORKLOADS / "tinyagent.py"


@dataclass
class TinyAgent:
    profile: Path
    admin: str
    gateway: str
    process: subprocess.Popen
    data: Path

    def truth(self) -> list[dict]:
        """What the pool itself logged: each replica's death and readiness, with the time."""
        path = self.data / "truth.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def status(self) -> dict:
        """The pool's counts (desired, ready, replicas; its ready replicas' ids are left out)."""
        with urllib.request.urlopen(f"{self.admin}/status", timeout=5) as response:
            return {k: v for k, v in json.loads(response.read()).items() if k != "ids"}


def install_plugins(folder: Path) -> Path:
    """tinyagent's verifier and its target kind, as installed distributions would be."""
    install_distribution(folder, "tinyagent-verifier", [WORKLOADS / "tinyagent_verifier.py"],
                         {"drillbook.verifiers": {"tinyagent": "tinyagent_verifier:TinyAgentVerifier"}})
    return install_distribution(folder, "tinyagent-target", [WORKLOADS / "tinyagent_target.py"],
                                {"drillbook.targets": {"tinyagent-admin": "tinyagent_target:tinyagent_admin"}})


def write_profile(path: Path, port: int, admin: str, verifier: str = "tinyagent", admin_token: str = "") -> Path:
    ctl = [sys.executable, str(TINYAGENT), "ctl", "--admin", admin, *([f"--token={admin_token}"] if admin_token else [])]

    def command(*args: str) -> str:
        return " ".join([*ctl, *args])

    path.write_text(yaml.safe_dump({
        "name": "tinyagent", "kind": "commands",
        "description": "a small agent service that is not the reference platform",
        "workload": {
            "gateway_url": f"http://127.0.0.1:{port}",
            "agent": {"commands": {"status": command("status"), "kill": command("kill", "{count}", "{signal}"),
                                   "scale": command("scale", "{replicas}")}},
            "store": {"backup": command("backup"), "restore": command("restore", "{backup}"),
                      "destroy": command("destroy"), "recreate": command("recreate"), "healthy": command("healthy")},
        },
        "tenants": {"red": {"key_env": "TINY_RED_KEY"}, "blue": {"key_env": "TINY_BLUE_KEY"}},
        "api": {"auth_header": "X-Api-Key", "auth_scheme": "", "open_session": "/api/conversations",
                "session_id_field": "id", "turn": "/api/conversations/{session}/messages", "input_field": "text",
                "max_tokens_field": None, "idempotency_header": "X-Request-Id", "ack_seq_field": "index",
                "ack_digest_field": "digest", "stream_query": None},
        "delivery": {"verifier": verifier},
        "slos": {"ha-replica-loss": {"max_recovery_s": 9.0}},
    }, sort_keys=False))
    return path


@pytest.fixture
def tinyagent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., TinyAgent]]:
    """Start tinyagent (optionally with a bug); its keys and verifier plug-in are in this process's
    environment and Python path, and in the notebook kernels' (through PYTHONPATH)."""
    plugins = install_plugins(tmp_path / "plugins")
    monkeypatch.syspath_prepend(str(plugins))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(plugins), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("TINY_RED_KEY", "red-secret-1")
    monkeypatch.setenv("TINY_BLUE_KEY", "blue-secret-2")
    monkeypatch.setenv("DRILLBOOK_STATE_DIR", str(tmp_path / "state"))
    started: list[subprocess.Popen] = []

    def start(bug: str = "none", verifier: str = "tinyagent", lies: tuple[str, ...] = (),
              admin_token: str = "") -> TinyAgent:
        port, admin_port = free_port(), free_port()
        data = tmp_path / f"tinyagent-{len(started)}"
        process = subprocess.Popen(
            [sys.executable, str(TINYAGENT), "serve", "--port", str(port), "--admin-port", str(admin_port),
             "--data", str(data), "--replicas", "2", "--bug", bug, *(f"--lie={lie}" for lie in lies)],
            env={**os.environ, "TINYAGENT_KEYS": "red=red-secret-1,blue=blue-secret-2",
                 **({"TINYAGENT_ADMIN_TOKEN": admin_token} if admin_token else {})}, start_new_session=True)
        started.append(process)
        admin = f"http://127.0.0.1:{admin_port}"
        agent = TinyAgent(write_profile(tmp_path / f"tinyagent-{len(started)}.yaml", port, admin, verifier,
                                        admin_token), admin,
                          f"http://127.0.0.1:{port}", process, data)

        def healthy() -> bool:
            try:
                status = agent.status()
            except OSError:
                return False
            return status["ready"] == status["desired"] == 2

        wait_for(healthy, timeout=30)
        return agent

    yield start
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(5)


def values(bundle: Path) -> dict:
    return recorded(bundle / "runbook.ipynb")


HA = {"users": "6", "duration_s": "14.0", "kill_after_s": "3.0", "think_time_s": "0.1"}


def test_ha_runbook_passes_on_a_workload_known_only_by_its_profile(tinyagent, tmp_path):
    agent = tinyagent()
    executed = execute("ha-replica-loss", str(agent.profile), HA, results=tmp_path / "results")
    assert executed.verdict == "PASS", executed.explain()
    found = values(executed.bundle)["values"]
    assert found["lost_turns"] == 0 and found["duplicated_turns"] == 0
    assert found["acknowledged_turns"] > 20 and len(found["killed_replicas"]) == 1
    assert found["replicas_recovered_s"] is not None
    # The profile's SLO replaced the notebook's default; the run's evidence says which profile.
    assert json.loads((executed.bundle / "manifest.json").read_text())["parameters"]["max_recovery_s"] == 9.0
    assert "red-secret-1" not in (executed.bundle / "runbook.ipynb").read_text()
    assert (executed.bundle / "target-profile.yaml").exists()
    assert verify_path(tmp_path / "results").ok
    assert agent.status() == {"desired": 2, "ready": 2, "replicas": 2}  # put back as it was


def test_ha_runbook_fails_when_the_workload_loses_acknowledged_turns(tinyagent, tmp_path):
    agent = tinyagent(bug="lose-first-turn")
    executed = execute("ha-replica-loss", str(agent.profile), HA, results=tmp_path / "results")
    assert executed.verdict == "FAIL", executed.explain()
    found = values(executed.bundle)["values"]
    assert found["lost_turns"] >= 6  # every session's first turn, at least
    failed = {c["name"] for c in executed.summary["checks"] if not c["passed"]}
    assert "acknowledged turns lost" in failed


def test_cold_start_runbook_passes_and_fails_on_the_same_workload_kind(tinyagent, tmp_path):
    healthy = tinyagent()
    executed = execute("cold-start", str(healthy.profile), {"trials": "2", "idle_s": "0.2"},
                       results=tmp_path / "results")
    assert executed.verdict == "PASS", executed.explain()
    found = values(executed.bundle)["values"]
    assert found["trials_completed"] == 2 and found["first_turns_lost"] == 0
    assert found["cold_start_p95_s"] >= 0.25  # at least a worker's start-up
    assert healthy.status() == {"desired": 2, "ready": 2, "replicas": 2}

    buggy = tinyagent(bug="lose-first-turn")
    executed = execute("cold-start", str(buggy.profile), {"trials": "1", "idle_s": "0.2"},
                       results=tmp_path / "results")
    assert executed.verdict == "FAIL", executed.explain()
    assert values(executed.bundle)["values"]["first_turns_lost"] == 1


def test_a_workload_without_read_back_is_not_verifiable_and_cannot_pass(tinyagent, tmp_path):
    agent = tinyagent(verifier="none")
    executed = execute("cold-start", str(agent.profile), {"trials": "1", "idle_s": "0.1"},
                       results=tmp_path / "results")
    assert executed.verdict == "FAIL", executed.explain()
    found = values(executed.bundle)["values"]
    assert found["delivery_verifiable"] is False and found["first_turns_lost"] is None
    check = next(c for c in executed.summary["checks"] if c["name"] == "first turns from zero lost")
    assert check["value"] is None and not check["passed"]


def test_a_verifier_that_is_not_installed_is_refused_by_name(tinyagent, tmp_path):
    from drillbook.delivery import verifier_for
    from drillbook.profile import load_profile

    agent = tinyagent()
    profile = write_profile(tmp_path / "other.yaml", 9, agent.admin, verifier="no-such-verifier")
    with pytest.raises(ConfigError, match="no drillbook.verifiers entry point named 'no-such-verifier'"):
        verifier_for(load_profile(str(profile)), agent.gateway, {})
    assert type(verifier_for(load_profile(str(agent.profile)), agent.gateway, {})).__name__ == "TinyAgentVerifier"


def test_the_delivery_audit_reads_tinyagent_through_its_plugin(tinyagent):
    from drillbook.delivery import Receipt, audit_delivery, verifier_for
    from drillbook.profile import load_profile

    agent = tinyagent(bug="lose-first-turn")
    keys = {"red": "red-secret-1"}
    headers = {"X-Api-Key": "red-secret-1", "Content-Type": "application/json"}

    def post(path: str, body: dict, extra: dict | None = None) -> dict:
        request = urllib.request.Request(agent.gateway + path, data=json.dumps(body).encode(),
                                         headers={**headers, **(extra or {})}, method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    conversation = post("/api/conversations", {})["id"]
    receipts = []
    for index in range(3):
        ack = post(f"/api/conversations/{conversation}/messages", {"text": f"m{index}"}, {"X-Request-Id": f"r{index}"})
        receipts.append(Receipt(conversation, "red", ack["index"], ack["digest"], f"r{index}", acked_at=time.time()))
    verifier = verifier_for(load_profile(str(agent.profile)), agent.gateway, keys)
    report = audit_delivery(receipts, verifier)
    # The first acknowledged message was never stored: lost (the next one took its place).
    assert report.verifiable and report.lost == 1 and not report.ok
    assert report.sessions[0].lost == [1]


def test_restore_drill_runs_the_profiles_store_commands(tinyagent, tmp_path):
    agent = tinyagent()
    executed = execute("restore-drill", str(agent.profile), results=tmp_path / "results")
    assert executed.verdict == "PASS", executed.explain()
    found = values(executed.bundle)["values"]
    assert found["backup_created"] is True and found["rpo_turns"] == 6 and found["integrity"] == 1.0
    backups = list((tmp_path / "tinyagent-0" / "backups").glob("*.sqlite"))
    assert len(backups) == 1  # made by the profile's backup command


def drillbook(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "drillbook", *args], env={**os.environ, "COLUMNS": "250"},
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def test_target_check_says_which_runbooks_can_run_and_why_not(tinyagent, tmp_path):
    from drillbook.access import check_target
    from drillbook.profile import load_profile

    agent = tinyagent()
    report = check_target(load_profile(str(agent.profile)))
    assert [f.subject for f in report.reachability] == ["gateway", "tenant red", "tenant blue"]
    assert all(f.ok for f in report.reachability), report.reachability
    # The contract end to end through the verifier plug-in: tinyagent stores the idempotency key.
    assert [f.subject for f in report.contract] == ["open session", "turn", "read back"]
    assert all(f.ok for f in report.contract), report.contract
    assert "found by idempotency_key" in report.contract[2].detail and "chain checked" in report.contract[2].detail
    assert {f.subject for f in report.readings} == {"agent status", "store healthy"}
    assert report.runbook("ha-replica-loss").ok and report.runbook("cold-start").ok
    assert report.runbook("restore-drill").ok
    assert report.unoffered == ["noisy-neighbour", "sandbox-claim-burst", "sandbox-isolation", "sandbox-loss",
                                "shed-noisy-tenant"] and report.ok
    cli = drillbook("target", "check", str(agent.profile))
    assert cli.returncode == 0 and "not offered" in cli.stdout and "key accepted" in cli.stdout, cli.stdout
    asked = drillbook("target", "check", str(agent.profile), "--runbook", "noisy-neighbour")
    assert asked.returncode == 1 and "no aggressor scale command" in asked.stdout, asked.stdout
    unknown = drillbook("target", "check", str(agent.profile), "--runbook", "nope")
    assert unknown.returncode == 2 and "invalid --runbook: unknown runbook 'nope'" in unknown.stderr

    # A wrong key and a kill command that does not exist: named, and nothing else is touched.
    spec = yaml.safe_load(agent.profile.read_text())
    spec["workload"]["agent"]["commands"]["kill"] = "./no-such-ops.sh kill {count}"
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump(spec))
    os.environ["TINY_BLUE_KEY"] = "not-the-key"
    before = agent.status()
    report = check_target(load_profile(str(broken)))
    assert next(f for f in report.reachability if f.subject == "tenant blue").detail == "key refused (HTTP 401)"
    assert not report.runbook("ha-replica-loss").ok
    assert "no-such-ops.sh does not exist" in report.runbook("ha-replica-loss").detail
    assert report.runbook("cold-start").ok
    assert agent.status() == before

    os.environ.pop("TINY_BLUE_KEY")
    missing = drillbook("target", "check", str(agent.profile))
    assert missing.returncode == 2
    assert missing.stderr.strip() == ("drillbook: tinyagent-1.yaml: invalid tenants.blue.key_env: environment variable "
                                      "TINY_BLUE_KEY is not set")


def test_a_target_kind_from_a_package_runs_the_ha_runbook_and_an_unknown_kind_is_named(tinyagent, tmp_path):
    # tinyagent's pool driven through its admin HTTP API by a kind drillbook does not ship
    # (tests/workloads/tinyagent_target.py, registered in the drillbook.targets entry-point group).
    agent = tinyagent()
    spec = yaml.safe_load(agent.profile.read_text())
    spec.update(name="tinyagent-admin", kind="tinyagent-admin", options={"admin_url": agent.admin})
    spec["workload"]["agent"] = {}
    profile = tmp_path / "tinyagent-admin.yaml"
    profile.write_text(yaml.safe_dump(spec))
    checked = drillbook("target", "check", str(profile), "--runbook", "ha-replica-loss")
    assert checked.returncode == 0 and "admin API answers" in checked.stdout, checked.stdout + checked.stderr
    executed = execute("ha-replica-loss", str(profile), HA, results=tmp_path / "results")
    assert executed.verdict == "PASS", executed.explain()
    found = values(executed.bundle)["values"]
    assert found["lost_turns"] == 0 and found["acknowledged_turns"] > 20 and len(found["killed_replicas"]) == 1
    assert [t for t in agent.truth() if t["event"] == "killed"], agent.truth()  # the pool itself saw the kill
    assert yaml.safe_load((executed.bundle / "target-profile.yaml").read_text())["kind"] == "tinyagent-admin"

    spec["kind"] = "tinyagent-nothing"
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text(yaml.safe_dump(spec))
    refused = drillbook("target", "check", str(unknown))
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.strip() == ("drillbook: unknown.yaml: invalid kind: unknown target kind 'tinyagent-nothing'; "
                                      "known: sandbox, kubernetes, commands, tinyagent-admin (a package adds a kind "
                                      "through the entry-point group drillbook.targets)")
    spec.update(kind="commands", workload={**spec["workload"], "agent": yaml.safe_load(agent.profile.read_text())[
        "workload"]["agent"]})
    unknown.write_text(yaml.safe_dump(spec))
    own = drillbook("target", "check", str(unknown))
    assert own.returncode == 2 and "options are read only by target kinds a package adds, not by kind commands" in own.stderr


def test_target_check_on_the_sandbox(sandbox):
    from drillbook.access import check_target
    from drillbook.profile import builtin_sandbox

    report = check_target(builtin_sandbox(), sandbox.state_dir)
    assert report.ok, report
    assert {f.subject for f in report.reachability} >= {"gateway", "tenant tenant-a", "tenant tenant-b"}
    assert all(f.ok for f in report.contract) and "found by idempotency_key" in report.contract[-1].detail


def test_a_kubernetes_api_that_does_not_answer_is_reported(tmp_path, monkeypatch):
    from drillbook.access import check_target
    from drillbook.profile import load_profile

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "drillbook-test",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{free_port()}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "drillbook-test", "context": {"cluster": "c", "user": "u"}}]}))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.setenv("DRILLBOOK_TEST_KEY", "k")
    with socket.socket() as listener:  # a gateway that accepts connections and never answers HTTP
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        profile = tmp_path / "cluster.yaml"
        profile.write_text(yaml.safe_dump({
            "name": "cluster", "kind": "kubernetes",
            "kubernetes": {"context": "drillbook-test", "namespace": "agents", "allowed_contexts": ["drillbook-test"],
                           "allowed_namespaces": ["agents"]},
            "workload": {"gateway_url": f"http://127.0.0.1:{listener.getsockname()[1]}"},
            "tenants": {"t": {"key_env": "DRILLBOOK_TEST_KEY"}}}))
        report = check_target(load_profile(str(profile)))
    api = next(f for f in report.reachability if f.subject == "kubernetes API")
    assert not api.ok and not report.ok


def test_the_profiles_own_locustfile_drives_the_load_and_drillbook_audits_it(tinyagent, tmp_path):
    agent = tinyagent()
    spec = yaml.safe_load(agent.profile.read_text())
    spec["load"] = {"locustfile": str(WORKLOADS / "tinyagent_locustfile.py")}
    own = tmp_path / "own-load.yaml"
    own.write_text(yaml.safe_dump(spec))
    result = drillbook("load", "agent-sessions", "--target", str(own), "--users", "3", "--duration", "3s",
                       "--out", str(tmp_path / "load"))
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "load" / "load-summary.json").read_text())
    assert summary["profile"] == "tinyagent_locustfile"
    assert summary["delivery"]["acknowledged"] > 10 and summary["delivery"]["delivered"] is True
    assert list((tmp_path / "load").glob("requests-*.csv")) and list((tmp_path / "load").glob("receipts-*.jsonl"))


def test_a_token_in_a_profiles_commands_does_its_work_and_stays_out_of_the_evidence(tinyagent, tmp_path):
    """The pool's admin changes need a token, written in the profile's commands as `--token=…`
    (as a platform's own CLI takes it): the drill works through it (a wrong one is refused), and
    no file of the bundle holds it."""
    token = "admin-token-5f0e9a77c1d3"
    agent = tinyagent(admin_token=token)
    refused = subprocess.run([sys.executable, str(TINYAGENT), "ctl", "--admin", agent.admin, "--token=wrong-token",
                              "backup"], capture_output=True, text=True, timeout=30)
    assert refused.returncode != 0  # the token is checked: a drill that PASSes below used it
    results = tmp_path / "results"
    run = drillbook("run", "restore-drill", "--target", str(agent.profile), "--results", str(results))
    assert run.returncode == 0, run.stdout + run.stderr
    (bundle,) = [p for p in results.iterdir() if p.is_dir()]
    files = [p for p in bundle.rglob("*") if p.is_file()]
    assert [p.name for p in files if token.encode() in p.read_bytes()] == []
    assert "--token=***REDACTED***" in (bundle / "target-profile.yaml").read_text()


def test_a_game_day_plan_names_the_profile(tinyagent, tmp_path):
    from drillbook.gameday import run_gameday

    agent = tinyagent()
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"name": "tiny", "target": str(agent.profile), "runbooks": [
        {"runbook": "cold-start", "parameters": {"trials": 1, "idle_s": 0.1}},
        {"runbook": "restore-drill"}]}))
    result = run_gameday(plan, tmp_path / "state", tmp_path / "results")
    assert result.passed, result.runs
    assert [verdict for _, verdict, _ in result.runs] == ["PASS", "PASS"]
    assert all("_tinyagent_" in bundle.name for _, _, bundle in result.runs)


def test_the_reference_preset_speaks_to_the_reference_platform_wherever_it_runs(sandbox, tmp_path, monkeypatch):
    """A profile naming only `preset: reference`, a gateway and keys reads the platform back
    through the reference verifier: the check turn found by its idempotency key, the chain checked."""
    from drillbook.access import check_target
    from drillbook.profile import load_profile

    keys = sandbox.tenant_keys
    for tenant, key in keys.items():
        monkeypatch.setenv(f"REF_{tenant.upper().replace('-', '_')}_KEY", key)
    profile = tmp_path / "reference.yaml"
    profile.write_text(yaml.safe_dump({
        "name": "reference-elsewhere", "kind": "commands", "preset": "reference",
        "workload": {"gateway_url": sandbox.gateway_url},
        "tenants": {t: {"key_env": f"REF_{t.upper().replace('-', '_')}_KEY"} for t in keys}}))
    report = check_target(load_profile(str(profile)))
    assert all(f.ok for f in report.contract), report.contract
    assert "found by idempotency_key" in report.contract[-1].detail and "chain checked" in report.contract[-1].detail
    assert "acknowledged: seq 1, digest" in report.contract[1].detail
