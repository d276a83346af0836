"""Services on the real node: kube-proxy v1.20 (iptables mode, from the cluster build) makes
ClusterIPs reach ready pods, and a cluster DNS answers `<service>.<namespace>.svc.cluster.local`.

Debian has no CoreDNS, so the DNS is Debian's dnsmasq serving a hosts file that `ClusterDns`
rewrites from the API whenever Services or Endpoints change (a ClusterIP for a Service, the ready
pod addresses for a headless one), with SIGHUP to reload it. Both run inside the check's own
namespaces (node.py), listen only on the node's address there, and die with them.
"""

from __future__ import annotations

import signal
import subprocess
import threading
from pathlib import Path
from typing import Callable

from kubernetes import client

from tests.helpers import free_port

CLUSTER_DOMAIN = "cluster.local"
POLL_S = 0.5


def start_proxy(folder: Path, kubeconfig: Path, node_name: str, pod_subnet: str,
                spawn: Callable[[str, list[str]], subprocess.Popen], binary: Path) -> subprocess.Popen:
    """kube-proxy in iptables mode. --masquerade-all: a pod reaching a ClusterIP that lands on a pod
    of the same bridge gets its answer back through the node (no br_netfilter needed); the conntrack
    settings are left as the kernel has them (a network namespace may not change them)."""
    config = folder / "kube-proxy.yaml"
    config.write_text(f"""apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {{kubeconfig: "{kubeconfig}"}}
hostnameOverride: {node_name}
mode: iptables
clusterCIDR: {pod_subnet}
iptables: {{masqueradeAll: true, syncPeriod: 1s, minSyncPeriod: 0s}}
conntrack: {{maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}}
metricsBindAddress: 127.0.0.1:{free_port()}
healthzBindAddress: 127.0.0.1:{free_port()}
""")
    return spawn("kube-proxy", [str(binary), f"--config={config}", "--v=1"])


class ClusterDns:
    """dnsmasq on address:53 answering for the cluster's Services, kept current from the API."""

    def __init__(self, folder: Path, address: str, spawn: Callable[[str, list[str]], subprocess.Popen]) -> None:
        self.hosts = folder / "cluster-hosts"
        self.hosts.write_text("")
        self.process = spawn("dnsmasq", [
            "dnsmasq", "--keep-in-foreground", "--no-resolv", "--no-hosts", "--user=root",
            f"--listen-address={address}", "--bind-interfaces", "--port=53", f"--addn-hosts={self.hosts}",
            f"--local=/{CLUSTER_DOMAIN}/", "--domain-needed", "--bogus-priv",
            "--pid-file=", "--local-ttl=1", "--log-facility=-"])
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._follow, name="cluster-dns", daemon=True)
        self.thread.start()

    def records(self) -> str:
        core = client.CoreV1Api()
        lines = []
        endpoints = {(e.metadata.namespace, e.metadata.name): e for e in core.list_endpoints_for_all_namespaces().items}
        for service in core.list_service_for_all_namespaces().items:
            key = (service.metadata.namespace, service.metadata.name)
            name = f"{key[1]}.{key[0]}.svc.{CLUSTER_DOMAIN}"
            if service.spec.cluster_ip and service.spec.cluster_ip != "None":
                lines.append(f"{service.spec.cluster_ip} {name}")
            elif key in endpoints:  # headless: the ready pods themselves
                for subset in endpoints[key].subsets or []:
                    lines.extend(f"{a.ip} {name}" for a in subset.addresses or [])
        return "\n".join(sorted(lines)) + "\n"

    def _follow(self) -> None:
        written = None
        while not self.stopped.wait(POLL_S):
            try:
                wanted = self.records()
            except Exception:  # noqa: BLE001 - the API server restarting: try again
                continue
            if wanted != written:
                self.hosts.write_text(wanted)
                self.process.send_signal(signal.SIGHUP)
                written = wanted
