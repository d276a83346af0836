"""Code sandboxes on the real reference platform: real bubblewrap namespaces and cgroups, the three
drills PASS on it, each defect FAILs its drill for its reason, a kill that kills nothing is an
ERROR, and no sandbox outlives its service or the platform (real signals)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from drillbook.evidence import verify_path
from drillbook.execute import execute
from drillbook.gameday import load_plan, plan_path, run_gameday
from drillbook.processes import start_ticks
from drillbook.sandbox import launcher
from drillbook.sandbox.isolation import bwrap_path
from tests.helpers import wait_for

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap (bwrap) not installed: apt-get install bubblewrap")]

QUICK_ISOLATION = {"cpu_s": "2", "neighbour_runs": "5", "memory_mib": "512", "processes": "128"}


def failed_checks(executed) -> list[str]:
    return [check["name"] for check in executed.summary["checks"] if not check["passed"]]


def tenant(handle, name: str) -> httpx.Client:
    return httpx.Client(base_url=handle.gateway_url, timeout=60,
                        headers={"Authorization": f"Bearer {handle.tenant_keys[name]}"})


def fleet(handle) -> dict:
    """The sandbox service's own list; an empty one while it restarts."""
    with handle.control() as control:
        replicas = [r for r in control.status()["services"]["codebox"]["replicas"] if r["ready"] and r["url"]]
    try:
        return httpx.get(f"{replicas[0]['url']}/internal/v1/sandboxes", timeout=10,
                         headers={"X-Drillbook-Internal-Token": handle.runtime.internal_token}).json()
    except (IndexError, httpx.HTTPError):
        return {"pool": {"size": None, "warm": 0}, "sandboxes": []}


def test_a_sandbox_is_walled_in_and_its_session_alone_may_use_it(sandbox_factory):
    handle = sandbox_factory(tokens_per_second=0, codebox_pool=2)
    gateway_port = handle.gateway_url.rsplit(":", 1)[1]
    with tenant(handle, "tenant-a") as alice, tenant(handle, "tenant-b") as bob:
        session = alice.post("/v1/sessions").json()["session_id"]
        assert alice.post(f"/v1/sessions/{session}/sandbox").status_code == 201
        code = ("import os, socket, json\n"
                "seen = {'uid': os.getuid(), 'root': sorted(os.listdir('/')), 'env': sorted(os.environ),\n"
                "        'pids': sorted(int(p) for p in os.listdir('/proc') if p.isdigit())}\n"
                "try:\n    open('/usr/x', 'w')\nexcept OSError as e:\n    seen['usr'] = e.errno\n"
                f"try:\n    socket.create_connection(('127.0.0.1', {gateway_port}), 1)\n    seen['gateway'] = 'reached'\n"
                "except OSError as e:\n    seen['gateway'] = e.errno\n"
                "open('kept.txt', 'w').write('mine')\nprint(json.dumps(seen))")
        ran = alice.post(f"/v1/sessions/{session}/sandbox/runs", json={"code": code}).json()
        seen = json.loads(ran["stdout"])
        assert seen["uid"] == 65534 and set(seen["env"]) <= {"HOME", "PATH", "PWD", "LC_CTYPE"}  # nothing of ours
        # /usr and its links, a fresh /proc and /dev, the init program, the workspace: nothing else
        assert set(seen["root"]) <= {"bin", "dev", "lib", "lib32", "lib64", "libx32", "opt", "proc", "sbin", "usr",
                                     "workspace"} and {"usr", "workspace", "proc"} <= set(seen["root"])
        assert seen["usr"] == 30 and seen["gateway"] == 111  # read-only root; the platform's port is not there
        assert max(seen["pids"]) < 10  # its own PID namespace
        # Another tenant, or no key, cannot touch the session's sandbox.
        assert bob.post(f"/v1/sessions/{session}/sandbox/runs", json={"code": "print(1)"}).status_code == 404
        assert httpx.post(f"{handle.gateway_url}/v1/sessions/{session}/sandbox").status_code == 401
        # The cgroup's memory limit holds: a hog is killed, and the sandbox serves the next run.
        hog = alice.post(f"/v1/sessions/{session}/sandbox/runs",
                         json={"code": "b = [bytearray(1 << 24) for _ in range(64)]"}).json()
        assert hog["exit_code"] == -9
        assert alice.post(f"/v1/sessions/{session}/sandbox/runs", json={"code": "print(open('kept.txt').read())"}
                          ).json()["stdout"] == "mine\n"


