"""The kubernetes target against a real kube-apiserver (the test control plane and its process
kubelet): each chaostoolkit-kubernetes action drillbook uses, observed through the API; the
allow-list; and `target check` asking the API what a service account may do."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from drillbook.access import check_target
from drillbook.errors import ConfigError
from drillbook.profile import load_profile
from drillbook.targets import target_for
from tests.helpers import REPOSITORY, wait_for

pytestmark = pytest.mark.integration


def deployment(name: str, replicas: int, image: str = "drillbook/test-http:1") -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {
                         "terminationGracePeriodSeconds": 5,
                         "containers": [{"name": name, "image": image, "ports": [{"containerPort": 8080}],
                                         "readinessProbe": {"httpGet": {"path": "/", "port": 8080},
                                                            "periodSeconds": 1}}]}}}}


@pytest.fixture
def namespace(k8s_cluster):
    """A fresh namespace with an agent Deployment of two process-backed replicas, ready."""
    core, apps = client.CoreV1Api(k8s_cluster.api), client.AppsV1Api(k8s_cluster.api)
    name = f"agents-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    wait_for(lambda: _default_service_account(core, name), timeout=30)
    apps.create_namespaced_deployment(name, deployment("agent", 2))
    wait_for(lambda: apps.read_namespaced_deployment("agent", name).status.ready_replicas == 2, timeout=60)
    yield name
    core.delete_namespace(name)


def _default_service_account(core, namespace: str) -> bool:
    try:
        core.read_namespaced_service_account("default", namespace)
        return True
    except client.ApiException:
        return False


def profile_for(folder: Path, namespace: str, context: str = "drillbook-test") -> Path:
    path = folder / f"cluster-{namespace}.yaml"
    path.write_text(yaml.safe_dump({
        "name": "test-cluster", "kind": "kubernetes",
        "kubernetes": {"context": context, "namespace": namespace, "allowed_contexts": [context],
                       "allowed_namespaces": [namespace]},
        "workload": {"gateway_url": "http://127.0.0.1:9", "agent": {"deployment": "agent", "selector": "app=agent"}},
        "tenants": {"t": {"key_env": "DRILLBOOK_TEST_KEY"}}}))
    return path


def pods(k8s_cluster, namespace: str) -> dict[str, object]:
    return {p.metadata.name: p for p in client.CoreV1Api(k8s_cluster.api).list_namespaced_pod(
        namespace, label_selector="app=agent").items if p.metadata.deletion_timestamp is None}


def test_the_control_plane_runs_pods_as_processes_and_restarts_them(k8s_cluster, namespace):
    nodes = client.CoreV1Api(k8s_cluster.api).list_node().items
    assert [n.metadata.name for n in nodes] == ["drillbook-node-1"]
    assert next(c.status for c in nodes[0].status.conditions if c.type == "Ready") == "True"
    running = pods(k8s_cluster, namespace)
    assert len(running) == 2 and all(p.status.phase == "Running" for p in running.values())
    victim = next(iter(running.values()))
    tracked = k8s_cluster.kubelet.pods[victim.metadata.uid]
    os.kill(tracked.process.pid, signal.SIGKILL)  # the container dies; restart policy Always

    def restarted() -> bool:
        pod = client.CoreV1Api(k8s_cluster.api).read_namespaced_pod(victim.metadata.name, namespace)
        status = pod.status.container_statuses[0]
        return status.restart_count == 1 and status.ready

    wait_for(restarted, timeout=30)
    assert k8s_cluster.kubelet.errors == []


def test_kill_replicas_deletes_pods_and_the_replicaset_replaces_them(k8s_cluster, namespace, tmp_path, monkeypatch):
    monkeypatch.setenv("DRILLBOOK_TEST_KEY", "k")
    target = target_for(load_profile(str(profile_for(tmp_path, namespace))))
    before = pods(k8s_cluster, namespace)
    killed = target.kill("agent", 1, "SIGKILL")
    assert len(killed) == 1 and killed[0] in before
    assert target.ready("agent") <= 1  # at once: the killed pod no longer counts, whatever the Deployment says
    wait_for(lambda: target.settled("agent"), timeout=60)
    after = pods(k8s_cluster, namespace)
    assert len(after) == 2 and killed[0] not in after  # replaced by a new pod, through the API
    assert target.ready("agent") == target.desired("agent") == 2


def test_scale_to_zero_and_back_through_the_api(k8s_cluster, namespace, tmp_path, monkeypatch):
    monkeypatch.setenv("DRILLBOOK_TEST_KEY", "k")
    target = target_for(load_profile(str(profile_for(tmp_path, namespace))))
    target.scale("agent", 0)
    wait_for(lambda: not pods(k8s_cluster, namespace) and target.settled("agent"), timeout=60)
    assert target.desired("agent") == 0
    scaled_up_at = time.time()
    target.scale("agent", 2)
    wait_for(lambda: target.settled("agent") and target.ready("agent") == 2, timeout=60)
    started = [float(p.metadata.annotations["drillbook.dev/started-at"]) for p in pods(k8s_cluster, namespace).values()]
    assert len(started) == 2 and all(t >= scaled_up_at for t in started)  # new processes, not the old ones


def test_a_context_off_the_allow_list_is_refused_before_any_call(k8s_cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("DRILLBOOK_TEST_KEY", "k")
    path = profile_for(tmp_path, "agents")
    spec = yaml.safe_load(path.read_text())
    spec["kubernetes"]["context"] = "production"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(ConfigError, match="context 'production' is not in allowed_contexts"):
        load_profile(str(path))


def test_target_check_says_cannot_run_where_a_permission_is_missing(k8s_cluster, namespace, tmp_path, monkeypatch):
    """A service account that may do everything the runbooks need except delete pods."""
    core = client.CoreV1Api(k8s_cluster.api)
    rbac = client.RbacAuthorizationV1Api(k8s_cluster.api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "limited"}})
    rules = [{"apiGroups": [""], "resources": ["pods", "events"], "verbs": ["get", "list", "watch"]},
             {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "patch"]},
             {"apiGroups": [""], "resources": ["resourcequotas"], "verbs": ["get"]},
             {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["create", "delete"]}]
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "limited"}, "rules": rules})
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "limited"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                                     "name": "limited"},
        "subjects": [{"kind": "ServiceAccount", "name": "limited", "namespace": namespace}]})

    def token() -> str | None:
        account = core.read_namespaced_service_account("limited", namespace)
        if not account.secrets:
            return None
        import base64

        secret = core.read_namespaced_secret(account.secrets[0].name, namespace)
        return base64.b64decode(secret.data["token"]).decode()

    limited = k8s_cluster.kubeconfig_for("limited", wait_for(token, timeout=30))
    monkeypatch.setenv("KUBECONFIG", str(limited))
    monkeypatch.setenv("DRILLBOOK_TEST_KEY", "k")
    with __import__("socket").socket() as gateway:  # something that accepts connections as the gateway
        gateway.bind(("127.0.0.1", 0))
        gateway.listen()
        path = profile_for(tmp_path, namespace)
        spec = yaml.safe_load(path.read_text())
        spec["workload"]["gateway_url"] = f"http://127.0.0.1:{gateway.getsockname()[1]}"
        spec["delivery"] = {"verifier": "readback"}
        path.write_text(yaml.safe_dump(spec))
        report = check_target(load_profile(str(path)))
        monkeypatch.setenv("KUBECONFIG", str(k8s_cluster.kubeconfig))  # the admin may do it all
        admin = check_target(load_profile(str(path)))
    # The gateway accepts connections and never answers: the contract fails, and says so per drill.
    assert [f.ok for f in report.contract] == [False] and not report.ok
    ha = report.runbook("ha-replica-loss")
    assert not ha.ok and ha.detail.startswith(f"not allowed: delete pods in {namespace}; contract: no tenant key")
    assert "not allowed" not in report.runbook("cold-start").detail and report.runbook("agent-latency-triage").ok
    # the aggressor defaults to Deployment aggressor, which this namespace lacks: the runbook cannot run
    noisy = report.runbook("noisy-neighbour")
    assert not noisy.ok and "not allowed" not in noisy.detail
    assert f"no deployment aggressor in {namespace} (workload.aggressor)" in noisy.detail
    assert report.runbook("shed-noisy-tenant").detail.startswith("no tenant names its namespace")
    assert "not allowed" not in admin.runbook("ha-replica-loss").detail


def test_shedding_a_tenant_on_kubernetes_lowers_its_namespace_quota_and_the_undo_restores_it(
        k8s_cluster, namespace, tmp_path, monkeypatch):
    from drillbook.execute import execute
    from drillbook.runbook import recorded

    core = client.CoreV1Api(k8s_cluster.api)
    tenant_ns = f"tenant-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": tenant_ns}})
    core.create_namespaced_resource_quota(tenant_ns, {"metadata": {"name": "inference"}, "spec": {"hard": {
        "pods": "10", "requests.nvidia.com/gpu": "1"}}})
    monkeypatch.setenv("DRILLBOOK_TEST_KEY", "k")
    monkeypatch.setenv("DRILLBOOK_STATE_DIR", str(tmp_path / "state"))
    path = profile_for(tmp_path, namespace)
    spec = yaml.safe_load(path.read_text())
    spec["tenants"] = {"noisy": {"key_env": "DRILLBOOK_TEST_KEY", "namespace": tenant_ns}}
    spec["kubernetes"]["allowed_namespaces"] = [namespace, tenant_ns]
    try:
        with __import__("socket").socket() as gateway:
            gateway.bind(("127.0.0.1", 0))
            gateway.listen()
            spec["workload"]["gateway_url"] = f"http://127.0.0.1:{gateway.getsockname()[1]}"
            path.write_text(yaml.safe_dump(spec))
            real = {"tenant": "noisy", "quota": "pods=2,requests.nvidia.com/gpu=0", "measure_s": "0",
                    "dry_run": "False", "confirm": "test-cluster", "incident": "INC-42"}
            shed = execute("shed-noisy-tenant", str(path), real, results=tmp_path / "results")
            hard = core.read_namespaced_resource_quota("inference", tenant_ns).spec.hard
            undo = execute("shed-noisy-tenant", str(path), {**real, "undo": "True"}, results=tmp_path / "results")
        assert shed.verdict == "PASS", shed.explain()
        assert hard == {"pods": "2", "requests.nvidia.com/gpu": "0"}
        assert recorded(shed.bundle / "runbook.ipynb")["values"]["limits_before"]["noisy"]["pods"] == "10"
        assert undo.verdict == "PASS", undo.explain()
        assert core.read_namespaced_resource_quota("inference", tenant_ns).spec.hard == {
            "pods": "10", "requests.nvidia.com/gpu": "1"}
    finally:
        core.delete_namespace(tenant_ns)


def test_the_deploy_manifests_apply_to_the_test_cluster_where_v1_20_serves_them(k8s_cluster):
    from kubernetes import utils

    from tests.unit.test_deploy import kustomized

    documents = kustomized(REPOSITORY / "deploy")
    newer = {("policy/v1", "PodDisruptionBudget"), ("batch/v1", "CronJob")}  # v1.20 serves only their betas
    ordered = sorted(documents, key=lambda d: d["kind"] != "Namespace")
    core, apps = client.CoreV1Api(k8s_cluster.api), client.AppsV1Api(k8s_cluster.api)
    try:
        for document in ordered:
            if (document["apiVersion"], document["kind"]) not in newer:
                utils.create_from_dict(k8s_cluster.api, document)
        for name, replicas in (("gateway", 2), ("agent", 2), ("model-server", 1), ("locust-worker", 4)):
            wait_for(lambda: apps.read_namespaced_deployment(name, "agents").status.ready_replicas == replicas,
                     timeout=60)
        quota = core.read_namespaced_resource_quota("inference", "agents")
        # The quota controller first publishes status.used with zeros, then recounts the pods.
        used = lambda: (core.read_namespaced_resource_quota("inference", "agents").status.used or {}).get(
            "requests.nvidia.com/gpu")
        wait_for(lambda: used() == "1", timeout=30)
        assert quota.spec.hard["requests.nvidia.com/gpu"] == "2"
        policies = client.NetworkingV1Api(k8s_cluster.api).list_network_policy_for_all_namespaces().items
        assert {p.metadata.namespace for p in policies} >= {"tenant-a", "tenant-b"}
    finally:
        for namespace in ("agents", "tenant-a", "tenant-b"):
            try:
                core.delete_namespace(namespace)
            except client.ApiException:
                pass


# A runner that scales the agent Deployment to zero as a drill does (the ledger written, the lease
# put on the Deployment, its heartbeat renewing it), then holds the fault until it is killed.
LOST_RUNNER = """
import sys, time
from drillbook.chaos.actions import scale_service
from drillbook.chaos.runner import target_configuration
from drillbook.profile import load_profile
configuration = {**target_configuration(load_profile(sys.argv[1])), "drillbook_run_id": "lost-run",
                 "drillbook_run_dir": sys.argv[2]}
