"""The reference platform on the test cluster, driven as the kubernetes target: the HA and
cold-start runbooks, the restore drill on PostgreSQL and the game-day plan, through a kubernetes
target profile exactly as on a real cluster (tests/k8s/platform.py builds the platform)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from drillbook.execute import execute
from drillbook.runbook import recorded
from tests.helpers import REPOSITORY, fresh_database, wait_for
from tests.k8s.platform import Platform, start_platform

pytestmark = pytest.mark.integration


@pytest.fixture
def k8s_platform(k8s_cluster, tmp_path, monkeypatch):
    """Start the reference platform in a fresh namespace; yields a factory taking SandboxConfig overrides
    (store="postgres" with a dsn puts the state store on PostgreSQL, with the profile's store commands)."""
    monkeypatch.setenv("DRILLBOOK_STATE_DIR", str(tmp_path / "drillbook-state"))
    created: list[str] = []

    def start(**overrides: object) -> Platform:
        platform = start_platform(k8s_cluster, k8s_cluster.api, tmp_path, **overrides)
        created.append(platform.namespace)
        for variable, key in platform.key_env.items():
            monkeypatch.setenv(variable, key)
        return platform

    yield start
    remove_platforms(k8s_cluster, created)


def remove_platforms(k8s_cluster, namespaces: list[str]) -> None:
    """Delete each platform's namespaces and wait until the node runs none of their pods."""
    core = client.CoreV1Api(k8s_cluster.api)
    for namespace in namespaces:
        core.delete_namespace(namespace)
        core.delete_namespace(f"{namespace}-tenant-b")
    wait_for(lambda: not any(p.namespace in namespaces for p in k8s_cluster.kubelet.pods.values()), timeout=60)


def values(bundle: Path) -> dict:
    return recorded(bundle / "runbook.ipynb")["values"]


def fault_injected(bundle: Path) -> dict:
    """What the kill action measured: the landing, the readings, the replicas watched."""
    found = sorted((bundle / "chaos").glob("*-ha-replica-loss/measurements.json"))
    return json.loads(found[0].read_text())["fault_injected"]


def ready(k8s_cluster, platform: Platform, name: str) -> int:
    return int(client.AppsV1Api(k8s_cluster.api).read_namespaced_deployment(name, platform.namespace)
               .status.ready_replicas or 0)


HA = {"users": "6", "duration_s": "20.0", "kill_after_s": "3.0", "think_time_s": "0.1", "max_recovery_s": "15.0"}


def test_ha_runbook_on_kubernetes_passes_and_the_replicaset_replaces_the_pod(k8s_cluster, k8s_platform, tmp_path):
    platform = k8s_platform()
    before = {p.metadata.name for p in client.CoreV1Api(k8s_cluster.api).list_namespaced_pod(
        platform.namespace, label_selector="app=agent").items}
    executed = execute("ha-replica-loss", str(platform.profile), HA, results=tmp_path / "results")
    assert executed.verdict == "PASS", executed.explain()
    found = values(executed.bundle)
    assert found["lost_turns"] == 0 and found["acknowledged_turns"] > 20
    killed = found["killed_replicas"]
    assert len(killed) == 1 and killed[0] in before
    # The force deletion (SIGKILL) was seen where the pod served, not only in the API.
    assert "stopped answering at its address" in fault_injected(executed.bundle)["landed"]["seen"]
    after = {p.metadata.name for p in client.CoreV1Api(k8s_cluster.api).list_namespaced_pod(
        platform.namespace, label_selector="app=agent").items}
    assert killed[0] not in after and len(after) == 2 and ready(k8s_cluster, platform, "agent") == 2
    assert k8s_cluster.kubelet.errors == []


@pytest.mark.parametrize("signal, lie, verdict", [("SIGTERM", None, "PASS"), ("SIGTERM", "noop-kill", "ERROR"),
                                                   ("SIGKILL", "noop-kill", "ERROR")])
def test_a_kill_lands_when_the_node_stops_the_pod_not_when_the_api_was_asked(k8s_cluster, k8s_platform, tmp_path,
                                                                            signal, lie, verdict):
    # With SIGTERM the pod is deleted gracefully: the API only records the request, and the
    # node stops the container. With SIGKILL it is force-deleted: the pod leaves the API at once,
    # whatever the node does. A kubelet that lies (keeps the process serving; a graceful
    # deletion's pod stays Ready) must leave the kill unseen: ERROR, never a PASS on a
    # replacement that merely joined. The force deletion is seen only at the pod's own address,
    # which still answers. (An honest SIGKILL PASSes in the HA test above.)
    platform = k8s_platform()
    k8s_cluster.kubelet.lie = lie
    try:
        executed = execute("ha-replica-loss", str(platform.profile), {**HA, "kill_signal": signal},
                           results=tmp_path / "results")
    finally:
        k8s_cluster.kubelet.lie = None
    assert executed.verdict == verdict, executed.explain()
    fault = fault_injected(executed.bundle)
    assert len(fault["watched"]) == 2  # both agent pods answered at their addresses before the kill
    if lie:
        assert executed.summary["reason"].startswith(f"fault did not take effect: {signal}"), executed.explain()
        assert "1 agent replica" in executed.summary["reason"]
        if signal == "SIGKILL":
            assert "still answered" in executed.summary["reason"], executed.explain()
    else:
        assert "stopped answering at its address" in fault["landed"]["seen"], fault["landed"]
    assert k8s_cluster.kubelet.errors == []


def test_ha_runbook_on_kubernetes_fails_when_the_gateway_does_not_retry(k8s_cluster, k8s_platform, tmp_path):
    # Turns of 4 s (16 tokens at 4 a second) and no think time: a force-deleted pod leaves the
    # gateway's discovery at once, so only turns already in flight to it can fail, and only if its
    # process dies before they end. With 80 ms turns a loaded node's kubelet stopped the process
    # after every one of them had ended, and the defect PASSed.
    platform = k8s_platform(defects=["no-retries"], tokens_per_second=4)
    executed = execute("ha-replica-loss", str(platform.profile), {**HA, "users": "10", "think_time_s": "0.0"},
                       results=tmp_path / "results")
    assert executed.verdict == "FAIL", executed.explain()
    assert values(executed.bundle)["error_rate_fault"] > 0


@dataclass
class GameDay:
    """The kubernetes game-day plan, run once on one platform: its runs serve the game day's test and
    the tests of cold start, noisy-neighbour and the restore drill (each ran on a platform of its own
    before, 64 s of CI's time that showed nothing the game day's runs do not)."""

    platform: Platform
    folder: Path
    result: Any

    def run(self, runbook: str) -> Path:
        (bundle,) = [bundle for name, _, bundle in self.result.runs if name == runbook]
        return bundle


@pytest.fixture(scope="module")
def game_day(k8s_cluster, pg_server, tmp_path_factory) -> Iterator[GameDay]:
    """gamedays/kubernetes.yaml with its target set to a platform whose state store is on
    PostgreSQL (the profile's store commands) and whose model takes 0.5 s to load."""
    from drillbook.gameday import run_gameday

    folder = tmp_path_factory.mktemp("k8s-game-day")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DRILLBOOK_STATE_DIR", str(folder / "drillbook-state"))
        platform = start_platform(k8s_cluster, k8s_cluster.api, folder, store="postgres",
                                  dsn=fresh_database(pg_server), model_load_delay_s=0.5)
        try:
            for variable, key in platform.key_env.items():
                patch.setenv(variable, key)
            result = run_gameday(REPOSITORY / "gamedays" / "kubernetes.yaml", folder / "state", folder / "results",
                                 target=str(platform.profile))
            yield GameDay(platform, folder, result)
        finally:
            remove_platforms(k8s_cluster, [platform.namespace])


def test_cold_start_on_kubernetes_scales_from_zero_through_the_api(k8s_cluster, game_day):
    bundle = game_day.run("cold-start")
    found = values(bundle)
    assert found["trials_completed"] == int(json.loads((bundle / "manifest.json").read_text())["parameters"]["trials"])
    assert found["trials_completed"] >= 2 and found["first_turns_lost"] == 0
    assert found["cold_start_p95_s"] >= 0.5  # at least the model's load delay
    assert found["phase_means_s"]["model_load"] >= 0.4  # phases from the pods' own times
    assert ready(k8s_cluster, game_day.platform, "agent") == 2
    assert ready(k8s_cluster, game_day.platform, "model-server") == 1


def test_noisy_neighbour_on_kubernetes_two_tenant_namespaces_share_the_inference_tier(k8s_cluster, game_day):
    found = values(game_day.run("noisy-neighbour"))
    assert found["victim_p95_ratio"] <= 3.0 and found["slot_share"]["tenant-b"] > found["slot_share"]["tenant-a"]
    apps = client.AppsV1Api(k8s_cluster.api)
    assert apps.read_namespaced_deployment("aggressor", f"{game_day.platform.namespace}-tenant-b").spec.replicas == 0


def test_restore_drill_on_kubernetes_runs_the_profiles_store_commands_on_postgresql(game_day):
    found = values(game_day.run("restore-drill"))
    assert found["backup_created"] is True and found["rpo_turns"] == 6 and found["integrity"] == 1.0
    assert len(list((game_day.folder / f"{game_day.platform.namespace}-backups").glob("*.dump"))) == 1


def test_session_continuity_on_kubernetes_resumes_streams_past_a_deleted_pod_on_postgresql(k8s_cluster, game_day):
    found = values(game_day.run("session-continuity"))
    # The agent pod was deleted mid-turn: streams broke, were resumed on the other pod, and the
    # turns it was streaming ended failed; not a token lost or repeated, none orphaned.
    assert found["killed_replicas"] and found["streams_hit_by_kill"] >= 1
    assert found["tokens_checked"] > 0 and found["tokens_lost"] == found["tokens_duplicated"] == 0
    assert found["orphaned_turns"] == 0 and found["failed_turns"] == found["failed_turns_at_kill"]
    assert ready(k8s_cluster, game_day.platform, "agent") == 2


@pytest.mark.parametrize("lie, verdict, reason", [
    ("noop-destroy", "ERROR", "fault did not take effect"),
    ("noop-restore", "FAIL", "the store did not serve again within restore_timeout_s")])
def test_a_store_procedure_that_lies_is_not_a_pass_on_kubernetes(k8s_cluster, k8s_platform, pg_dsn, tmp_path,
                                                                lie, verdict, reason):
    # The profile's store commands answer success and do nothing: a disaster that destroys
    # nothing, or a restore that restores nothing. Neither may pass the restore drill.
    platform = k8s_platform(store="postgres", dsn=pg_dsn, store_lie=lie)
    executed = execute("restore-drill", str(platform.profile), {"restore_timeout_s": "3"},
                       results=tmp_path / "results")
    assert executed.verdict == verdict and reason in executed.summary["reason"], executed.explain()
    assert values(executed.bundle)["backup_created"] is True


def test_the_kubernetes_game_day_plan_on_the_test_cluster(game_day):
    from drillbook.evidence import verify_path

    assert [(runbook, verdict) for runbook, verdict, _ in game_day.result.runs] == [
        ("ha-replica-loss", "PASS"), ("noisy-neighbour", "PASS"), ("cold-start", "PASS"),
        ("restore-drill", "PASS"), ("session-continuity", "PASS")], game_day.result.runs
    assert all("_test-cluster_" in bundle.name for _, _, bundle in game_day.result.runs)
    assert verify_path(game_day.folder / "results").ok
