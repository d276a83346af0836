"""Checks that run on the real node (node.py), inside its namespaces; each returns what it measured.

The workload is busybox httpd in real containers: a pod serves only if the kernel runs its
process in its own network namespace behind the CNI bridge, so "served" below is an HTTP answer
from the pod's IP, not a status field.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from kubernetes import client

from tests.helpers import poll
from tests.k8s.node import Node, answers

NAMESPACE = "default"
PORT = 8080


def _web(name: str, replicas: int) -> dict[str, Any]:
    container = {"name": "web", "image": "drillbook.local/busybox:1", "imagePullPolicy": "Never",
                 "command": ["/bin/busybox", "httpd", "-f", "-p", str(PORT), "-h", "/"],
                 "ports": [{"containerPort": PORT}],
                 "readinessProbe": {"tcpSocket": {"port": PORT}, "periodSeconds": 1}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"automountServiceAccountToken": False, "containers": [container],
                                           "terminationGracePeriodSeconds": 1}}}}


def serves(ip: str) -> bool:
    """An HTTP answer from the pod's own address (busybox serves its root file system)."""
    return answers(f"http://{ip}:{PORT}/bin/busybox")


def _ready_pods(app: str) -> list[client.V1Pod]:
    pods = client.CoreV1Api().list_namespaced_pod(NAMESPACE, label_selector=f"app={app}").items
    return [p for p in pods if p.metadata.deletion_timestamp is None and p.status.pod_ip
            and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]


def _serving(app: str, count: int) -> list[client.V1Pod]:
    return poll(f"{count} ready pod(s) of {app} answering HTTP",
                 lambda: (pods := _ready_pods(app)) and len(pods) == count and all(serves(p.status.pod_ip) for p in pods)
                 and pods)


def replica_loss(node: Node) -> dict[str, Any]:
    """Kill a replica's container process and delete another replica's pod; a bare pod deleted stays gone."""
    apps, core = client.AppsV1Api(), client.CoreV1Api()
    apps.create_namespaced_deployment(NAMESPACE, _web("web", 2))
    first, second = _serving("web", 2)
    pid = node.task_pid(first.status.container_statuses[0].container_id)
    os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    restarted = poll("the killed container restarted and serving",
                      lambda: (p := core.read_namespaced_pod(first.metadata.name, NAMESPACE)).status.container_statuses
                      and p.status.container_statuses[0].restart_count >= 1 and p.status.container_statuses[0].ready
                      and serves(p.status.pod_ip) and p)
    restart_s = time.monotonic() - killed_at
    core.delete_namespaced_pod(second.metadata.name, NAMESPACE, grace_period_seconds=0)
    deleted_at = time.monotonic()
    after = poll("a replacement pod serving",
                  lambda: (pods := _ready_pods("web")) and len(pods) == 2
                  and second.metadata.name not in {p.metadata.name for p in pods}
                  and all(serves(p.status.pod_ip) for p in pods) and pods)
    replace_s = time.monotonic() - deleted_at
    bare = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare", "labels": {"app": "bare"}},
            "spec": _web("bare", 1)["spec"]["template"]["spec"]}
    core.create_namespaced_pod(NAMESPACE, bare)
    _serving("bare", 1)
    core.delete_namespaced_pod("bare", NAMESPACE, grace_period_seconds=0)
    time.sleep(5)  # long enough for a controller to have replaced it, were there one
    return {"killed_pid": pid, "restart_count": restarted.status.container_statuses[0].restart_count,
            "restart_s": round(restart_s, 2), "same_pod_ip": restarted.status.pod_ip == first.status.pod_ip,
            "replaced": second.metadata.name not in {p.metadata.name for p in after},
            "replacement_ips": sorted(p.status.pod_ip for p in after), "replace_s": round(replace_s, 2),
            "bare_pods_after_delete": len(core.list_namespaced_pod(NAMESPACE, label_selector="app=bare").items)}


def scale_from_zero(node: Node) -> dict[str, Any]:
    """A Deployment at zero replicas scaled to one: no container before, a real one serving after."""
    apps = client.AppsV1Api()
    apps.create_namespaced_deployment(NAMESPACE, _web("cold", 0))
    time.sleep(2)
    before = [line for line in node.ctr("containers", "ls", "-q").splitlines() if line]
    asked = time.monotonic()
    apps.patch_namespaced_deployment_scale("cold", NAMESPACE, {"spec": {"replicas": 1}})
    (pod,) = _serving("cold", 1)
    first_answer_s = time.monotonic() - asked
    after = [line for line in node.ctr("containers", "ls", "-q").splitlines() if line]
    return {"containers_before": len(before), "containers_after": len(after), "first_answer_s": round(first_answer_s, 2),
            "pod_ip": pod.status.pod_ip}