def test_a_turn_calls_the_code_tool_in_its_sessions_sandbox(sandbox_factory):
    handle = sandbox_factory(tokens_per_second=0, codebox_pool=1)
    with tenant(handle, "tenant-a") as alice:
        session = alice.post("/v1/sessions").json()["session_id"]
        ack = alice.post(f"/v1/sessions/{session}/turns", json={"input": "what is six sevens?",
                                                                  "code": "open('answer', 'w').write('42'); print(6 * 7)"},
                         headers={"Idempotency-Key": "t1"}).json()
        assert ack["output"].startswith("[code exit 0] 42\n"), ack
        again = alice.post(f"/v1/sessions/{session}/turns", json={"input": "what is six sevens?", "code": "print(0)"},
                           headers={"Idempotency-Key": "t1"}).json()
        assert again["replayed"] is True and again["output"] == ack["output"]  # the retry runs no code again
        stored = alice.get(f"/v1/sessions/{session}").json()["turns"]
        assert [t["output"] for t in stored] == [ack["output"]]
        # The tool ran in the session's own sandbox: its workspace has the file.
        ran = alice.post(f"/v1/sessions/{session}/sandbox/runs", json={"code": "print(open('answer').read())"}).json()
        assert ran["stdout"] == "42\n"
        failing = alice.post(f"/v1/sessions/{session}/turns", json={"input": "x", "code": "raise SystemExit(3)"}).json()
        assert failing["output"].startswith("[code exit 3]")
    assert [s["session"] for s in fleet(handle)["sandboxes"] if s["state"] == "claimed"] == [session]


def test_the_three_drills_pass_in_their_game_day_on_the_reference_platform(tmp_path):
    plan = plan_path("code-sandboxes")
    assert [r.runbook for r in load_plan(plan).runbooks] == ["sandbox-claim-burst", "sandbox-loss", "sandbox-isolation"]
    result = run_gameday(plan, tmp_path / "state", tmp_path / "results")
    assert result.passed, [(runbook, verdict, str(bundle)) for runbook, verdict, bundle in result.runs]
    bundles = {runbook: bundle for runbook, _, bundle in result.runs}
    burst = json.loads((bundles["sandbox-claim-burst"] / "summary.json").read_text())["metrics"]
    assert burst["claims"] == burst["pool_size"] + 1 and burst["claims_cold"] >= 1 and burst["claims_failed"] == 0
    assert burst["claim_p50_s"] <= burst["claim_p99_s"] and burst["pool_refill_s"] is not None
    loss = json.loads((bundles["sandbox-loss"] / "summary.json").read_text())["metrics"]
    assert loss["kills_landed"] == loss["kills_asked"] == 2 and loss["files_written"] == 9
    assert loss["files_lost"] == 0 and len(loss["recreate_s"]) == 1 + 3  # one sandbox, then the service's three
    assert loss["runs_cut_by_kills"] >= 2  # the runs in flight were cut: the kills landed mid-run
    isolation = json.loads((bundles["sandbox-isolation"] / "summary.json").read_text())["metrics"]
    assert isolation["escapes"] == [] and isolation["escape_attempts"] == isolation["escapes_refused"] >= 15
    assert isolation["isolation_reported"]["limits"] is True and isolation["not_enforced"] == []
    escapes = [json.loads(line) for line in (bundles["sandbox-isolation"] / "observations" / "escapes.jsonl")
               .read_text().splitlines()]
    assert {"gateway", "control API", "another tenant's sandbox", "platform secrets (runtime file)", "memory",
            "process count", "CPU"} <= {e["probe"] for e in escapes}
    assert verify_path(tmp_path / "results").ok


