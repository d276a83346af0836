"""A real Kubernetes node: kubelet v1.20 with containerd, runc and CNI bridge networking, running
real containers from images built here (tests/k8s/node.py, images.py, deploy/images/build.sh).

Each test starts a control plane and the node in new namespaces of its own and reads what the
check inside measured; what is asserted is what the kernel and the API show (a killed container
process, a replacement pod answering HTTP on its own address, evidence written by drillbook in a
container and verified here), not status fields alone.
"""

from __future__ import annotations

import ipaddress
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.helpers import wait_for
from tests.k8s import images, node

# A check starts a control plane and a node (about a minute), and some deploy the platform and run
# drills or a whole game day: each bounds itself (node.run's timeout), within this one.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def real_node() -> None:
    if os.geteuid() != 0:
        pytest.skip("a real node needs root (namespaces, mounts, containerd)")
    lacks = node.missing()
    if lacks:
        pytest.skip("a real node needs: " + ", ".join(lacks))


@pytest.fixture
def folder() -> Path:
    """Not pytest's tmp_path: containerd's snapshots are root's and large, so each check's folder
    is removed when the test ends."""
    import shutil
    import tempfile

    made = Path(tempfile.mkdtemp(prefix="drillbook-node-"))
    yield made
    shutil.rmtree(made, ignore_errors=True)


def in_pod_subnet(ip: str) -> bool:
    return ipaddress.ip_address(ip) in ipaddress.ip_network(node.POD_SUBNET)


def test_a_killed_container_is_restarted_and_a_deleted_pod_replaced(real_node, folder):
    found = node.run("replica_loss", folder)
    # SIGKILL of the container's own process (found through containerd): the kubelet restarted
    # the container in the same pod, which serves again on the same address.
    assert found["killed_pid"] > 1 and found["restart_count"] >= 1 and found["same_pod_ip"]
    # A deleted pod: the ReplicaSet made another, which answers HTTP on an address of its own.
    assert found["replaced"] and len(set(found["replacement_ips"])) == 2
    assert all(in_pod_subnet(ip) for ip in found["replacement_ips"])
    # A bare pod has no controller: deleted, it stays gone (the replacement above was not a given).
    assert found["bare_pods_after_delete"] == 0


def test_scaling_a_deployment_from_zero_starts_a_real_container(real_node, folder):
    found = node.run("scale_from_zero", folder)
    assert found["containers_before"] == 0  # at zero, containerd runs nothing for it
    assert found["containers_after"] == 2  # the pod's sandbox (pause) and its container
    assert in_pod_subnet(found["pod_ip"])


def _read_until(process: subprocess.Popen, marker: str, timeout_s: float) -> str:
    seen = ""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 1.0)
        if ready:
            line = process.stdout.readline()
            if not line:
                break
            seen += line
            if marker in line:
                return seen
    raise AssertionError(f"no {marker!r} within {timeout_s:.0f} s:\n{seen[-3000:]}")


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "SIGKILL"])
def test_every_process_of_the_node_dies_with_the_check(real_node, folder, how):
    process = node.launch("hold", folder)
    try:
        _read_until(process, "node-held:", timeout_s=240)
        tree = node.process_tree(node.first_process(process))
        commands = {Path(f"/proc/{pid}/exe").resolve().name for pid in tree if Path(f"/proc/{pid}/exe").exists()}
        # the control plane, the node and a real container's process are all in it
        assert {"etcd", "kube-apiserver", "kubelet", "containerd", "containerd-shim-runc-v2", "busybox"} <= commands, \
            sorted(commands)
        if how == "SIGKILL":
            os.kill(process.pid, signal.SIGKILL)  # unshare itself: --kill-child takes the namespace down
        else:
            os.killpg(process.pid, getattr(signal, how))  # as a terminal or a supervisor signals the group
        wait_for(lambda: not node.still_alive(tree), timeout=60)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
    assert not node.still_alive(tree)


@pytest.fixture(scope="module")
def drillbook_image(real_node) -> images.Image:
    lacks = images.drillbook_missing()
    if lacks:
        pytest.skip("building drillbook's image needs: " + ", ".join(lacks))
    return images.drillbook()


@pytest.fixture(scope="module")
def deployed_node(real_node, drillbook_image) -> Iterator[tuple[dict[str, Any], Path]]:
    """One node for the three checks that need drillbook's image and deploy/
    (node_checks.deployed_platform): what each part saw, under its name, and the node's folder."""
    import shutil
    import tempfile

    made = Path(tempfile.mkdtemp(prefix="drillbook-node-"))
    try:
        yield node.run("deployed_platform", made, timeout_s=1700, extra=[drillbook_image, images.postgres()]), made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def part(deployed_node: tuple[dict[str, Any], Path], name: str) -> dict[str, Any]:
    """What one part of the shared node check saw; the test fails on the error it raised."""
    found = deployed_node[0][name]
    assert "error" not in found, found["error"]
    return found


