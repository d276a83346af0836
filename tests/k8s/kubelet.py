"""A process kubelet for the test control plane (which has no kubelet of its own).

It registers a Ready node (with ``nvidia.com/gpu`` capacity) and serves the pods the scheduler
binds to it: pods whose image has a runner become local processes on their own loopback port,
Ready only while a real HTTP readiness check answers, restarted per the pod's restart policy
(restartCount counts), stopped with the pod's grace period when the pod is deleted. Pods with
other images become Running and Ready without a process, so other workloads still schedule.
Each pod gets its own loopback address (127.0.0.2, 127.0.0.3, ...) as its pod IP and listens
on its first containerPort there, so Endpoints built by the controller-manager are real
addresses; a containerPort with a hostPort binds 127.0.0.1:hostPort instead (the node's
address). `lie = "noop-kill"` makes it a kubelet that lies: a deleted pod's process keeps
serving, a gracefully deleted pod stays in the API as it was (still Ready), a force-deleted one
is gone from the API while its process lives on; setting `lie` back to None stops them all. Each pod also carries the kubelet's precise timestamps as annotations
(``drillbook.dev/scheduled-at``: first seen bound to the node, ``started-at``, ``ready-at``): the API's own condition times have
one-second resolution.
"""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable

from kubernetes import client
from kubernetes.client.rest import ApiException
from tests.helpers import free_port

Runner = Callable[[dict[str, Any], str, int], "list[str] | None"]  # (pod, address, port) -> argv, or None: no process


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


@dataclass
class PodProcess:
    uid: str
    name: str
    namespace: str
    process: subprocess.Popen | None
    argv: list[str] | None
    port: int | None
    address: str = "127.0.0.1"
    ready_path: str = "/"
    restarts: int = 0
    ready: bool = False
    seen_at: float = field(default_factory=time.time)  # when this kubelet first saw the scheduled pod
    started_at: float = field(default_factory=time.time)
    ready_at: float | None = None
    reported: tuple[Any, ...] = ()


