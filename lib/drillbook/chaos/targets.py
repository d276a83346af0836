"""Where chaos actions land: the sandbox (through the supervisor's control API) or a Kubernetes
namespace (through chaostoolkit-kubernetes and the kubernetes client).

A target is built from the experiment's configuration, which drillbook's runner fills in. The
kubernetes target checks its context and namespace against the allow-list before it makes a
single call: anything else is refused with one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from drillbook.errors import ConfigError, StoreUnavailable


class ChaosTarget(Protocol):
    name: str

    def kill(self, service: str, count: int, signal: str) -> list[str]: ...

    def desired(self, service: str) -> int: ...

    def ready(self, service: str) -> int: ...

    def scale(self, service: str, replicas: int) -> None: ...

    def settled(self, service: str) -> bool:
        """True when the service runs exactly the replicas it wants, all ready, none stopping."""

    def backup_store(self) -> dict[str, Any]: ...

    def restore_store(self, backup: str = "latest") -> dict[str, Any]: ...

    def destroy_store(self) -> None: ...

    def recreate_store(self) -> None: ...

    def store_healthy(self) -> bool: ...

    def gateway(self) -> tuple[str, dict[str, str]]: ...


class SandboxTarget:
    """The local reference platform, through its supervisor."""

    name = "sandbox"

    def __init__(self, state_dir: Path) -> None:
        from drillbook.sandbox import launcher

        self.handle = launcher.require(Path(state_dir))

    def _control(self):  # noqa: ANN202 - a ControlClient context manager
        return self.handle.control()

    def kill(self, service: str, count: int, signal: str) -> list[str]:
        with self._control() as control:
            return list(control.kill(service, count=count, signal=signal)["killed"])

    def desired(self, service: str) -> int:
        with self._control() as control:
            return int(control.status()["services"][service]["desired"])

    def ready(self, service: str) -> int:
        with self._control() as control:
            return int(control.status()["services"][service]["ready"])

    def scale(self, service: str, replicas: int) -> None:
        with self._control() as control:
            control.scale(service, replicas, reason="chaos")

    def settled(self, service: str) -> bool:
        with self._control() as control:
            info = control.status()["services"][service]
        return info["ready"] == info["desired"] == len(info["replicas"])

    def backup_store(self) -> dict[str, Any]:
        with self._control() as control:
            return control.backup()

    def restore_store(self, backup: str = "latest") -> dict[str, Any]:
        with self._control() as control:
            return control.restore(backup)

    def destroy_store(self) -> None:
        with self._control() as control:
            control.destroy_store()

    def recreate_store(self) -> None:
        with self._control() as control:
            control.recreate_store()

    def store_healthy(self) -> bool:
        with self._control() as control:
            return bool(control.store()["healthy"])

    def events(self) -> list[dict[str, Any]]:
        with self._control() as control:
            return control.events()

    def gateway(self) -> tuple[str, dict[str, str]]:
        return self.handle.gateway_url, self.handle.tenant_keys


def check_allowed(context: str, namespace: str, allowed_contexts: list[str], allowed_namespaces: list[str]) -> None:
    """Refuse, before any call, a context or namespace that is not on the allow-list."""
    if not allowed_contexts:
        raise ConfigError("the kubernetes target needs an allow-list of contexts (allowed_contexts)")
    if context not in allowed_contexts:
        raise ConfigError(f"kubernetes context {context!r} is not on the allow-list ({', '.join(allowed_contexts)}); "
                          "refusing to act")
    if namespace not in allowed_namespaces:
        raise ConfigError(f"namespace {namespace!r} is not on the allow-list "
                          f"({', '.join(allowed_namespaces) or 'empty'}); refusing to act")


class KubernetesTarget:
    """A namespace of a cluster, reached through a kubeconfig context on the allow-list.

    Services map to Deployments (``kube_deployment_<service>``, default the service name) and
    to pod label selectors (``kube_selector_<service>``, default ``app=<service>``).
    """

    name = "kubernetes"

    def __init__(self, configuration: dict[str, Any]) -> None:
        self.context = str(configuration.get("kube_context") or "")
        self.namespace = str(configuration.get("kube_namespace") or "default")
        check_allowed(self.context, self.namespace, list(configuration.get("allowed_contexts") or []),
                      list(configuration.get("allowed_namespaces") or []))
        self.configuration = configuration
        self.secrets = {"KUBERNETES_CONTEXT": self.context}

    def deployment(self, service: str) -> str:
        return str(self.configuration.get(f"kube_deployment_{service}") or service)

    def selector(self, service: str) -> str:
        return str(self.configuration.get(f"kube_selector_{service}") or f"app={service}")

    def _apps(self) -> Any:
        from chaosk8s import create_k8s_api_client
        from kubernetes import client

        return client.AppsV1Api(create_k8s_api_client(self.secrets))

    def kill(self, service: str, count: int, signal: str) -> list[str]:
        from chaosk8s.pod.actions import terminate_pods

        grace = 0 if signal == "SIGKILL" else -1
        before = self._pod_names(service)
        terminate_pods(label_selector=self.selector(service), qty=count, ns=self.namespace, grace_period=grace,
                       secrets=self.secrets)
        return sorted(before - self._pod_names(service)) or sorted(before)[:count]

    def _pod_names(self, service: str) -> set[str]:
        from chaosk8s import create_k8s_api_client
        from kubernetes import client

        pods = client.CoreV1Api(create_k8s_api_client(self.secrets)).list_namespaced_pod(
            self.namespace, label_selector=self.selector(service))
        return {pod.metadata.name for pod in pods.items if pod.metadata.deletion_timestamp is None}

    def desired(self, service: str) -> int:
        return int(self._apps().read_namespaced_deployment(self.deployment(service), self.namespace).spec.replicas or 0)

    def ready(self, service: str) -> int:
        status = self._apps().read_namespaced_deployment(self.deployment(service), self.namespace).status
        return int(status.ready_replicas or 0)

    def settled(self, service: str) -> bool:
        deployment = self._apps().read_namespaced_deployment(self.deployment(service), self.namespace)
        wanted = int(deployment.spec.replicas or 0)
        status = deployment.status
        return int(status.replicas or 0) == wanted and int(status.ready_replicas or 0) == wanted

    def scale(self, service: str, replicas: int) -> None:
        from chaosk8s.deployment.actions import scale_deployment

        scale_deployment(self.deployment(service), replicas, ns=self.namespace, secrets=self.secrets)

    def _unsupported(self, what: str) -> StoreUnavailable:
        return StoreUnavailable(f"{what} on kubernetes needs the target profile's backup and restore commands, "
                                "which this version does not run yet")

    def backup_store(self) -> dict[str, Any]:
        raise self._unsupported("a backup")

    def restore_store(self, backup: str = "latest") -> dict[str, Any]:
        raise self._unsupported("a restore")

    def destroy_store(self) -> None:
        raise self._unsupported("destroying the store")

    def recreate_store(self) -> None:
        raise self._unsupported("re-creating the store")

    def store_healthy(self) -> bool:
        return self.ready(str(self.configuration.get("kube_store_service") or "state-store")) > 0

    def gateway(self) -> tuple[str, dict[str, str]]:
        url = str(self.configuration.get("gateway_url") or "")
        if not url:
            raise ConfigError("the kubernetes target needs gateway_url in its configuration")
        return url, dict(self.configuration.get("tenant_keys") or {})


def target_from(configuration: dict[str, Any]) -> ChaosTarget:
    kind = configuration.get("drillbook_target", "sandbox")
    if kind == "sandbox":
        return SandboxTarget(Path(configuration["drillbook_state_dir"]))
    if kind == "kubernetes":
        return KubernetesTarget(configuration)
    raise ConfigError(f"unknown target kind {kind!r}; use sandbox or kubernetes")