def hold(node: Node) -> dict[str, Any]:
    """A serving pod, then wait to be killed (the signal tests): prints where its processes are."""
    client.AppsV1Api().create_namespaced_deployment(NAMESPACE, _web("held", 1))
    (pod,) = _serving("held", 1)
    pid = node.task_pid(pod.status.container_statuses[0].container_id)
    print(f"node-held: container pid {pid} in namespace, pod ip {pod.status.pod_ip}", flush=True)
    time.sleep(600)
    return {}


PROBE = """
import json, ssl, sys, urllib.request
found = {}
with urllib.request.urlopen("http://web.default.svc.cluster.local/bin/busybox", timeout=5) as answer:
    found["service_by_name"] = answer.status
sa = "/var/run/secrets/kubernetes.io/serviceaccount/"
request = urllib.request.Request("https://kubernetes.default.svc/api/v1/namespaces/default/pods",
                                 headers={"Authorization": "Bearer " + open(sa + "token").read()})
try:
    urllib.request.urlopen(request, context=ssl.create_default_context(cafile=sa + "ca.crt"), timeout=5)
except urllib.error.HTTPError as refused:
    found["api_in_cluster"] = refused.code  # 403: reached and authenticated, not authorised
print(json.dumps(found))
"""


def service_network(node: Node) -> dict[str, Any]:
    """From inside a pod: a Service by its DNS name (ClusterIP through kube-proxy to a busybox
    pod), and the API server through the `kubernetes` Service with the pod's service account."""
    core, batch = client.CoreV1Api(), client.BatchV1Api()
    client.AppsV1Api().create_namespaced_deployment(NAMESPACE, _web("web", 2))
    core.create_namespaced_service(NAMESPACE, {"metadata": {"name": "web"}, "spec": {
        "selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": PORT}]}})
    _serving("web", 2)
    # kube-proxy programs the Service's rules a moment after its endpoints are ready: wait until
    # the ClusterIP answers from the node, then ask from a pod, by name
    cluster_ip = core.read_namespaced_service("web", NAMESPACE).spec.cluster_ip
    poll(f"Service web answering on {cluster_ip}", lambda: answers(f"http://{cluster_ip}/bin/busybox"), timeout_s=60)
    poll("the default service account", lambda: core.list_namespaced_service_account(NAMESPACE).items)
    image = next(i for i in node.images if "drillbook/drillbook" in i.ref)
    batch.create_namespaced_job(NAMESPACE, {"metadata": {"name": "probe"}, "spec": {"backoffLimit": 0, "template": {
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "probe", "image": image.ref, "imagePullPolicy": "Never", "command": ["python3", "-c", PROBE]}]}}}})

    job = _job_finished("probe", NAMESPACE, timeout_s=120)
    (pod,) = core.list_namespaced_pod(NAMESPACE, label_selector="job-name=probe").items
    log = pod_log(pod)
    printed = [line for line in log.splitlines() if '"service_by_name"' in line]
    found = json.loads(printed[-1].split(" ", 3)[-1]) if printed else {}
    return {"succeeded": job.status.succeeded or 0, **found, "resolv_conf": node.pod_resolv_conf(),
            "log_tail": log[-2000:]}


REPOSITORY = Path(__file__).resolve().parents[2]
GAMEDAY_NAMESPACE = "agents"


def _job_finished(name: str, namespace: str, timeout_s: float) -> client.V1Job:
    """The Job once it has succeeded or failed."""
    batch = client.BatchV1Api()

    def finished() -> client.V1Job | None:
        job = batch.read_namespaced_job_status(name, namespace)
        return job if job.status.succeeded or job.status.failed else None

    return poll(f"Job {name} finished", finished, timeout_s=timeout_s)


