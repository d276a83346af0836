"""A throwaway Kubernetes control plane for tests: etcd, kube-apiserver, kube-controller-manager
and kube-scheduler from the cache build.sh fills, all on free loopback ports, with a
token-authenticated admin kubeconfig (context ``drillbook-test``). `stop` ends exactly the
processes `start` began, by PID.

    python3 -m tests.k8s.cluster.controlplane up FOLDER     # prints the kubeconfig path
    python3 -m tests.k8s.cluster.controlplane down FOLDER
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import secrets
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from tests.helpers import free_port

VERSION = "1.20.2"
CONTEXT = "drillbook-test"
BUILD_SCRIPT = Path(__file__).resolve().parent / "build.sh"
_STARTED: dict[str, list[subprocess.Popen]] = {}  # processes this interpreter started, per folder


def cache_bin() -> Path:
    cache = os.environ.get("DRILLBOOK_K8S_CACHE") or str(Path.home() / ".cache" / "drillbook" / f"kubernetes-{VERSION}")
    return Path(cache) / "bin"


def binaries_present() -> bool:
    return all((cache_bin() / tool).is_file() for tool in ("etcd", "kube-apiserver", "kube-controller-manager",
                                                           "kube-scheduler"))


def _write_pki(folder: Path, address: str = "127.0.0.1") -> None:
    """A CA, a serving certificate for 127.0.0.1, and the service-account key pair."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    def key() -> rsa.RSAPrivateKey:
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def pem_key(private: rsa.RSAPrivateKey) -> bytes:
        return private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                     serialization.NoEncryption())

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "drillbook-test-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    server_key = key()
    server = (x509.CertificateBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
              .issuer_name(ca_name).public_key(server_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
              .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                          x509.IPAddress(ipaddress.ip_address(address)),
                                                          x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
                                                          x509.DNSName("localhost"), x509.DNSName("kubernetes"),
                                                          x509.DNSName("kubernetes.default.svc")]),
                             critical=False)
              .sign(ca_key, hashes.SHA256()))
    sa_key = key()
    (folder / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (folder / "ca.key").write_bytes(pem_key(ca_key))
    (folder / "server.crt").write_bytes(server.public_bytes(serialization.Encoding.PEM))
    (folder / "server.key").write_bytes(pem_key(server_key))
    (folder / "sa.key").write_bytes(pem_key(sa_key))
    (folder / "sa.pub").write_bytes(sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


@dataclass
class ControlPlane:
    folder: Path
    server: str
    kubeconfig: Path
    admin_token: str
    pids: dict[str, int] = field(default_factory=dict)

    def save(self) -> None:
        (self.folder / "cluster.json").write_text(json.dumps({
            "server": self.server, "kubeconfig": str(self.kubeconfig), "admin_token": self.admin_token,
            "pids": self.pids}))

    @classmethod
    def load(cls, folder: Path) -> "ControlPlane":
        data = json.loads((folder / "cluster.json").read_text())
        return cls(folder, data["server"], Path(data["kubeconfig"]), data["admin_token"], data["pids"])

    def kubeconfig_for(self, name: str, token: str) -> Path:
        """Another kubeconfig (context drillbook-test) that authenticates with a different token."""
        path = self.folder / f"kubeconfig-{name}"
        path.write_text(yaml.safe_dump(_kubeconfig(self.server, self.folder / "ca.crt", name, token)))
        return path


def _kubeconfig(server: str, ca: Path, user: str, token: str) -> dict:
    return {"apiVersion": "v1", "kind": "Config", "current-context": CONTEXT,
            "clusters": [{"name": CONTEXT, "cluster": {"server": server, "certificate-authority": str(ca)}}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": user}}]}


def _wait_healthy(server: str, ca: Path, token: str, timeout_s: float, processes: dict[str, subprocess.Popen]) -> None:
    context = ssl.create_default_context(cafile=str(ca))
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        for name, process in processes.items():
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}; see its log")
        try:
            request = urllib.request.Request(f"{server}/readyz", headers={"Authorization": f"Bearer {token}"})
            with urllib.request.urlopen(request, context=context, timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError as error:
            last = str(error)
        time.sleep(0.2)
    raise RuntimeError(f"kube-apiserver not ready within {timeout_s:g}s: {last}")


def start(folder: Path, timeout_s: float = 90.0, node_lifecycle: bool = False, address: str = "127.0.0.1") -> ControlPlane:
    """Start etcd and the control plane in folder; returns when the API server is ready.

    node_lifecycle runs the node lifecycle controller (it lifts a new node's not-ready taint once
    a real kubelet reports Ready); the process kubelet's nodes do without it. address is where the
    API server listens and what it advertises (the `kubernetes` Service's endpoint): a real
    node's pods reach it there, through kube-proxy; 127.0.0.1 unless a real node needs it."""
    if not binaries_present():
        raise RuntimeError(f"no control-plane binaries in {cache_bin()}: run {BUILD_SCRIPT}")
    folder.mkdir(parents=True, exist_ok=True)
    bin_dir = cache_bin()
    _write_pki(folder, address)
    token = secrets.token_hex(16)
    (folder / "tokens.csv").write_text(f'{token},drillbook-admin,drillbook-admin,"system:masters"\n')
    etcd_client, etcd_peer, api_port = free_port(), free_port(), free_port()
    server = f"https://{address}:{api_port}"
    kubeconfig = folder / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(_kubeconfig(server, folder / "ca.crt", "drillbook-admin", token)))
    commands = {
        "etcd": [str(bin_dir / "etcd"), "--name", "default", "--data-dir", str(folder / "etcd"),
                 "--listen-client-urls", f"http://127.0.0.1:{etcd_client}",
                 "--advertise-client-urls", f"http://127.0.0.1:{etcd_client}",
                 "--listen-peer-urls", f"http://127.0.0.1:{etcd_peer}",
                 "--initial-advertise-peer-urls", f"http://127.0.0.1:{etcd_peer}",
                 "--initial-cluster", f"default=http://127.0.0.1:{etcd_peer}", "--unsafe-no-fsync"],
        "kube-apiserver": [
            str(bin_dir / "kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{etcd_client}",
            f"--bind-address={address}", f"--advertise-address={address}", f"--secure-port={api_port}",
            "--insecure-port=0", f"--tls-cert-file={folder / 'server.crt'}",
            f"--tls-private-key-file={folder / 'server.key'}", f"--client-ca-file={folder / 'ca.crt'}",
            f"--token-auth-file={folder / 'tokens.csv'}", "--authorization-mode=Node,RBAC",
            f"--service-account-key-file={folder / 'sa.pub'}",
            f"--service-account-signing-key-file={folder / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range=10.0.0.0/24", "--allow-privileged=false"],
        "kube-controller-manager": [
            str(bin_dir / "kube-controller-manager"), f"--kubeconfig={kubeconfig}",
            "--controllers=*" if node_lifecycle else "--controllers=*,-nodelifecycle",
            "--leader-elect=false", f"--service-account-private-key-file={folder / 'sa.key'}",
            f"--root-ca-file={folder / 'ca.crt'}", "--bind-address=127.0.0.1", "--port=0",
            f"--secure-port={free_port()}", "--use-service-account-credentials=false",
            # a quota's usage recounted every 5 s, not 5 min: the controller's first count can
            # race an admission charge and lose it (a quota showing 0 GPUs used beside a running pod)
            "--resource-quota-sync-period=5s"],
        "kube-scheduler": [
            str(bin_dir / "kube-scheduler"), f"--kubeconfig={kubeconfig}", "--leader-elect=false",
            "--bind-address=127.0.0.1", "--port=0", f"--secure-port={free_port()}"],
    }
    processes: dict[str, subprocess.Popen] = {}
    _STARTED[str(folder)] = []
    plane = ControlPlane(folder, server, kubeconfig, token)
    try:
        for name, argv in commands.items():
            log = open(folder / f"{name}.log", "wb")
            processes[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                               start_new_session=True)
            _STARTED[str(folder)].append(processes[name])
            log.close()  # the child holds its own copy
            plane.pids[name] = processes[name].pid
            plane.save()
            if name == "kube-apiserver":
                _wait_healthy(server, folder / "ca.crt", token, timeout_s, processes)
    except BaseException:
        stop(folder)
        raise
    return plane


def stop(folder: Path) -> None:
    """Stop exactly the processes start() began (newest first), SIGTERM then SIGKILL."""
    path = folder / "cluster.json"
    if not path.exists():
        return
    pids = json.loads(path.read_text())["pids"]
    for name in reversed(list(pids)):
        try:
            os.kill(pids[name], signal.SIGTERM)
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + 15
    for name in reversed(list(pids)):
        while time.monotonic() < deadline:
            try:
                os.kill(pids[name], 0)
            except ProcessLookupError:
                break
            try:
                os.waitpid(pids[name], os.WNOHANG)
            except ChildProcessError:
                pass
            time.sleep(0.1)
        else:
            try:
                os.kill(pids[name], signal.SIGKILL)
            except ProcessLookupError:
                pass
    for process in _STARTED.pop(str(folder), []):
        try:
            process.wait(5)  # reaps what this interpreter started
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
    path.unlink()


def main() -> int:
    if len(sys.argv) != 3 or sys.argv[1] not in ("up", "down"):
        print("usage: controlplane.py up|down FOLDER", file=sys.stderr)
        return 2
    folder = Path(sys.argv[2]).resolve()
    if sys.argv[1] == "up":
        plane = start(folder)
        print(plane.kubeconfig)
    else:
        stop(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
