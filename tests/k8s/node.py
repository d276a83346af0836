"""A real Kubernetes node for the test cluster: kubelet v1.20 (built by cluster/build.sh) with
containerd and runc from Debian, CNI bridge networking, and images imported from OCI archives
built here (images.py; nothing is pulled).

The node and the control plane it joins run inside new network, PID and mount namespaces that
`run` makes for one check (`unshare --net --pid --mount --fork --mount-proc --kill-child`):

- pod IPs live on a bridge (db0, 10.244.0.0/24) inside that network namespace, and the API
  server binds that namespace's 127.0.0.1, so no traffic leaves the test's own namespaces;
- the check runs as the PID namespace's first process, and when it ends, however it ends, the
  kernel kills every process of the namespace (containerd, its shims, the containers, kubelet,
  the control plane). SIGKILL of the `unshare` parent reaches it through --kill-child;
- kubelet's and runc's mounts, containerd's sockets and state, the pods' network namespaces and
  what kubelet and the CNI plugins keep at fixed paths live in the private mount namespace (tmpfs
  on /run and /var/lib) and vanish with it; pod logs go to the folder's log/ (bound on /var/log):
  nothing is left on the host but the check's folder.

    python3 -m tests.k8s.node CHECK FOLDER      # inside the namespaces; prints one JSON line

`run(check, folder)` is the host side: it starts that command in the namespaces and returns the
check's JSON result. Checks are in node_checks.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml
from kubernetes import client, config

from tests.helpers import free_port
from tests.k8s import images, services
from tests.k8s.cluster import controlplane

NODE_NAME = "node-1"
POD_SUBNET = "10.244.0.0/24"
GPUS = 4
SERVICE_RANGE = "10.0.0.0/24"  # the control plane's --service-cluster-ip-range
NODE_IP = "10.243.0.1"  # on lo of the check's own network namespace: kubelet refuses a loopback node IP
NAMESPACE_FLAGS = ["--net", "--pid", "--mount", "--fork", "--mount-proc", "--kill-child"]
PACKAGES = {"containerd": "containerd", "runc": "runc", "ctr": "containerd", "unshare": "util-linux",
            "ip": "iproute2", "iptables": "iptables", "dnsmasq": "dnsmasq-base"}
CNI_BIN = Path("/usr/lib/cni")
RESULT_PREFIX = "node-check-result: "
EXTRA_IMAGES = "DRILLBOOK_NODE_IMAGES"  # JSON [[reference, OCI archive, [aliases]]] that run() hands the node
RUN = Path("/run")  # a tmpfs of the check's own mount namespace


def missing() -> list[str]:
    """What a real node needs and this machine lacks, as Debian package names or paths."""
    lacks = [f"{tool} ({package})" for tool, package in PACKAGES.items() if shutil.which(tool) is None]
    if not (CNI_BIN / "bridge").exists():
        lacks.append(f"{CNI_BIN}/bridge (containernetworking-plugins)")
    for binary in ("kubelet", "kube-proxy"):
        if not (controlplane.cache_bin() / binary).exists():
            lacks.append(f"{binary} in {controlplane.cache_bin()} (run {controlplane.BUILD_SCRIPT})")
    return lacks + images.missing_tools()


def answers(url: str) -> bool:
    """An HTTP 200 from url within two seconds (from the node's network namespace)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


@dataclass
class Node:
    """containerd and kubelet of one node, started in `folder` against `plane`; `deployed`: deploy/
    as applied on it, once, by whichever check asks first (tests.k8s.node_checks)."""
    folder: Path
    plane: controlplane.ControlPlane
    deployed: Any = field(default=None, compare=False)

    @property
    def socket(self) -> Path:
        return RUN / "containerd" / "containerd.sock"  # short: a unix socket path has 108 bytes

    def ctr(self, *args: str) -> str:
        return subprocess.run(["ctr", "--address", str(self.socket), "-n", "k8s.io", *args], check=True,
                              capture_output=True, text=True).stdout

    def _containerd_config(self, pause: images.Image) -> Path:
        net_d = self.folder / "cni" / "net.d"
        net_d.mkdir(parents=True, exist_ok=True)
        (net_d / "10-drillbook.conflist").write_text(json.dumps({
            "cniVersion": "0.4.0", "name": "drillbook", "plugins": [
                {"type": "bridge", "bridge": "db0", "isGateway": True, "hairpinMode": True,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_SUBNET}]],
                          "dataDir": str(self.folder / "cni" / "ipam"), "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "portmap", "capabilities": {"portMappings": True}}]}))
        path = self.folder / "containerd" / "config.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"""version = 2
root = "{self.folder / 'containerd' / 'root'}"
state = "{RUN / 'containerd' / 'state'}"
[grpc]
  address = "{self.socket}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause.ref}"
  disable_apparmor = true
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    # overlayfs: a container's root is the image's layers plus an empty upper layer ("native"
    # copied the whole 250 MB image per container and blocked containerd ~13 s per pod removal)
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{net_d}"
""")
        return path

    def _kubelet_config(self) -> Path:
        path = self.folder / "kubelet" / "config.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump({
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "address": "127.0.0.1", "port": free_port(), "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": free_port(),
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                               "x509": {"clientCAFile": str(self.plane.folder / "ca.crt")}},
            "authorization": {"mode": "AlwaysAllow"}, "cgroupDriver": "cgroupfs", "failSwapOn": False,
            # One node on a shared machine: no QoS cgroup tree, no evictions for disk or memory
            # pressure that the test did not cause, no image garbage collection.
            "cgroupsPerQOS": False, "enforceNodeAllocatable": [],
            "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99, "resolvConf": "",
            "clusterDomain": services.CLUSTER_DOMAIN, "clusterDNS": [NODE_IP], "serializeImagePulls": False, "syncFrequency": "5s",
            "fileCheckFrequency": "5s", "nodeStatusUpdateFrequency": "2s"}))
        return path

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        with open(self.folder / f"{name}.log", "wb") as log:
            return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def start(self, extra: list[images.Image] = (), timeout_s: float = 120.0) -> None:
        """containerd with the images imported (the node's own and `extra`), then kubelet; returns
        when the node is Ready and schedulable. timeout_s bounds containerd's start, and then the
        kubelet's from when the images are in."""
        built = images.build() + list(extra)
        self.images = built
        containerd = self._spawn("containerd", ["containerd", "--config", str(self._containerd_config(built[0]))])
        deadline = time.monotonic() + timeout_s
        while not self.socket.exists():
            if containerd.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"containerd did not start: see {self.folder / 'containerd.log'}")
            time.sleep(0.1)
        for image in built:
            self.ctr("images", "import", "--base-name", image.base_name, str(image.archive))
            for alias in image.aliases:
                self.ctr("images", "tag", "--force", image.ref, alias)
        # The node's own time to Ready starts now: importing the images (hundreds of MB, slower with
        # the other test worker busy) is not the kubelet's start.
        deadline = time.monotonic() + timeout_s
        services.start_proxy(self.folder, self.plane.kubeconfig, NODE_NAME, POD_SUBNET, self._spawn,
                             controlplane.cache_bin() / "kube-proxy")
        self.dns = services.ClusterDns(self.folder, NODE_IP, self._spawn)
        kubelet = self._spawn("kubelet", [
            str(controlplane.cache_bin() / "kubelet"), f"--config={self._kubelet_config()}",
            f"--kubeconfig={self.plane.kubeconfig}", f"--root-dir={self.folder / 'kubelet' / 'root'}",
            f"--cert-dir={self.folder / 'kubelet' / 'pki'}", "--container-runtime=remote",
            f"--container-runtime-endpoint=unix://{self.socket}", f"--hostname-override={NODE_NAME}",
            f"--node-ip={NODE_IP}", f"--pod-infra-container-image={built[0].ref}", "--v=1"])
        core = client.CoreV1Api()
        while time.monotonic() < deadline:
            if kubelet.poll() is not None:
                raise RuntimeError(f"kubelet exited {kubelet.returncode}: see {self.folder / 'kubelet.log'}")
            try:
                node = core.read_node(NODE_NAME)
            except client.ApiException:
                time.sleep(0.5)
                continue
            ready = [c.status for c in node.status.conditions or [] if c.type == "Ready"]
            if ready == ["True"] and not node.spec.taints:
                # Simulated accelerators, advertised as a node's extended resource is (what a
                # device plugin would report): the model server's pods request nvidia.com/gpu.
                core.patch_node_status(NODE_NAME, [{"op": "add", "path": "/status/capacity/nvidia.com~1gpu",
                                                    "value": str(GPUS)}])
                return
            time.sleep(0.5)
        raise RuntimeError(f"node {NODE_NAME} not Ready and untainted in {timeout_s:.0f} s: see {self.folder}")

    def pod_resolv_conf(self) -> str:
        """The resolv.conf the kubelet had written for a pod (its cluster DNS and search path)."""
        sandboxes = self.folder / "containerd" / "root" / "io.containerd.grpc.v1.cri" / "sandboxes"
        for path in sandboxes.glob("*/resolv.conf"):
            return path.read_text()
        return ""

    def task_pid(self, container_id: str) -> int:
        """The PID (in this PID namespace) of a container's main process, from containerd."""
        cid = container_id.split("://", 1)[-1]
        for line in self.ctr("tasks", "ls").splitlines()[1:]:
            fields = line.split()
            if fields and fields[0] == cid:
                return int(fields[1])
        raise LookupError(f"containerd runs no task for container {cid}")


def inside(check: Callable[[Node], dict[str, Any]], folder: Path) -> dict[str, Any]:
    """Run one check on a new control plane and node; to be called as the PID namespace's first process."""
    # What kubelet, containerd and the CNI plugins keep at fixed host paths stays in this mount
    # namespace: state under /run and /var/lib (tmpfs), pod logs under /var/log (the folder's log/).
    (folder / "log").mkdir(parents=True, exist_ok=True)
    for mount in (["-t", "tmpfs", "-o", "mode=755", "tmpfs", str(RUN)], ["-t", "tmpfs", "-o", "mode=755", "tmpfs", "/var/lib"],
                  ["--bind", str(folder / "log"), "/var/log"]):
        subprocess.run(["mount", "-n", *mount], check=True)
    # The node's own clients (the check, drillbook) reach ClusterIPs too: kube-proxy rewrites the
    # destination on the way out, once a route has let the packet leave at all.
    for step in (["link", "set", "lo", "up"], ["addr", "add", f"{NODE_IP}/32", "dev", "lo"],
                 ["route", "add", SERVICE_RANGE, "dev", "lo", "src", NODE_IP]):
        subprocess.run(["ip", *step], check=True)
    plane = controlplane.start(folder / "plane", node_lifecycle=True, address=NODE_IP)
    config.load_kube_config(str(plane.kubeconfig))
    node = Node(folder / "node", plane)
    node.folder.mkdir(parents=True, exist_ok=True)
    extra = json.loads(os.environ.get(EXTRA_IMAGES, "[]"))
    node.start([images.Image(ref, Path(archive), tuple(aliases)) for ref, archive, aliases in extra])
    return check(node)


def launch(check: str, folder: Path, extra: list[images.Image] = ()) -> subprocess.Popen:
    """Start node_checks.<check> in new namespaces, in a process group of its own; its output
    (text) is on stdout. Ending the `unshare` process with SIGKILL ends the namespace (--kill-child);
    SIGINT and SIGTERM sent to the group reach the check, the namespace's first process."""
    argv = ["unshare", *NAMESPACE_FLAGS, sys.executable, "-m", "tests.k8s.node", check, str(folder)]
    env = {**os.environ, EXTRA_IMAGES: json.dumps([[i.ref, str(i.archive), list(i.aliases)] for i in extra])}
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=Path(__file__).resolve().parents[2], start_new_session=True, env=env)


def run(check: str, folder: Path, timeout_s: float = 300.0, extra: list[images.Image] = ()) -> dict[str, Any]:
    """Run node_checks.<check> inside new namespaces from the host side; its JSON result.

    Raises with the tail of the check's output when it fails or times out; in every case (an
    interrupt too) the namespace, and so every process of the node, is gone when this returns."""
    process = launch(check, folder, extra)
    try:
        output, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        raise RuntimeError(f"node check {check} did not finish in {timeout_s:.0f} s:\n{output[-3000:]}")
    finally:  # an interrupt (a test's timeout too) lands here as well
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
    results = [line[len(RESULT_PREFIX):] for line in output.splitlines() if line.startswith(RESULT_PREFIX)]
    if process.returncode != 0 or not results:
        raise RuntimeError(f"node check {check} exited {process.returncode}:\n{output[-3000:]}")
    return json.loads(results[-1])


def _stat(pid: int | str) -> tuple[int, int] | None:
    """(parent PID, start time in clock ticks) of a live process, None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), int(fields[19])


def process_tree(root: int) -> dict[int, int]:
    """Every live process descended from root (root too), as {host PID: start time}: the
    containers' processes are in PID namespaces of their own, nested in the check's."""
    stats = {int(entry.name): stat for entry in Path("/proc").iterdir()
             if entry.name.isdigit() and (stat := _stat(entry.name)) is not None}
    tree, grew = {root} if root in stats else set(), True
    while grew:
        found = {pid for pid, (parent, _) in stats.items() if parent in tree} - tree
        tree |= found
        grew = bool(found)
    return {pid: stats[pid][1] for pid in tree}


def still_alive(processes: dict[int, int]) -> list[int]:
    """Those of `processes` still running (the same PID with the same start time)."""
    return [pid for pid, started in processes.items() if (stat := _stat(pid)) is not None and stat[1] == started]


def first_process(process: subprocess.Popen) -> int:
    """The host PID of the namespace's first process (the child `unshare --fork` made)."""
    children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
    if not children:
        raise LookupError(f"unshare {process.pid} has no child yet")
    return int(children[0])


def main() -> int:
    from tests.k8s import node_checks

    if len(sys.argv) != 3 or not hasattr(node_checks, sys.argv[1]):
        print("usage: python3 -m tests.k8s.node CHECK FOLDER (CHECK: a function of tests/k8s/node_checks.py)",
              file=sys.stderr)
        return 2
    if os.getpid() != 1:
        print("tests.k8s.node runs as the first process of a new PID namespace: use tests.k8s.node.run",
              file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    result = inside(getattr(node_checks, sys.argv[1]), Path(sys.argv[2]))
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    # No interpreter shutdown: this process's exit ends the namespace and everything in it, and
    # tearing down the threads of a run (kernels' sockets, the DNS follower) can only go wrong.
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