def scheduled_gameday(node: Node) -> dict[str, Any]:
    """deploy/gameday's CronJob, as written, played once as a Job on the node from drillbook's image,
    against the reference platform deployed from deploy/ (reference_platform's deployment).

    v1.20 serves CronJob only as batch/v1beta1, so the Job is made from the CronJob's own
    jobTemplate, as `kubectl create job --from=cronjob/...` does. What deploy/README tells a team
    to make first is made here: the runner's RBAC from deploy/rbac, the signing key and tenant keys
    Secrets, and the target profile ConfigMap (context in-cluster; the store commands are the test
    cluster's store script, in the same ConfigMap); the evidence claim is bound to a hostPath
    volume (no provisioner), so that the host can verify what the pod wrote."""
    from kubernetes import utils

    from tests.k8s.deployed import documents

    core, batch = client.CoreV1Api(), client.BatchV1Api()
    deployed = _deployment(node)
    utils.create_from_yaml(client.ApiClient(), str(REPOSITORY / "deploy" / "rbac" / "runner.yaml"))
    evidence = node.folder.parent / "evidence"
    evidence.mkdir(exist_ok=True)
    key = evidence.parent / "signing-key.pem"
    subprocess.run([sys.executable, "-m", "drillbook", "keys", "new", str(key)], check=True, capture_output=True)
    core.create_namespaced_secret(GAMEDAY_NAMESPACE, {"metadata": {"name": "drillbook-signing-key"},
                                                      "stringData": {"signing-key.pem": key.read_text()}})
    core.create_namespaced_secret(GAMEDAY_NAMESPACE, {"metadata": {"name": "load-tenant-keys"},
                                                      "stringData": deployed.keys})
    profile = deployed.in_cluster_profile({"tenant-a": "TENANT_A_KEY", "tenant-b": "TENANT_B_KEY"},
                                          "/etc/drillbook/store_ops.py", "/evidence/backups")
    core.create_namespaced_config_map(GAMEDAY_NAMESPACE, {"metadata": {"name": "drillbook-target"}, "data": {
        "target.yaml": profile, "store_ops.py": (REPOSITORY / "tests" / "k8s" / "store_ops.py").read_text()}})
    core.create_persistent_volume({"metadata": {"name": "drillbook-evidence"}, "spec": {
        "capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
        "hostPath": {"path": str(evidence)}, "claimRef": {"namespace": GAMEDAY_NAMESPACE, "name": "drillbook-evidence"}}})

    manifests = documents(REPOSITORY / "deploy" / "gameday" / "cronjob.yaml")
    (claim,) = [d for d in manifests if d["kind"] == "PersistentVolumeClaim"]
    core.create_namespaced_persistent_volume_claim(GAMEDAY_NAMESPACE, claim)
    (cronjob,) = [d for d in manifests if d["kind"] == "CronJob"]
    batch.create_namespaced_job(GAMEDAY_NAMESPACE, {"apiVersion": "batch/v1", "kind": "Job",
                                                    "metadata": {"name": "drillbook-gameday-now"},
                                                    "spec": cronjob["spec"]["jobTemplate"]["spec"]})
    agents_before = _pod_names("agent")  # the replicas HA may kill: real pods, named before the game day
    began = time.monotonic()
    done = _job_finished("drillbook-gameday-now", GAMEDAY_NAMESPACE, timeout_s=1200)
    (runner,) = core.list_namespaced_pod(GAMEDAY_NAMESPACE, label_selector="job-name=drillbook-gameday-now").items
    status = runner.status.container_statuses[0]
    return {"succeeded": done.status.succeeded or 0, "failed": done.status.failed or 0,
            "exit_code": status.state.terminated.exit_code if status.state.terminated else None,
            "seconds": round(time.monotonic() - began, 1), "image": status.image,
            "service_account": runner.spec.service_account_name, "evidence": str(evidence / "results"),
            "agents_before": agents_before, "agents_after": _pod_names("agent"), "log_tail": pod_log(runner)[-6000:]}


def pod_log(pod: client.V1Pod) -> str:
    """What a pod's first container wrote, from the log file the kubelet keeps for it."""
    folder = Path("/var/log/pods") / f"{pod.metadata.namespace}_{pod.metadata.name}_{pod.metadata.uid}"
    return "".join(path.read_text(errors="replace") for path in sorted(folder.glob("*/*.log")))


def _deployment(node: Node) -> Any:
    """deploy/ on the node, applied once whichever check asks first (a node shared by checks)."""
    from tests.k8s.deployed import deploy

    if node.deployed is None:
        node.deployed = deploy(node.folder.parent)
    return node.deployed


def _deployed_for_drills(node: Node) -> Any:
    """deploy/ on the node, and this process set up to run drills on it as the runner would."""
    deployed = _deployment(node)
    os.environ.update(deployed.key_env)
    os.environ["KUBECONFIG"] = str(node.plane.kubeconfig)
    os.environ["DRILLBOOK_STATE_DIR"] = str(node.folder.parent / "drillbook-state")
    return deployed