def test_code_that_runs_as_a_plain_subprocess_fails_isolation_naming_each_escape(sandbox_factory, tmp_path):
    handle = sandbox_factory(tokens_per_second=0, codebox_pool=3, defects=["no-isolation"])
    executed = execute("sandbox-isolation", overrides=QUICK_ISOLATION, results=tmp_path / "results",
                       sandbox_state=handle.state_dir)
    assert executed.verdict == "FAIL", executed.explain()
    failed = failed_checks(executed)
    for escape in ("gateway", "control API", "another tenant's sandbox", "platform secrets (runtime file)",
                   "another session's workspace", "the platform's state folder", "the platform's processes"):
        assert f"escape: {escape}" in failed, failed
    assert "escapes that worked" in failed and "escape: gateway" in executed.summary["reason"]


def test_claims_with_no_warm_pool_fail_the_burst_on_latency(sandbox_factory, tmp_path):
    handle = sandbox_factory(tokens_per_second=0, codebox_pool=10, defects=["no-warm-pool"])
    executed = execute("sandbox-claim-burst", overrides={"refill_timeout_s": "4"}, results=tmp_path / "results",
                       sandbox_state=handle.state_dir)
    assert executed.verdict == "FAIL", executed.explain()
    # 11 claims, each booting for 1 s, two at a time: the last waits six boots, whatever the machine does.
    assert {"claim latency p50", "claim latency p99", "pool refill"} <= set(failed_checks(executed))
    assert executed.summary["metrics"]["claims_cold"] == 11


def test_a_workspace_that_dies_with_its_sandbox_fails_the_loss_drill_for_its_files(sandbox_factory, tmp_path):
    handle = sandbox_factory(tokens_per_second=0, codebox_pool=4, defects=["workspace-lost"])
    executed = execute("sandbox-loss", overrides={"sessions": "2", "run_s": "3"}, results=tmp_path / "results",
                       sandbox_state=handle.state_dir)
    assert executed.verdict == "FAIL", executed.explain()
    assert failed_checks(executed) == ["files lost with their sandbox"]
    assert executed.summary["metrics"]["files_lost"] == 6


def test_a_sandbox_kill_that_kills_nothing_is_an_error_not_a_pass(sandbox_factory, tmp_path):
    handle = sandbox_factory(tokens_per_second=0, codebox_pool=4, defects=["noop-kill"])
    executed = execute("sandbox-loss", overrides={"sessions": "2", "run_s": "3"}, results=tmp_path / "results",
                       sandbox_state=handle.state_dir)
    assert executed.verdict == "ERROR", executed.explain()
    assert "2 of 2 kills were not seen to land" in executed.summary["reason"]


