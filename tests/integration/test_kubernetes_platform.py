"""The reference platform on the test cluster, driven as the kubernetes target.

Gateway, agent and model server run as pods (the process kubelet runs each as the sandbox
service on its own loopback address); the gateway finds agent and model replicas through the
API (Endpoints) and its activator scales a Deployment from zero through the API. The HA and
cold-start runbooks run through a kubernetes target profile, exactly as on a real cluster.
"""

from __future__ import annotations

import socket
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from drillbook.config import SandboxConfig
from drillbook.execute import execute
from drillbook.runbook import recorded
from drillbook.sandbox.runtime import KubernetesDiscovery, Runtime
from tests.helpers import wait_for

pytestmark = pytest.mark.integration
IMAGE = "drillbook/reference-platform:0.1.0"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _deployment(name: str, service: str, replicas: int, runtime: Path, host_port: int | None = None) -> dict:
    port = {"name": "http", "containerPort": 8080, **({"hostPort": host_port} if host_port else {})}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {
                         "terminationGracePeriodSeconds": 5,
                         "containers": [{"name": name, "image": IMAGE, "args": [service], "ports": [port],
                                         "env": [{"name": "DRILLBOOK_RUNTIME", "value": str(runtime)}],
                                         "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"},
                                                            "periodSeconds": 1}}]}}}}


def _service(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}


@dataclass
class Platform:
    namespace: str
    profile: Path
    gateway_url: str
    runtime: Runtime


STORE_OPS = Path(__file__).resolve().parents[1] / "k8s" / "store_ops.py"


def store_commands(dsn: str, backups: Path) -> dict[str, str]:
    """The profile's workload.store: the platform team's script around pg_dump and pg_restore."""
    base = f"{sys.executable} {STORE_OPS} --dsn {dsn} --dir {backups}"
    return {"backup": f"{base} backup", "restore": f"{base} restore {{backup}}", "destroy": f"{base} destroy",
            "recreate": f"{base} recreate", "healthy": f"{base} healthy"}


@pytest.fixture
def k8s_platform(k8s_cluster, tmp_path, monkeypatch):
    """Start the reference platform in a fresh namespace; yields a factory taking SandboxConfig overrides
    (store="postgres" with a dsn puts the state store on PostgreSQL, with the profile's store commands)."""
    core, apps = client.CoreV1Api(k8s_cluster.api), client.AppsV1Api(k8s_cluster.api)
    monkeypatch.setenv("DRILLBOOK_STATE_DIR", str(tmp_path / "drillbook-state"))
    created: list[str] = []

    def start(**overrides: object) -> Platform:
        namespace = f"platform-{uuid.uuid4().hex[:6]}"
        core.create_namespace({"metadata": {"name": namespace}})
        created.append(namespace)
        gateway_port = _free_port()
        runtime = Runtime.create(SandboxConfig(**{"tokens_per_second": 200, **overrides}), tmp_path / namespace,
                                 gateway_port).model_copy(update={"kubernetes": KubernetesDiscovery(
                                     server=k8s_cluster.server, token=k8s_cluster.admin_token,
                                     ca_file=str(k8s_cluster.folder / "ca.crt"), namespace=namespace)})
        runtime.write()
        store = runtime.open_store()
        store.init_schema(True)
        store.close()
        for name in ("agent", "model-server"):
            core.create_namespaced_service(namespace, _service(name))
        for body in (_deployment("model-server", "model", 1, runtime.runtime_file),
                     _deployment("agent", "agent", 2, runtime.runtime_file),
                     _deployment("gateway", "gateway", 1, runtime.runtime_file, host_port=gateway_port)):
            apps.create_namespaced_deployment(namespace, body)
        for name, wanted in (("model-server", 1), ("agent", 2), ("gateway", 1)):
            wait_for(lambda: apps.read_namespaced_deployment(name, namespace).status.ready_replicas == wanted,
                     timeout=90)
        keys = {}
        for tenant, key in runtime.tenant_keys.items():
            variable = f"K8S_{tenant.upper().replace('-', '_')}_KEY"
            monkeypatch.setenv(variable, key)
            keys[tenant] = {"key_env": variable}
        profile = tmp_path / f"{namespace}.yaml"
        profile.write_text(yaml.safe_dump({
            "name": "test-cluster", "kind": "kubernetes",
            "description": "the reference platform on the test control plane",
            "kubernetes": {"context": "drillbook-test", "namespace": namespace, "allowed_contexts": ["drillbook-test"],
                           "allowed_namespaces": [namespace]},
            "workload": {"gateway_url": runtime.gateway_url,
                         "agent": {"deployment": "agent", "selector": "app=agent"},
                         "inference": {"deployment": "model-server", "selector": "app=model-server"},
                         **({"store": store_commands(str(runtime.config.dsn), tmp_path / f"{namespace}-backups")}
                            if runtime.config.store == "postgres" else {})},
            "tenants": keys, "delivery": {"verifier": "reference"}}))
        return Platform(namespace, profile, runtime.gateway_url, runtime)

    yield start
    for namespace in created:
        core.delete_namespace(namespace)
    wait_for(lambda: not any(p.namespace in created for p in k8s_cluster.kubelet.pods.values()), timeout=60)