def _drill(node: Node, profile: Path, runbook: str, parameters: dict[str, str]) -> dict[str, Any]:
    """One runbook run against the profile: its verdict, why, the checks it failed, its values."""
    from drillbook.execute import execute
    from drillbook.runbook import recorded

    run = execute(runbook, str(profile), parameters, results=node.folder.parent / "results")
    return {"verdict": run.verdict, "explain": run.explain(),
            "failed": [c["name"] for c in run.summary["checks"] if not c["passed"]],
            "values": recorded(run.bundle / "runbook.ipynb")["values"]}


def reference_platform(node: Node) -> dict[str, Any]:
    """deploy/platform in real containers, after the scheduled game day ran its five runbooks on it
    from a pod: `drillbook target check` with a kubernetes profile, as the runner on the node would
    run it; then noisy-neighbour from the node after a defect is rolled out to the model server.
    (The passing drills are the game day's: running them again from the node took about 90 s of
    CI's time and saw nothing the pod's evidence does not show.)"""
    deployed = _deployed_for_drills(node)
    checked = subprocess.run([sys.executable, "-m", "drillbook", "target", "check", str(deployed.profile)],
                             capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    found: dict[str, Any] = {"target_check": checked.returncode, "target_check_out": checked.stdout[-3000:]}
    if checked.returncode != 0:  # what the platform's own pods said, for the test's message
        found["target_check_out"] += "\n".join(f"\n--- {pod.metadata.name}\n{pod_log(pod)[-1500:]}" for pod in
                                               client.CoreV1Api().list_namespaced_pod("agents").items)
        return found
    # The same platform with a defect: a model server that serves tenants first come, first served
    # (DRILLBOOK_DEFECTS in its Deployment, rolled out like any change) must fail noisy-neighbour,
    # where the game day's noisy-neighbour passed before the rollout.
    found["model_servers_before_defect"] = _pod_names("model-server")
    _roll_out_env("model-server", {"DRILLBOOK_DEFECTS": "no-fair-sharing"})
    found["model_servers_with_defect"] = _pod_names("model-server")
    found["noisy-neighbour-unfair"] = _drill(node, deployed.profile, "noisy-neighbour", {})
    return found


def deployed_platform(node: Node) -> dict[str, Any]:
    """One node for the three checks that need drillbook's image and deploy/ (each on a node of
    its own took a control plane, an image import and a deployment of the platform apiece):
    service_network, then scheduled_gameday (the game day in a pod, against deploy/ as applied: the
    passing drills), then reference_platform (the runner on the node; it rolls a defect out to the
    model server, so it is last). Each part's result, or the error it raised, under its name:
    one part failing does not hide what the others saw."""
    found: dict[str, Any] = {}
    for part in (service_network, scheduled_gameday, reference_platform):
        began = time.monotonic()
        try:
            found[part.__name__] = part(node)
        except Exception:  # noqa: BLE001 - reported to the part's test, which fails on it
            found[part.__name__] = {"error": traceback.format_exc()[-4000:]}
        found[part.__name__]["part_seconds"] = round(time.monotonic() - began, 1)
        print(f"node check part {part.__name__}: {found[part.__name__]['part_seconds']} s", flush=True)
    return found


def _roll_out_env(name: str, env: dict[str, str]) -> None:
    """Set environment variables on a Deployment's container (a strategic merge, by name) and wait
    until every pod runs the new template and no pod of the old one is left."""
    apps, core = client.AppsV1Api(), client.CoreV1Api()
    apps.patch_namespaced_deployment(name, "agents", {"spec": {"template": {"spec": {"containers": [
        {"name": name, "env": [{"name": key, "value": value} for key, value in env.items()]}]}}}})

    def rolled_out() -> bool:
        deployment = apps.read_namespaced_deployment(name, "agents")
        status, wanted = deployment.status, deployment.spec.replicas
        pods = core.list_namespaced_pod("agents", label_selector=f"app={name}").items
        return (status.observed_generation >= deployment.metadata.generation and status.updated_replicas == wanted
                and status.ready_replicas == wanted and len(pods) == wanted)

    poll(f"deployment {name} rolled out with {sorted(env)}", rolled_out, timeout_s=180)


def _pod_names(app: str) -> list[str]:
    return sorted(p.metadata.name for p in client.CoreV1Api().list_namespaced_pod(
        "agents", label_selector=f"app={app}").items)


if __name__ == "__main__":
    print("run these through tests.k8s.node", file=sys.stderr)
    sys.exit(2)
