"""Chaos experiments against the real sandbox: verdicts from journals, rollbacks always, signals,
a killed runner, bad variables, safeguards, and the kubernetes allow-list."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from drillbook import jsonl
from drillbook.chaos import run
from drillbook.chaos.runner import parameters_for, sandbox_configuration
from drillbook.errors import ConfigError
from drillbook.scenarios import REGISTRY, experiment_parameters
from tests.helpers import REPOSITORY, wait_for

pytestmark = pytest.mark.integration
EXPERIMENTS = sorted(s.experiment for s in REGISTRY.values() if s.experiment)


def drillbook(*args: str, state: Path, timeout: float = 180, **extra_env: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DRILLBOOK_STATE_DIR": str(state), "COLUMNS": "200", **extra_env}
    return subprocess.run([sys.executable, "-m", "drillbook", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def replicas(handle) -> dict[str, int]:
    with handle.control() as control:
        return {name: s["desired"] for name, s in control.status()["services"].items()}


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_passes_chaos_validate_and_matches_its_parameters(name, tmp_path):
    path = REPOSITORY / "experiments" / f"{name}.yaml"
    result = subprocess.run([sys.executable, "-m", "chaostoolkit", "--no-version-check", "--log-file",
                             str(tmp_path / "chaos.log"), "validate", str(path)], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    configuration = yaml.safe_load(path.read_text())["configuration"]
    assert configuration == experiment_parameters(name)().model_dump(), \
        "YAML defaults and the typed parameters disagree"


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_passes_on_a_healthy_sandbox(name, sandbox_factory, tmp_path):
    handle = sandbox_factory(tokens_per_second=200)
    before = replicas(handle)
    quick = {"ha-replica-loss": {"traffic_s": 3.0}, "noisy-neighbour": {"baseline_s": 2.0, "burst_s": 3.0},
             "cold-start": {"idle_s": 0.5}, "restore-drill": {}, "session-continuity": {}}[name]
    result = run(name, sandbox_configuration(handle.state_dir), tmp_path / "run", quick)
    assert result.verdict == "PASS", result.reasons
    assert replicas(handle) == before  # the rollback put the target back
    kinds = [e["kind"] for e in result.timeline]
    assert "rollbacks_finished" in kinds and kinds[-1] == "experiment_finished"
    journal = json.loads((tmp_path / "run" / "journal.json").read_text())
    assert "drillbook_context" not in journal["experiment"]["configuration"]  # the run's context is not evidence
    if name == "ha-replica-loss":
        assert result.measurements["traffic_fault"]["acknowledged"] > 0
    if name == "restore-drill":
        restore = result.measurements["restore"]
        assert restore["integrity"] == 1.0 and restore["rpo_turns"] == 6 and restore["rto_s"] > 0
    if name == "cold-start":
        assert result.measurements["cold_start"][0]["first_token_s"] > 0
    if name == "session-continuity":  # the kill was seen to land, and the tier is back at its size
        assert result.measurements["fault_injected"]["landed"]["landed"] and result.measurements["fault_injected"]["replicas"]


def test_ha_fails_when_the_gateway_does_not_retry(sandbox_factory, tmp_path):
    handle = sandbox_factory(tokens_per_second=100, defects=["no-retries"])
    result = run("ha-replica-loss", sandbox_configuration(handle.state_dir), tmp_path / "run", {"traffic_s": 3.0})
    assert result.verdict == "FAIL", result.reasons
    assert result.measurements["traffic_fault"]["failed"] > 0
    assert any("client-errors-within-budget" in reason for reason in result.reasons)


def test_noisy_neighbour_fails_without_fair_sharing(sandbox_factory, tmp_path):
    handle = sandbox_factory(tokens_per_second=200, defects=["no-fair-sharing"])
    # The experiment's own windows (3 s, 5 s): with the aggressor still starting in the first of a
    # 3 s burst, a busy machine measured 2.5 times the baseline here, under the 3.0 budget.
    result = run("noisy-neighbour", sandbox_configuration(handle.state_dir), tmp_path / "run", {})
    assert result.verdict == "FAIL", result.reasons
    assert result.measurements["isolation"]["victim_p95_ratio"] > 3.0
    assert replicas(handle)["aggressor"] == 0


def test_restore_drill_fails_without_backups_and_the_rollback_leaves_a_working_store(sandbox_factory, tmp_path):
    handle = sandbox_factory(tokens_per_second=0, defects=["no-backups"])
    result = run("restore-drill", sandbox_configuration(handle.state_dir), tmp_path / "run",
                 {"restore_timeout_s": 3.0})
    assert result.verdict == "FAIL", result.reasons
    assert result.measurements["restore"]["healthy"] is False
    with handle.control() as control:
        assert control.store()["healthy"] is True
        assert any(e["kind"] == "store_recreated" for e in control.events())


def plain_chaos_run(experiment: dict, tmp_path: Path) -> tuple[dict, Path]:
    """Chaos Toolkit's own `chaos run` on an experiment with drillbook's target configuration."""
    run_dir = tmp_path / "plain-run"
    path = tmp_path / "experiment.json"
    path.write_text(json.dumps(experiment))
    journal = tmp_path / "journal.json"
    subprocess.run([sys.executable, "-m", "chaostoolkit", "--no-version-check", "--log-file", str(tmp_path / "chaos.log"),
                    "run", "--rollback-strategy", "always", "--journal-path", str(journal), str(path)],
                   capture_output=True, text=True, timeout=300, cwd=tmp_path, stdin=subprocess.DEVNULL)
    return json.loads(journal.read_text()), run_dir


def test_plain_chaos_run_judges_the_method_like_drillbook_does(sandbox_factory, tmp_path):
    """The shipped experiments declare the drillbook control, so Chaos Toolkit's own runner follows
    the same phases: with no backups the after-hypothesis judges the failed restore, not a fresh
    look at a healthy (re-created) store."""
    handle = sandbox_factory(tokens_per_second=0, defects=["no-backups"])
    experiment = yaml.safe_load((REPOSITORY / "experiments" / "restore-drill.yaml").read_text())
    experiment["configuration"] = {**experiment["configuration"], "restore_timeout_s": 3.0,
                                   **sandbox_configuration(handle.state_dir), "drillbook_run_id": "plain",
                                   "drillbook_run_dir": str(tmp_path / "plain-run")}
    journal, run_dir = plain_chaos_run(experiment, tmp_path)
    assert journal["deviated"] is True, journal["status"]
    measurements = json.loads((run_dir / "measurements.json").read_text())
    assert measurements["restore"]["healthy"] is False
    with handle.control() as control:
        assert control.store()["healthy"] is True  # the rollback left a working store


def test_a_judging_probe_fails_after_a_method_that_measured_nothing(sandbox_factory, tmp_path):
    """An experiment of the user's own (no drillbook control declared: the runner adds it) whose
    method drives no traffic: the after-hypothesis has no fault window to judge and fails, where
    a fresh sample of a healthy platform would have passed it."""
    handle = sandbox_factory(tokens_per_second=0)
    experiment = yaml.safe_load((REPOSITORY / "experiments" / "ha-replica-loss.yaml").read_text())
    experiment.pop("controls")
    experiment["method"] = [{"type": "probe", "name": "replicas-ready-only",
                             "provider": {"type": "python", "module": "drillbook.chaos.probes",
                                          "func": "all_replicas_ready", "arguments": {"service": "agent"}}}]
    path = tmp_path / "own-experiment.yaml"
    path.write_text(yaml.safe_dump(experiment))
    result = run(str(path), sandbox_configuration(handle.state_dir), tmp_path / "run")
    assert result.verdict == "FAIL", result.reasons
    assert any("client-errors-within-budget" in reason for reason in result.reasons)
    assert "traffic_fault" not in result.measurements
    assert json.loads((tmp_path / "run" / "traffic-sample.json").read_text())["acknowledged"] > 0  # the before-sample


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_mid_experiment_rolls_back_within_seconds(sandbox_factory, tmp_path, signum):
    handle = sandbox_factory(tokens_per_second=0)
    before = replicas(handle)
    out = tmp_path / "run"
    env = {**os.environ, "DRILLBOOK_STATE_DIR": str(handle.state_dir)}
    runner = subprocess.Popen([sys.executable, "-m", "drillbook", "chaos", "run", "cold-start", "--var", "idle_s=60",
                               "--out", str(out)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: replicas(handle)["agent"] == 0 and replicas(handle)["model"] == 0, timeout=60)
    runner.send_signal(signum)
    stdout, stderr = runner.communicate(timeout=60)
    assert runner.returncode == 128 + signum, stderr
    assert stderr.strip().splitlines()[-1] == (f"drillbook: interrupted by {signum.name}; experiment cold-start rolled back; "
                                               f"journal {out / 'journal.json'}")
    wait_for(lambda: replicas(handle) == before, timeout=10)
    journal = json.loads((out / "journal.json").read_text())
    assert journal["status"] == "interrupted"
    assert [r["activity"]["name"] for r in journal["rollbacks"]] == ["undo-injected-faults"]
    assert journal["rollbacks"][0]["status"] == "succeeded"


def test_a_killed_runner_is_cleaned_up_by_drillbook_rollback(sandbox_factory, tmp_path):
    handle = sandbox_factory(tokens_per_second=0)
    before = replicas(handle)
    env = {**os.environ, "DRILLBOOK_STATE_DIR": str(handle.state_dir)}
    runner = subprocess.Popen([sys.executable, "-m", "drillbook", "chaos", "run", "cold-start", "--var", "idle_s=60",
                               "--out", str(tmp_path / "run")], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    wait_for(lambda: replicas(handle)["agent"] == 0 and replicas(handle)["model"] == 0, timeout=60)
    runner.kill()
    runner.wait(10)
    time.sleep(0.5)
    assert replicas(handle)["agent"] == 0  # nothing rolled back by itself: the runner is dead
    # What the killed runner saw is kept, as it happened: its timeline up to the method's actions.
    (kept,) = [path for path in (tmp_path / "run").rglob("timeline.jsonl")]
    kinds = [event["kind"] for event in jsonl.read(kept)]
    assert kinds[0] == "experiment_started" and "activity_started" in kinds and "experiment_finished" not in kinds
    first = drillbook("rollback", "--target", "sandbox", state=handle.state_dir)
    assert first.returncode == 0, first.stderr
    assert "2 faults undone" in first.stdout
    assert replicas(handle) == before
    second = drillbook("rollback", "--target", "sandbox", state=handle.state_dir)
    assert second.returncode == 0 and "nothing to roll back" in second.stdout


def test_a_safeguard_aborts_the_fault_and_the_rollback_still_runs(sandbox_factory, tmp_path):
    handle = sandbox_factory(tokens_per_second=0)
    before = replicas(handle)
    agent_available = {"type": "probe", "name": "agent-tier-available", "frequency": 0.2, "tolerance": True,
                       "provider": {"type": "python", "module": "drillbook.chaos.probes", "func": "service_available",
                                    "arguments": {"service": "agent", "timeout_s": 0}}}
    started = time.monotonic()
    result = run("cold-start", sandbox_configuration(handle.state_dir), tmp_path / "run", {"idle_s": 30.0},
                 safeguards=[agent_available])
    assert result.verdict == "ABORTED"
    assert time.monotonic() - started < 25  # stopped long before the 30 s idle was over
    assert result.journal["rollbacks"][0]["status"] == "succeeded"
    assert replicas(handle) == before


@pytest.mark.parametrize(("variables", "message"), [
    ({"kill_count": -1}, "invalid kill_count"),
    ({"kill_count": "many"}, "invalid kill_count"),
    ({"blast_radius": 3}, "unknown parameter 'blast_radius'"),
    ({"kill_signal": "SIGHUP"}, "invalid kill_signal"),
])
def test_bad_variables_are_refused_before_any_action(sandbox_factory, tmp_path, variables, message):
    handle = sandbox_factory(tokens_per_second=0)
    with pytest.raises(ConfigError, match=message):
        run("ha-replica-loss", sandbox_configuration(handle.state_dir), tmp_path / "run", variables)
    assert not (handle.state_dir / "faults.jsonl").exists()
    with handle.control() as control:
        assert not any(e["kind"] == "replica_killed" for e in control.events())
    args = [f"--var={k}={v}" for k, v in variables.items()]
    cli = drillbook("chaos", "run", "ha-replica-loss", *args, state=handle.state_dir)
    assert cli.returncode == 2 and message in cli.stderr and len(cli.stderr.strip().splitlines()) == 1


def _cluster_profile(folder: Path, context: str, namespace: str) -> Path:
    path = folder / f"cluster-{context}-{namespace}.yaml"
    path.write_text(yaml.safe_dump({
        "name": "cluster", "kind": "kubernetes",
        "kubernetes": {"context": context, "namespace": namespace, "allowed_contexts": ["drillbook-test"],
                       "allowed_namespaces": ["agents"]},
        "workload": {"gateway_url": "http://127.0.0.1:9"}, "tenants": {"t": {"key_env": "DRILLBOOK_TEST_KEY"}}}))
    return path


def test_the_allow_list_refuses_a_context_without_contacting_any_server(tmp_path):
    from drillbook.profile import AgentApi, KubernetesSpec, LoadedProfile, TargetProfile, Workload
    from drillbook.targets.kubernetes import KubernetesTarget

    kubeconfig = tmp_path / "kubeconfig"
    # Were anything contacted, it would be this address, where nothing listens.
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "production",
        "clusters": [{"name": "prod", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "admin", "user": {"token": "t"}}],
        "contexts": [{"name": "production", "context": {"cluster": "prod", "user": "admin"}}]}))
    env_state = tmp_path / "state"
    cli = drillbook("chaos", "run", "ha-replica-loss", "--target", str(_cluster_profile(tmp_path, "production", "agents")),
                    state=env_state, KUBECONFIG=str(kubeconfig), DRILLBOOK_TEST_KEY="k")
    assert cli.returncode == 2 and "context 'production' is not in allowed_contexts" in cli.stderr, cli.stderr
    namespace = drillbook("chaos", "run", "ha-replica-loss", "--target",
                          str(_cluster_profile(tmp_path, "drillbook-test", "kube-system")), "--dry-run",
                          state=env_state, DRILLBOOK_TEST_KEY="k")
    assert namespace.returncode == 2 and "namespace 'kube-system' is not in allowed_namespaces" in namespace.stderr
    # The target checks again, whatever built the profile (an unvalidated one here).
    spec = TargetProfile.model_construct(
        name="cluster", kind="kubernetes", api=AgentApi(), workload=Workload(gateway_url="http://127.0.0.1:9"),
        kubernetes=KubernetesSpec.model_construct(context="production", namespace="agents",
                                                  allowed_contexts=["drillbook-test"], allowed_namespaces=["agents"]))
    with pytest.raises(ConfigError, match="not on the allow-list"):
        KubernetesTarget(LoadedProfile(spec, tmp_path / "cluster.yaml"))
    assert not (env_state.parent / "ledgers").exists()


def test_dry_run_prints_the_plan_and_touches_nothing(sandbox_factory):
    handle = sandbox_factory(tokens_per_second=0)
    result = drillbook("chaos", "run", "ha-replica-loss", "--dry-run", "--var", "kill_count=2", state=handle.state_dir)
    assert result.returncode == 0, result.stderr
    assert "kill_replicas({'service': 'agent', 'count': 2, 'signal': 'SIGKILL'})" in result.stdout
    with handle.control() as control:
        assert not any(e["kind"] == "replica_killed" for e in control.events())


def test_parameters_merge_defaults_and_variables():
    experiment = {"configuration": {"kill_count": 1, "service": "agent", "drillbook_target": "x"}}
    merged = parameters_for(experiment, "ha-replica-loss", {"kill_count": 2})
    assert merged["kill_count"] == 2 and merged["service"] == "agent"