def live_sandboxes(folder: Path) -> list[int]:
    """Processes whose command line names the service's folder of running sandboxes."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if str(folder).encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_sandboxes_die_with_their_service_and_with_the_platform(sandbox_factory, signum):
    handle = sandbox_factory(tokens_per_second=0, codebox_pool=3)
    wait_for(lambda: fleet(handle)["pool"]["warm"] == 3, timeout=30)
    first = Path((handle.state_dir / "codebox" / "live-folder").read_text())
    pids = [s["pid"] for s in fleet(handle)["sandboxes"]]
    assert len(pids) == 3 and live_sandboxes(first)
    with handle.control() as control:
        (service,) = control.status()["services"]["codebox"]["replicas"]
    os.kill(service["pid"], signum)
    wait_for(lambda: all(start_ticks(pid) is None for pid in pids), timeout=15)
    wait_for(lambda: live_sandboxes(first) == [], timeout=15)
    # The supervisor starts the service again; its new pool fills, and the killed one's folder goes.
    wait_for(lambda: fleet(handle)["pool"]["warm"] == 3, timeout=30)
    second = Path((handle.state_dir / "codebox" / "live-folder").read_text())
    assert second != first and not first.exists()
    report = launcher.stop(handle.state_dir, handle=handle)
    assert launcher.leftover_processes(report) == []
    deadline = time.monotonic() + 15
    while live_sandboxes(second) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert live_sandboxes(second) == [] and not second.exists()


def own_sandboxes_profile(path: Path, handle, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A commands profile for a team's own sandbox service (here the reference platform's, reached
    through tests/workloads/codebox_ops.py): the drills see it only through the profile."""
    import sys

    import yaml

    ops = Path(__file__).parents[1] / "workloads" / "codebox_ops.py"

    def command(*args: str) -> str:
        return " ".join([sys.executable, str(ops), str(handle.state_dir), *args])

    for name, key in handle.tenant_keys.items():
        monkeypatch.setenv(f"OWN_{name.upper().replace('-', '_')}_KEY", key)
    gateway = handle.gateway_url.removeprefix("http://")
    control = json.loads((handle.state_dir / "sandbox.json").read_text())["control_url"].removeprefix("http://")
    path.write_text(yaml.safe_dump({
        "name": "own-sandboxes", "kind": "commands",
        "workload": {"gateway_url": handle.gateway_url, "sandboxes": {
            "fleet": command("fleet"), "kill": command("kill", "{sandbox}"), "alive": command("alive", "{sandbox}"),
            "kill_service": command("kill-service"),
            "escape_targets": [{"name": "gateway", "kind": "tcp", "address": gateway},
                               {"name": "control API", "kind": "tcp", "address": control},
                               {"name": "platform secrets (runtime file)", "kind": "read",
                                "address": str(handle.state_dir / "runtime.json")},
                               {"name": "the platform's state folder", "kind": "write",
                                "address": str(handle.state_dir)}]}},
        "tenants": {name: {"key_env": f"OWN_{name.upper().replace('-', '_')}_KEY"} for name in handle.tenant_keys},
    }, sort_keys=False))
    return path


def test_a_teams_own_sandbox_service_is_drilled_through_its_profile(sandbox_factory, tmp_path, monkeypatch):
    handle = sandbox_factory(tokens_per_second=0, codebox_pool=4)
    profile = own_sandboxes_profile(tmp_path / "own.yaml", handle, monkeypatch)
    loss = execute("sandbox-loss", target=str(profile), overrides={"sessions": "2", "run_s": "3"},
                   results=tmp_path / "results")
    assert loss.verdict == "PASS", loss.explain()
    assert loss.summary["metrics"]["kills_landed"] == 2 and loss.summary["metrics"]["files_lost"] == 0
    isolated = execute("sandbox-isolation", target=str(profile), overrides=QUICK_ISOLATION,
                       results=tmp_path / "results")
    assert isolated.verdict == "PASS", isolated.explain()
    # the profile's four targets, the other tenant's sandbox, and the five built in
    assert isolated.summary["metrics"]["escape_attempts"] == 4 + 1 + 5


def test_a_teams_sandbox_kill_that_kills_nothing_is_an_error_through_its_profile(sandbox_factory, tmp_path,
                                                                                 monkeypatch):
    handle = sandbox_factory(tokens_per_second=0, codebox_pool=4, defects=["noop-kill"])
    profile = own_sandboxes_profile(tmp_path / "own.yaml", handle, monkeypatch)
    executed = execute("sandbox-loss", target=str(profile), overrides={"sessions": "2", "run_s": "3",
                                                                       "kill_service": "false"},
                       results=tmp_path / "results")
    assert executed.verdict == "ERROR", executed.explain()
    assert "1 of 1 kills were not seen to land" in executed.summary["reason"]