# These three run within the first one's limit: the node, the images and deploy/ are set up once.
@pytest.mark.timeout(2400)
def test_a_pod_reaches_a_service_by_name_and_the_api_through_its_service(deployed_node):
    found = part(deployed_node, "service_network")
    assert found["succeeded"] == 1, found["log_tail"]
    assert found["service_by_name"] == 200  # DNS name -> ClusterIP -> kube-proxy -> a busybox pod
    assert found["api_in_cluster"] == 403  # the API server, via the kubernetes Service: who, not what
    assert f"nameserver {node.NODE_IP}" in found["resolv_conf"] and "svc.cluster.local" in found["resolv_conf"]


def game_day_runs(evidence: Path) -> dict[str, dict[str, Any]]:
    """What each runbook of the scheduled game day recorded in its bundle, read on the host from
    the pod's evidence volume: verdict, reason, parameters and the values the notebook judged."""
    from drillbook.runbook import recorded

    runs: dict[str, dict[str, Any]] = {}
    for summary_file in sorted(evidence.glob("*/summary.json")):
        summary = json.loads(summary_file.read_text())
        notebook = summary_file.parent / "runbook.ipynb"
        if not notebook.exists():  # the game day's own summary
            continue
        assert summary["runbook"] not in runs, f"two runs of {summary['runbook']} in {evidence}"
        manifest = json.loads((summary_file.parent / "manifest.json").read_text())
        runs[summary["runbook"]] = {"verdict": summary["verdict"], "reason": summary["reason"],
                                    "parameters": manifest["parameters"], "values": recorded(notebook)["values"]}
    return runs


def test_the_reference_platform_from_deploy_runs_in_containers_passes_its_drills_and_fails_with_a_defect(
        deployed_node):
    # The passing drills ran from the scheduled game day's pod (in-cluster); the target check and
    # the defect's run from the node, with a kubernetes profile, as a runner outside would.
    game_day = part(deployed_node, "scheduled_gameday")
    found = part(deployed_node, "reference_platform")
    assert found["target_check"] == 0, found["target_check_out"]
    runs = game_day_runs(Path(game_day["evidence"]))
    for runbook in ("ha-replica-loss", "cold-start", "restore-drill", "noisy-neighbour", "session-continuity"):
        assert runs[runbook]["verdict"] == "PASS", (runbook, runs[runbook]["reason"], game_day["log_tail"])
    ha = runs["ha-replica-loss"]["values"]
    # the killed replica was a real pod; after the game day it is gone and the ReplicaSet runs as many as before
    killed = set(ha["killed_replicas"])
    assert killed and killed <= set(game_day["agents_before"]) and ha["lost_turns"] == 0
    assert not killed & set(game_day["agents_after"]) and len(game_day["agents_after"]) == len(game_day["agents_before"])
    # The pod streaming turns was deleted mid-turn: the clients saw their streams break, resumed on
    # another pod, and not a token was lost or repeated.
    streams = runs["session-continuity"]["values"]
    assert streams["killed_replicas"] and not set(streams["killed_replicas"]) & set(game_day["agents_after"])
    assert streams["streams_hit_by_kill"] >= 1
    assert streams["tokens_checked"] > 0 and streams["tokens_lost"] == streams["tokens_duplicated"] == 0
    cold = runs["cold-start"]
    assert cold["values"]["first_turns_acknowledged"] == int(cold["parameters"]["trials"]) > 0
    assert runs["restore-drill"]["values"]["integrity"] == 1.0
    # A runbook fails when it should on real containers too: the model server rolled out with
    # first-come-first-served scheduling (new pods, the old ones gone) starves the victim tenant.
    assert not set(found["model_servers_before_defect"]) & set(found["model_servers_with_defect"])
    unfair = found["noisy-neighbour-unfair"]
    assert unfair["verdict"] == "FAIL", unfair["explain"]
    for run in (runs["noisy-neighbour"], unfair):  # each judged beside a flood seen queueing at the model tier
        assert run["values"]["flood_oversubscription"] >= 1.0 and run["values"]["flood_seen"], run["values"]
    assert any(name.startswith("victim p95 ratio") for name in unfair["failed"]), unfair["explain"]


def test_the_scheduled_game_day_runs_drillbook_from_its_image_and_its_evidence_verifies_outside(deployed_node,
                                                                                                drillbook_image):
    image, folder = drillbook_image, deployed_node[1]
    found = part(deployed_node, "scheduled_gameday")
    assert found["service_account"] == "drillbook-runner" and found["image"].endswith(image.ref.split("/", 1)[1])
    assert found["succeeded"] == 1 and found["exit_code"] == 0, found["log_tail"]  # the game day's verdict: all PASS
    evidence = Path(found["evidence"])
    bundles = sorted(p for p in evidence.iterdir() if p.is_dir())
    assert len(bundles) >= 6  # five runbooks and the game day's summary
    # Signed in the pod with the key the CronJob mounts from its Secret; checked here against the
    # public half, which never went into the cluster.
    public_key = folder / "signing-key.pem.pub"
    verified = subprocess.run([sys.executable, "-m", "drillbook", "verify", str(evidence), "--require-signed",
                               "--public-key", str(public_key)], capture_output=True, text=True, timeout=300)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert f"{len(bundles)} signed by a trusted key" in verified.stdout
