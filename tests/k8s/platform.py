"""The reference platform on the test cluster: its Deployments and Services in a namespace, a
runtime file the pods read, and a kubernetes target profile for it (tests and bench share this).

Gateway, agent and model server run as pods (the process kubelet runs each as the sandbox
service on its own loopback address); the gateway finds agent and model pods through the API and
its activator scales a Deployment from zero through the API.
"""

from __future__ import annotations

import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from drillbook.config import SandboxConfig
from drillbook.sandbox.runtime import KubernetesDiscovery, Runtime
from tests.helpers import free_port

IMAGE = "drillbook/reference-platform:0.1.0"


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


def reference_platform_runner(pod: dict, address: str, port: int) -> list[str] | None:
    """A reference-platform pod as the sandbox service its first argument names, configured by
    the runtime file its DRILLBOOK_RUNTIME variable points at (without one: no process)."""
    container = pod["spec"]["containers"][0]
    env = {item["name"]: item.get("value", "") for item in container.get("env", [])}
    if not env.get("DRILLBOOK_RUNTIME"):
        return None
    return [sys.executable, "-m", f"drillbook.sandbox.{container['args'][0]}", "--runtime", env["DRILLBOOK_RUNTIME"],
            "--replica", pod["metadata"]["name"], "--control-url", "", "--host", address, "--port", str(port)]


METRICS_TOKEN_ENV = "K8S_PLATFORM_TOKEN"  # what the profile names for the platform's internal token

@dataclass
class Platform:
    namespace: str
    profile: Path
    gateway_url: str
    runtime: Runtime
    key_env: dict[str, str]  # the variables the profile names (tenant keys, the metrics token), for the caller's environment


STORE_OPS = Path(__file__).resolve().parent / "store_ops.py"


def store_commands(dsn: str, backups: Path | str, python: str = sys.executable, script: Path | str = STORE_OPS,
                   lie: str | None = None) -> dict[str, str]:
    """The profile's workload.store: the platform team's script around pg_dump and pg_restore
    (python and script: where they are for whatever runs the profile, a pod say; lie: a store
    procedure that lies, store_ops.py --lie)."""
    base = f"{python} {script} --dsn {dsn} --dir {backups}" + (f" --lie {lie}" if lie else "")
    return {"backup": f"{base} backup", "restore": f"{base} restore {{backup}}", "destroy": f"{base} destroy",
            "recreate": f"{base} recreate", "healthy": f"{base} healthy"}




def wait_until(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not within {timeout_s:g}s")
        time.sleep(0.1)


def start_platform(plane: Any, api: client.ApiClient, folder: Path, store_lie: str | None = None,
                   **overrides: Any) -> Platform:
    """Namespace, runtime, Services and Deployments, all ready, and a profile for them; the caller
    puts `key_env` into the environment of whatever runs the profile. store_lie: the profile's
    store commands lie that way (store_ops.py --lie)."""
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    namespace = f"platform-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": namespace}})
    gateway_port = free_port()
    runtime = Runtime.create(SandboxConfig(**{"tokens_per_second": 200, **overrides}), folder / namespace,
                             gateway_port).model_copy(update={"kubernetes": KubernetesDiscovery(
                                 server=plane.server, token=plane.admin_token, ca_file=str(plane.folder / "ca.crt"),
                                 namespace=namespace)})
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
    # The noisy tenant's own namespace, under a quota, holding the aggressor (scaled up by the
    # noisy-neighbour drill): two tenants sharing the one inference tier.
    tenant_namespace = f"{namespace}-tenant-b"
    core.create_namespace({"metadata": {"name": tenant_namespace}})
    core.create_namespaced_resource_quota(tenant_namespace, {"metadata": {"name": "inference"},
                                                             "spec": {"hard": {"pods": "4"}}})
    apps.create_namespaced_deployment(tenant_namespace, _deployment("aggressor", "aggressor", 0, runtime.runtime_file))
    for name, wanted in (("model-server", 1), ("agent", 2), ("gateway", 1)):
        wait_until(lambda: apps.read_namespaced_deployment(name, namespace).status.ready_replicas == wanted, 90,
                   f"deployment {name} ready")
    key_env = {f"K8S_{tenant.upper().replace('-', '_')}_KEY": key for tenant, key in runtime.tenant_keys.items()}
    keys: dict[str, dict[str, str]] = {tenant: {"key_env": variable}
                                       for tenant, variable in zip(runtime.tenant_keys, key_env)}
    key_env[METRICS_TOKEN_ENV] = runtime.internal_token  # the model server's per-tenant /metrics
    keys[runtime.config.tenants[-1]]["namespace"] = tenant_namespace
    profile = folder / f"{namespace}.yaml"
    profile.write_text(yaml.safe_dump({
        "name": "test-cluster", "kind": "kubernetes",
        "description": "the reference platform on the test control plane",
        "kubernetes": {"context": "drillbook-test", "namespace": namespace, "allowed_contexts": ["drillbook-test"],
                       "allowed_namespaces": [namespace, tenant_namespace]},
        "workload": {"gateway_url": runtime.gateway_url,
                     "agent": {"deployment": "agent", "selector": "app=agent"},
                     "inference": {"deployment": "model-server", "selector": "app=model-server",
                                   "metrics_token_env": METRICS_TOKEN_ENV},
                     "aggressor": {"deployment": "aggressor", "selector": "app=aggressor",
                                   "namespace": tenant_namespace},
                     **({"store": store_commands(str(runtime.config.dsn), folder / f"{namespace}-backups",
                                                  lie=store_lie)}
                        if runtime.config.store == "postgres" else {})},
        "tenants": keys, "delivery": {"verifier": "reference"}}))
    return Platform(namespace, profile, runtime.gateway_url, runtime, key_env)