def values(bundle: Path) -> dict:
    return recorded(bundle / "runbook.ipynb")["values"]


def ready(k8s_cluster, platform: Platform, name: str) -> int:
    return int(client.AppsV1Api(k8s_cluster.api).read_namespaced_deployment(name, platform.namespace)
               .status.ready_replicas or 0)


HA = {"users": "6", "duration_s": "14.0", "kill_after_s": "3.0", "think_time_s": "0.1", "max_recovery_s": "15.0"}


def test_ha_runbook_on_kubernetes_passes_and_the_replicaset_replaces_the_pod(k8s_cluster, k8s_platform, tmp_path):
    platform = k8s_platform()
    before = {p.metadata.name for p in client.CoreV1Api(k8s_cluster.api).list_namespaced_pod(
        platform.namespace, label_selector="app=agent").items}
    executed = execute("ha-replica-loss", str(platform.profile), HA, results=tmp_path / "results")
    assert executed.verdict == "PASS", executed.summary
    found = values(executed.bundle)
    assert found["lost_turns"] == 0 and found["acknowledged_turns"] > 20
    killed = found["killed_replicas"]
    assert len(killed) == 1 and killed[0] in before
    after = {p.metadata.name for p in client.CoreV1Api(k8s_cluster.api).list_namespaced_pod(
        platform.namespace, label_selector="app=agent").items}
    assert killed[0] not in after and len(after) == 2 and ready(k8s_cluster, platform, "agent") == 2
    assert k8s_cluster.kubelet.errors == []


def test_ha_runbook_on_kubernetes_fails_when_the_gateway_does_not_retry(k8s_cluster, k8s_platform, tmp_path):
    platform = k8s_platform(defects=["no-retries"])
    executed = execute("ha-replica-loss", str(platform.profile), {**HA, "users": "8", "think_time_s": "0.05"},
                       results=tmp_path / "results")
    assert executed.verdict == "FAIL", executed.summary
    assert values(executed.bundle)["error_rate_fault"] > 0


def test_cold_start_on_kubernetes_scales_from_zero_through_the_api(k8s_cluster, k8s_platform, tmp_path):
    platform = k8s_platform(model_load_delay_s=0.5)
    executed = execute("cold-start", str(platform.profile), {"trials": "2", "idle_s": "0.2"},
                       results=tmp_path / "results")
    assert executed.verdict == "PASS", executed.summary
    found = values(executed.bundle)
    assert found["trials_completed"] == 2 and found["first_turns_lost"] == 0
    assert found["cold_start_p95_s"] >= 0.5  # at least the model's load delay
    assert ready(k8s_cluster, platform, "agent") == 2 and ready(k8s_cluster, platform, "model-server") == 1


def test_restore_drill_on_kubernetes_runs_the_profiles_store_commands_on_postgresql(k8s_cluster, k8s_platform,
                                                                                   pg_dsn, tmp_path):
    platform = k8s_platform(store="postgres", dsn=pg_dsn)
    executed = execute("restore-drill", str(platform.profile), results=tmp_path / "results")
    assert executed.verdict == "PASS", executed.summary
    found = values(executed.bundle)
    assert found["backup_created"] is True and found["rpo_turns"] == 6 and found["integrity"] == 1.0
    assert len(list((tmp_path / f"{platform.namespace}-backups").glob("*.dump"))) == 1


def test_the_kubernetes_game_day_plan_on_the_test_cluster(k8s_cluster, k8s_platform, pg_dsn, tmp_path):
    from drillbook.config import project_root
    from drillbook.evidence import verify_path
    from drillbook.gameday import run_gameday

    platform = k8s_platform(store="postgres", dsn=pg_dsn)
    result = run_gameday(project_root() / "gamedays" / "kubernetes.yaml", tmp_path / "state", tmp_path / "results",
                         target=str(platform.profile))
    assert [(runbook, verdict) for runbook, verdict, _ in result.runs] == [
        ("ha-replica-loss", "PASS"), ("cold-start", "PASS"), ("restore-drill", "PASS")], result.runs
    assert all("_test-cluster_" in bundle.name for _, _, bundle in result.runs)
    assert verify_path(tmp_path / "results").ok