scale_service("agent", 0, configuration=configuration)
print("scaled", flush=True)
time.sleep(600)
"""


def test_a_lost_runners_scale_is_undone_by_the_watchdog_from_the_records_in_the_cluster_alone(
        k8s_cluster, namespace, tmp_path):
    """The watchdog runs as its own process under the service account and rights of
    deploy/watchdog (list and patch Deployments, nothing else): while the runner lives it undoes
    nothing; once the runner is SIGKILLed and its ledger deleted, it scales the Deployment back
    from the lease on it, within the lease plus 60 s, and records the undo there."""
    import shutil
    import subprocess
    import sys

    from drillbook.kube_leases import LEASE_PREFIX, leases_on, undone_records
    from tests.unit.test_deploy import kustomized

    lease_s = 3.0
    core, rbac = client.CoreV1Api(k8s_cluster.api), client.RbacAuthorizationV1Api(k8s_cluster.api)
    apps = client.AppsV1Api(k8s_cluster.api)
    (role,) = [d for d in kustomized(REPOSITORY / "deploy" / "watchdog")
               if d["kind"] == "Role" and d["metadata"]["namespace"] == "agents"]
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "drillbook-watchdog"}})
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "drillbook-watchdog"}, "rules": role["rules"]})
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "drillbook-watchdog"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "drillbook-watchdog"},
        "subjects": [{"kind": "ServiceAccount", "name": "drillbook-watchdog", "namespace": namespace}]})

    def token() -> str | None:
        account = core.read_namespaced_service_account("drillbook-watchdog", namespace)
        if not account.secrets:
            return None
        import base64

        return base64.b64decode(core.read_namespaced_secret(account.secrets[0].name, namespace).data["token"]).decode()

    watchdog_kubeconfig = k8s_cluster.kubeconfig_for("drillbook-watchdog", wait_for(token, timeout=30))
    env = {**os.environ, "DRILLBOOK_TEST_KEY": "k", "DRILLBOOK_FAULT_LEASE_S": str(lease_s),
           "DRILLBOOK_STATE_DIR": str(tmp_path / "state"), "KUBECONFIG": str(k8s_cluster.kubeconfig)}
    runner = subprocess.Popen([sys.executable, "-c", LOST_RUNNER, str(profile_for(tmp_path, namespace)),
                               str(tmp_path / "run")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                              cwd=tmp_path)
    watchdog = subprocess.Popen([sys.executable, "-m", "drillbook", "watchdog", "--namespace", namespace,
                                 "--context", "drillbook-test", "--interval", "0.5"],
                                env={**env, "KUBECONFIG": str(watchdog_kubeconfig)}, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    try:
        assert runner.stdout.readline().strip() == "scaled", runner.stderr.read() if runner.poll() else ""
        agent = lambda: apps.read_namespaced_deployment("agent", namespace)  # noqa: E731
        (lease,) = leases_on(agent().metadata.annotations)
        assert lease["run"] == "lost-run" and lease["replicas"] == 2 and agent().spec.replicas == 0
        time.sleep(3 * lease_s)  # the runner lives and renews: nothing is undone
        assert agent().spec.replicas == 0 and undone_records(agent().metadata.annotations) == []
        assert leases_on(agent().metadata.annotations)[0]["expires_at"] > lease["expires_at"]  # renewed

        os.killpg(runner.pid, signal.SIGKILL)
        runner.wait(30)
        killed_at = time.time()
        shutil.rmtree(tmp_path / "ledgers")  # what the runner's machine held
        wait_for(lambda: agent().spec.replicas == 2 and agent().status.ready_replicas == 2, timeout=lease_s + 60)
        (undo,) = undone_records(agent().metadata.annotations)
        assert undo["run"] == "lost-run" and undo["undone"] == "scaled agent back to 2", undo
        assert killed_at - lease_s <= undo["lease_expired_at"] <= undo["t"]
        print(f"lease {lease_s:g} s: kill to the watchdog's undo {undo['t'] - killed_at:.2f} s, "
              f"to 2 ready {time.time() - killed_at:.2f} s")
        assert not [k for k in agent().metadata.annotations if k.startswith(LEASE_PREFIX)]
    finally:
        for process in (runner, watchdog):
            if process.poll() is None:
                process.kill()
                process.wait(30)
        said = watchdog.stdout.read()
        runner.stdout.close()
        runner.stderr.close()
        watchdog.stdout.close()
    assert "ran out; scaled back to 2" in said, said
    assert "cannot" not in said, said  # its rights were enough: list and patch


def test_a_halt_on_kubernetes_undoes_the_leased_scale_and_refuses_runs_until_lifted(k8s_cluster, namespace, tmp_path):
    """`drillbook halt` with only a kubeconfig: the halt is a ConfigMap in the target's namespace,
    the leased scale is undone before the command answers (recorded on the Deployment), a run is
    refused until `--lift`, and the live runner's heartbeat does not put the lease back."""
    import subprocess
    import sys

    from drillbook.kube_leases import HALT_CONFIGMAP, leases_on, undone_records

    env = {**os.environ, "DRILLBOOK_TEST_KEY": "k", "DRILLBOOK_FAULT_LEASE_S": "3",
           "DRILLBOOK_STATE_DIR": str(tmp_path / "state"), "KUBECONFIG": str(k8s_cluster.kubeconfig), "COLUMNS": "250"}
    profile = str(profile_for(tmp_path, namespace))
    core, apps = client.CoreV1Api(k8s_cluster.api), client.AppsV1Api(k8s_cluster.api)
    agent = lambda: apps.read_namespaced_deployment("agent", namespace)  # noqa: E731

    def drillbook(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "drillbook", *args], env=env, capture_output=True, text=True,
                              timeout=120)

    runner = subprocess.Popen([sys.executable, "-c", LOST_RUNNER, profile, str(tmp_path / "run")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
                              cwd=tmp_path)
    try:
        assert runner.stdout.readline().strip() == "scaled"
        assert agent().spec.replicas == 0 and len(leases_on(agent().metadata.annotations)) == 1
        halted = drillbook("halt", "--target", profile, "--operator", "alice", "--reason", "window closed")
        assert halted.returncode == 0, halted.stdout + halted.stderr
        assert "halted test-cluster by alice: window closed; 1 leased fault(s) undone" in halted.stdout
        assert agent().spec.replicas == 2  # before the command answered
        (undo,) = undone_records(agent().metadata.annotations)
        assert undo["kind"] == "fault_undone_by_halt" and undo["run"] == "lost-run"
        assert core.read_namespaced_config_map(HALT_CONFIGMAP, namespace).data["operator"] == "alice"
        time.sleep(2 * 3)  # two heartbeats of the live runner: the lease stays gone
        assert leases_on(agent().metadata.annotations) == []
        refused = drillbook("chaos", "run", "cold-start", "--target", profile, "--out", str(tmp_path / "refused"))
        assert refused.returncode == 2 and "target test-cluster is halted by alice since" in refused.stderr, \
            refused.stderr
        assert not (tmp_path / "refused").exists() and agent().spec.replicas == 2
        lifted = drillbook("halt", "--target", profile, "--lift")
        assert lifted.returncode == 0 and "halt lifted on test-cluster (halted by alice: window closed)" in lifted.stdout
        with pytest.raises(client.ApiException):
            core.read_namespaced_config_map(HALT_CONFIGMAP, namespace)
    finally:
        os.killpg(runner.pid, signal.SIGKILL)
        runner.wait(30)
        runner.stdout.close()