class ProcessKubelet:
    def __init__(self, api_client: client.ApiClient, node: str = "drillbook-node-1",
                 runners: dict[str, Runner] | None = None, interval_s: float = 0.1) -> None:
        self.core = client.CoreV1Api(api_client)
        self.node = node
        self.runners = runners or {}
        self.interval_s = interval_s
        self.pods: dict[str, PodProcess] = {}
        self._in_use: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="process-kubelet", daemon=True)
        self.errors: list[str] = []
        self.lie: str | None = None
        self.orphans: list[PodProcess] = []  # force-deleted under the noop-kill lie, still running

    # -- node --------------------------------------------------------------------------------
    def register(self) -> None:
        capacity = {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "2"}
        body = client.V1Node(metadata=client.V1ObjectMeta(name=self.node, labels={
            "kubernetes.io/hostname": self.node, "drillbook.dev/process-kubelet": "true"}))
        try:
            self.core.create_node(body)
        except ApiException as error:
            if error.status != 409:
                raise
        self.core.patch_node_status(self.node, {"status": {
            "capacity": capacity, "allocatable": capacity,
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": self.node}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "drillbook process kubelet", "lastHeartbeatTime": _now(),
                            "lastTransitionTime": _now()}],
            "nodeInfo": {"kubeletVersion": "v1.20.2-drillbook", "architecture": "amd64", "operatingSystem": "linux",
                         "containerRuntimeVersion": "process://1", "kernelVersion": "", "osImage": "",
                         "kubeProxyVersion": "", "machineID": "", "systemUUID": "", "bootID": ""}}})
        self.core.patch_node(self.node, {"spec": {"taints": []}})  # admission's not-ready taint

    def start(self) -> "ProcessKubelet":
        self.register()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        for pod in [*self.pods.values(), *self.orphans]:
            self._kill(pod, 2.0)

    # -- pods --------------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._sync()
            except Exception as error:  # noqa: BLE001 - keep serving; tests read self.errors
                self.errors.append(f"{type(error).__name__}: {error}")
            self._stop.wait(self.interval_s)

    def _sync(self) -> None:
        listed = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={self.node}").items
        seen = set()
        for pod in listed:
            uid = pod.metadata.uid
            seen.add(uid)
            if pod.metadata.deletion_timestamp is not None:
                if self.lie != "noop-kill":
                    self._delete(pod)
                continue
            tracked = self.pods.get(uid)
            if tracked is None:
                tracked = self.pods[uid] = self._run(pod)
            self._supervise(pod, tracked)
            self._report(pod, tracked)
        for uid in set(self.pods) - seen:  # deleted outright (grace 0 by someone else)
            if self.lie == "noop-kill":
                self.orphans.append(self.pods.pop(uid))
            else:
                self._kill(self.pods.pop(uid), 0.0)
        while self.orphans and self.lie != "noop-kill":
            self._kill(self.orphans.pop(), 0.0)

    def _run(self, pod: Any) -> PodProcess:
        container = pod.spec.containers[0]
        runner = next((r for prefix, r in self.runners.items() if container.image.startswith(prefix)), None)
        tracked = PodProcess(pod.metadata.uid, pod.metadata.name, pod.metadata.namespace, None, None, None)
        argv = None
        if runner is not None:
            declared = (container.ports or [None])[0]
            if declared is not None and declared.host_port:
                tracked.address, tracked.port = "127.0.0.1", declared.host_port
            else:
                tracked.address = next(f"127.0.0.{n}" for n in range(2, 255) if f"127.0.0.{n}" not in self._in_use)
                self._in_use.add(tracked.address)
                tracked.port = declared.container_port if declared is not None else free_port()
            argv = runner(client.ApiClient().sanitize_for_serialization(pod), tracked.address, tracked.port)
        if argv is None:
            tracked.ready, tracked.ready_at = True, time.time()
            return tracked
        tracked.argv = argv
        probe = container.readiness_probe
        if probe is not None and probe.http_get is not None:
            tracked.ready_path = probe.http_get.path or "/"
        tracked.process = subprocess.Popen(tracked.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL, start_new_session=True)
        return tracked

    def _supervise(self, pod: Any, tracked: PodProcess) -> None:
        if tracked.process is None:
            return
        if tracked.process.poll() is not None:
            tracked.ready = False
            if (pod.spec.restart_policy or "Always") in ("Always", "OnFailure"):
                tracked.restarts += 1
                tracked.process = subprocess.Popen(tracked.argv or [], stdin=subprocess.DEVNULL,
                                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                                   start_new_session=True)
                tracked.started_at, tracked.ready_at = time.time(), None
            return
        try:
            with urllib.request.urlopen(f"http://{tracked.address}:{tracked.port}{tracked.ready_path}",
                                        timeout=1) as answer:
                ready = 200 <= answer.status < 400
        except OSError:
            ready = False
        if ready and not tracked.ready:
            tracked.ready_at = time.time()
        tracked.ready = ready

    def _report(self, pod: Any, tracked: PodProcess) -> None:
        state = (tracked.ready, tracked.restarts, tracked.process.poll() if tracked.process else None)
        if state == tracked.reported:
            return
        ready = "True" if tracked.ready else "False"
        container = pod.spec.containers[0]
        running = tracked.process is None or tracked.process.poll() is None
        started = datetime.datetime.fromtimestamp(tracked.started_at, datetime.timezone.utc)
        status = {
            "phase": "Running", "podIP": tracked.address, "hostIP": "127.0.0.1",
            "podIPs": [{"ip": tracked.address}],
            "startTime": pod.status.start_time.isoformat().replace("+00:00", "Z") if pod.status.start_time else _now(),
            "conditions": [{"type": "Initialized", "status": "True", "lastTransitionTime": _now()},
                           {"type": "PodScheduled", "status": "True"},
                           {"type": "ContainersReady", "status": ready, "lastTransitionTime": _now()},
                           {"type": "Ready", "status": ready, "lastTransitionTime": _now()}],
            "containerStatuses": [{
                "name": container.name, "image": container.image, "imageID": f"process://{container.image}",
                "ready": tracked.ready, "restartCount": tracked.restarts, "started": running,
                "state": {"running": {"startedAt": started.replace(microsecond=0).isoformat().replace("+00:00", "Z")}}
                if running else {"waiting": {"reason": "CrashLoopBackOff"}}}],
        }
        annotations = {"drillbook.dev/scheduled-at": f"{tracked.seen_at:.6f}",
                       "drillbook.dev/started-at": f"{tracked.started_at:.6f}",
                       "drillbook.dev/port": str(tracked.port or "")}
        if tracked.ready_at is not None:
            annotations["drillbook.dev/ready-at"] = f"{tracked.ready_at:.6f}"
        try:
            self.core.patch_namespaced_pod(pod.metadata.name, pod.metadata.namespace,
                                           {"metadata": {"annotations": annotations}})
            self.core.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace, {"status": status})
            tracked.reported = state
        except ApiException as error:
            if error.status != 404:
                raise

    def _delete(self, pod: Any) -> None:
        tracked = self.pods.pop(pod.metadata.uid, None)
        grace = pod.metadata.deletion_grace_period_seconds
        if tracked is not None:
            self._kill(tracked, float(grace if grace is not None else 30))
        try:
            self.core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0,
                                            body=client.V1DeleteOptions(grace_period_seconds=0,
                                                                        preconditions={"uid": pod.metadata.uid}))
        except ApiException as error:
            if error.status not in (404, 409):
                raise

    def _kill(self, tracked: PodProcess, grace_s: float) -> None:
        process = tracked.process
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM if grace_s > 0 else signal.SIGKILL)
            try:
                process.wait(max(grace_s, 0.1))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(5)
        if tracked.address != "127.0.0.1":
            self._in_use.discard(tracked.address)  # free again now that the process is gone
