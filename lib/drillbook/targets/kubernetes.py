"""A namespace of a Kubernetes cluster as a target, through chaostoolkit-kubernetes and the
kubernetes client. The context and namespace are checked against the profile's allow-list
before a single call; the restore drill runs the profile's store commands.

Roles map to Deployments (``workload.<role>.deployment``, default the role name with '_' as
'-') and pod label selectors (``workload.<role>.selector``, default ``app=<deployment>``).
"""

from __future__ import annotations

import os
from typing import Any

from drillbook.errors import ConfigError
from drillbook.profile import ROLES, LoadedProfile
from drillbook.targets.capabilities import OPTIONAL_TIERS, SANDBOXES, STORE, TargetCheck, Needs
from drillbook.targets.platform import model_server_metrics
from drillbook.observation import ReplicaObservation, observe_replicas
from drillbook.targets.store import ProfileTarget


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


IN_CLUSTER = "in-cluster"  # the context name for drillbook running as a pod (the scheduled game day)


def api_client(context: str) -> Any:
    """A kubernetes ApiClient for one context of $KUBECONFIG (read now) or ~/.kube/config, or
    for the pod's own service account when the context is `in-cluster`.

    chaostoolkit-kubernetes' own loader reads the kubeconfig path the kubernetes package saw
    when it was first imported (in a pod it takes the service account when CHAOSTOOLKIT_IN_POD
    is "true", as deploy/gameday sets); drillbook's own calls read it at call time and never
    touch the client's global default configuration.
    """
    from kubernetes import client, config

    if context == IN_CLUSTER:
        configuration = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException as error:
            raise ConfigError(f"kubernetes context {IN_CLUSTER!r} outside a pod: {error}") from None
        return client.ApiClient(configuration)
    path = os.path.expanduser(os.environ.get("KUBECONFIG", "~/.kube/config"))
    if not os.path.isfile(path):
        raise ConfigError(f"kubeconfig {path} does not exist (set KUBECONFIG or write ~/.kube/config)")
    try:
        return config.new_client_from_config(config_file=path, context=context)
    except config.ConfigException as error:
        raise ConfigError(f"kubeconfig {path}, context {context!r}: {str(error).splitlines()[0][:120]}") from None


def _pod_ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def _pod_address(pod: Any) -> str | None:
    """podIP:port of the pod's first container's first declared port; None before it has both."""
    ports = pod.spec.containers[0].ports
    if not pod.status or not pod.status.pod_ip or not ports:
        return None
    return f"{pod.status.pod_ip}:{ports[0].container_port}"


def pod_events(pod: Any, role: str) -> list[dict[str, Any]]:
    annotations = pod.metadata.annotations or {}
    conditions = {c.type: c for c in (pod.status.conditions or [])}
    running = next((s.state.running for s in pod.status.container_statuses or [] if s.state and s.state.running), None)
    times = {
        "replica_scheduled": annotations.get("drillbook.dev/scheduled-at") or (
            conditions["PodScheduled"].last_transition_time if "PodScheduled" in conditions else None),
        "replica_started": annotations.get("drillbook.dev/started-at") or (running.started_at if running else None),
        "replica_ready": annotations.get("drillbook.dev/ready-at") or (
            conditions["Ready"].last_transition_time
            if "Ready" in conditions and conditions["Ready"].status == "True" else None),
    }
    return [{"t": float(value) if isinstance(value, str) else value.timestamp(), "kind": kind, "role": role,
             "replica": pod.metadata.name} for kind, value in times.items() if value]


# The rights each action a scenario declares (drillbook.scenarios, `needs`) takes on Kubernetes:
# (verb, group, resource), asked in the namespace of the tier it acts on (the profile's unless the
# tier names one), or of every tenant for "tenants". These are the calls drillbook and
# chaostoolkit-kubernetes make: pods listed for readiness and deleted by terminate_pods,
# Deployments read for their desired count and patched by scale_deployment, quotas replaced by a shed.
KUBERNETES_RIGHTS: dict[str, list[tuple[str, str, str]]] = {
    "status": [("get", "apps", "deployments"), ("list", "", "pods")],
    "kill": [("list", "", "pods"), ("delete", "", "pods")],
    "scale": [("get", "apps", "deployments"), ("patch", "apps", "deployments"), ("list", "", "pods")],
    "pods": [("list", "", "pods")],
    "limit": [("get", "", "resourcequotas"), ("update", "", "resourcequotas")],
}


def register_kubernetes_rights(action: str, rights: list[tuple[str, str, str]]) -> None:
    """The rights a new kind of action takes, registered by the module that brings the action."""
    KUBERNETES_RIGHTS[action] = list(rights)


def kubernetes_rights(action: str) -> list[tuple[str, str, str]]:
    """The rights one declared action takes; an action nobody registered is a ConfigError naming
    the known ones (a scenario that declares it cannot be checked, so it cannot run)."""
    try:
        return KUBERNETES_RIGHTS[action]
    except KeyError:
        raise ConfigError(f"no Kubernetes rights are known for the action {action!r} "
                          f"(known: {', '.join(sorted(KUBERNETES_RIGHTS))}): register them with "
                          "drillbook.targets.kubernetes.register_kubernetes_rights") from None


class KubernetesTarget(ProfileTarget):
    kind = "kubernetes"
    granted = "allowed"

    def __init__(self, profile: LoadedProfile) -> None:
        spec = profile.spec.kubernetes
        if spec is None:
            raise ConfigError(f"target profile {profile.name} has no kubernetes section")
        check_allowed(spec.context, spec.namespace, spec.allowed_contexts, spec.allowed_namespaces)
        for role in ("agent", "inference", "state_store", "aggressor"):
            tier = profile.role(role)
            if tier is not None and tier.namespace:
                check_allowed(spec.context, tier.namespace, spec.allowed_contexts, spec.allowed_namespaces)
        super().__init__(profile)
        self.context, self.namespace = spec.context, spec.namespace
        self.chaos_secrets = {"KUBERNETES_CONTEXT": self.context}
        self._reviews: dict[tuple[str, str, str, str], bool] = {}
        self._absences: dict[str, str | None] = {}  # role -> why its Deployment cannot be read
        self._leases: Any = None  # drillbook.kube_leases.ClusterLeases, once a fault is leased
        # Import the client libraries now, in the caller's thread: importing them from two threads
        # at once (a readiness watch beside a chaos action) trips over requests' circular imports.
        import chaosk8s.deployment.actions  # noqa: F401
        import chaosk8s.pod.actions  # noqa: F401
        import kubernetes.client  # noqa: F401

    # FaultLeases: each scale is leased on the Deployment it changed (drillbook.kube_leases), where the
    # watchdog in the cluster (deploy/watchdog) finds it without anything of the runner's
    def lease_fault(self, fault: Any) -> None:
        if fault.undo.get("op") != "scale":
            return  # a kill needs no undo (the ReplicaSet replaces pods); a store the cluster cannot restore
        role = str(fault.undo["service"])
        self._cluster_leases().lease(fault, self.namespace_of(role), self.deployment(role),
                                     int(fault.undo["replicas"]))

    def release_fault(self, fault: Any) -> None:
        if self._leases is not None:
            self._leases.release(fault)

    def _cluster_leases(self) -> Any:
        if self._leases is None:
            from drillbook.config import fault_lease_s
            from drillbook.kube_leases import ClusterLeases

            self._leases = ClusterLeases(self._annotate, self._annotations, fault_lease_s())
        return self._leases

    # Halting: the halt is a ConfigMap in the target's namespace, read by every run on it
    def halt_state(self) -> dict[str, Any]:
        from kubernetes import client

        from drillbook.kube_leases import HaltNotReadable, halt_state

        try:
            return halt_state(client.CoreV1Api(self._client()), self.namespace)
        except HaltNotReadable:
            raise
        except Exception:  # noqa: BLE001 - no cluster to ask (no kubeconfig, unreachable): the run's own first
            return {"halted": False}  # call to it says why, and the run is sealed ERROR naming it

    def halt(self, operator: str, reason: str) -> dict[str, Any]:
        from kubernetes import client

        from drillbook.kube_leases import halt

        scaled = [(self.namespace_of(role), self.deployment(role)) for role in ("agent", "inference", "aggressor")
                  if self.profile.role(role) is not None or role == "agent"]
        return halt(client.CoreV1Api(self._client()), self._apps(), self.namespace, scaled, operator, reason)

    def lift_halt(self) -> dict[str, Any]:
        from kubernetes import client

        from drillbook.kube_leases import lift_halt

        return lift_halt(client.CoreV1Api(self._client()), self.namespace)

    def _annotations(self, namespace: str, deployment: str) -> dict[str, str]:
        return dict(self._apps().read_namespaced_deployment(deployment, namespace).metadata.annotations or {})

    def _annotate(self, namespace: str, deployment: str, annotations: dict[str, Any]) -> None:
        self._apps().patch_namespaced_deployment(deployment, namespace, {"metadata": {"annotations": annotations}})

    def has(self, role: str) -> bool:
        return self.profile.role(role) is not None

    def may(self, verb: str, group: str, resource: str, namespace: str) -> bool:
        """The API server's answer (SelfSubjectAccessReview) for the runner's own credentials."""
        from kubernetes import client

        key = (verb, group, resource, namespace)
        if key not in self._reviews:
            review = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=client.V1ResourceAttributes(verb=verb, group=group, resource=resource,
                                                                namespace=namespace)))
            answer = client.AuthorizationV1Api(self._client()).create_self_subject_access_review(review)
            self._reviews[key] = bool(answer.status.allowed)
        return self._reviews[key]

    def _namespaces(self, where: str) -> list[str] | str:
        """Where a need applies, or why the runbook cannot run for lack of it."""
        if where == "tenants":
            named = [ref.namespace for ref in self.profile.spec.tenants.values() if ref.namespace]
            return named or "no tenant names its namespace (tenants.<name>.namespace)"
        if where in OPTIONAL_TIERS and self.profile.role(where) is None:
            return []
        return [self.namespace_of(where)]

    def undeclared(self, needs: Needs) -> list[str]:
        if any(where == STORE for where, _ in needs) and self.profile.spec.workload.store is None:
            return ["no workload.store commands"]
        if any(where == SANDBOXES for where, _ in needs) and self.profile.spec.workload.sandboxes is None:
            return ["no workload.sandboxes (code sandboxes)"]
        return []

    def readings(self) -> list[Any]:
        """Each tier's Deployment as the API server reports it, and the store's healthy command."""
        found = []
        for role in ROLES:
            if not self.has(role):
                continue
            where = f"deployment {self.deployment(role)} in {self.namespace_of(role)}"
            try:
                found.append(TargetCheck(f"{role} status", True,
                                     f"{where}: desired {self.desired(role)}, ready {self.ready(role)}"))
            except Exception as error:  # noqa: BLE001 - reported: this is a check
                found.append(TargetCheck(f"{role} status", False, f"{where}: {type(error).__name__}: {error}"[:300]))
        store = self.profile.spec.workload.store
        if store is not None and store.healthy:
            try:
                found.append(TargetCheck("store healthy", self.store_healthy(), store.healthy))
            except Exception as error:  # noqa: BLE001
                found.append(TargetCheck("store healthy", False, f"{store.healthy}: {error}"[:300]))
        return found

    def refusals(self, needs: Needs) -> list[str]:
        """Every right each action takes, asked in the namespaces where it acts; the store's commands."""
        from drillbook.targets.commands import sandbox_command_problems

        why: list[str] = sandbox_command_problems(self.profile, needs)
        for where, action in needs:
            if where == SANDBOXES:
                continue  # the profile's own commands (undeclared and sandbox_command_problems say what is missing)
            if where == STORE:
                reason = "no workload.store commands"
                if self.profile.spec.workload.store is None and reason not in why:
                    why.append(reason)
                continue
            found = self._namespaces(where)
            if isinstance(found, str):
                if found not in why:
                    why.append(found)
                continue
            rights = kubernetes_rights(action)
            for verb, group, resource in rights:
                for namespace in found:
                    refused = f"not allowed: {verb} {resource} in {namespace}"
                    if refused not in why and not self.may(verb, group, resource, namespace):
                        why.append(refused)
            if found and ("get", "apps", "deployments") in rights:
                absent = self._absent(where)
                if absent and absent not in why:
                    why.append(absent)
        return why

    def _absent(self, role: str) -> str | None:
        """Why the Deployment a role names cannot be read (not there, most often), or None: a
        runbook that scales or reads an aggressor nobody deployed cannot run."""
        from kubernetes.client.exceptions import ApiException

        name, namespace = self.deployment(role), self.namespace_of(role)
        if not self.may("get", "apps", "deployments", namespace):
            return None  # said already, as a right the runner lacks
        if role not in self._absences:  # asked once per check, not once per runbook that needs it
            try:
                self._deployment(role)
                self._absences[role] = None
            except ApiException as error:
                self._absences[role] = (f"no deployment {name} in {namespace} (workload.{role})" if error.status == 404
                                        else f"deployment {name} in {namespace}: HTTP {error.status} {error.reason}")
        return self._absences[role]

    def deployment(self, role: str) -> str:
        spec = self.profile.role(role)
        return (spec.deployment if spec and spec.deployment else None) or role.replace("_", "-")

    def namespace_of(self, role: str) -> str:
        spec = self.profile.role(role)
        return (spec.namespace if spec and spec.namespace else None) or self.namespace

    def selector(self, role: str) -> str:
        spec = self.profile.role(role)
        return (spec.selector if spec and spec.selector else None) or f"app={self.deployment(role)}"

    def _client(self) -> Any:
        return api_client(self.context)

    def _apps(self) -> Any:
        from kubernetes import client

        return client.AppsV1Api(self._client())

    def kill(self, role: str, count: int, signal: str) -> list[str]:
        from chaosk8s.pod.actions import terminate_pods

        grace = 0 if signal == "SIGKILL" else -1
        before = self._pod_names(role)
        terminate_pods(label_selector=self.selector(role), qty=count, ns=self.namespace_of(role), grace_period=grace,
                       secrets=self.chaos_secrets)
        return sorted(before - self._pod_names(role)) or sorted(before)[:count]

    def _pod_names(self, role: str) -> set[str]:
        return {pod.metadata.name for pod in self._live_pods(role)}

    def _deployment(self, role: str) -> Any:
        return self._apps().read_namespaced_deployment(self.deployment(role), self.namespace_of(role))

    def desired(self, role: str) -> int:
        return int(self._deployment(role).spec.replicas or 0)

    def _pods(self, role: str) -> list[Any]:
        """Every pod of the role's selector, stopping ones too."""
        from kubernetes import client

        return client.CoreV1Api(self._client()).list_namespaced_pod(self.namespace_of(role),
                                                                   label_selector=self.selector(role)).items

    def _live_pods(self, role: str) -> list[Any]:
        return [pod for pod in self._pods(role) if pod.metadata.deletion_timestamp is None]

    def ready(self, role: str) -> int:
        """Pods with the Ready condition True, from the pods themselves: the Deployment's status
        lags a deletion by a moment and would call a killed replica ready."""
        return sum(1 for pod in self._live_pods(role) if _pod_ready(pod))

    def observe(self, role: str) -> ReplicaObservation:
        """The Deployment's desired count and its pods, read once: a ready pod is known by its uid.
        A pod with a deletion timestamp is stopping; it counts as ready for as long as its node
        still reports it Ready, because a deletion is only a request: a replica killed
        gracefully is seen gone when its node says it stopped (its Ready condition falls, or the
        pod leaves the API), not when the API was asked. (A force deletion, grace 0, leaves the
        API at once, so for SIGKILL the API can only say the pod is gone.)"""
        def read() -> tuple[int, int, list[str], int]:
            wanted = self.desired(role)
            pods = self._pods(role)
            ready = [pod.metadata.uid for pod in pods if _pod_ready(pod)]
            stopping = sum(1 for pod in pods if pod.metadata.deletion_timestamp is not None)
            return wanted, len(ready), ready, stopping

        return observe_replicas(read)

    def settled(self, role: str) -> bool:
        wanted = self.desired(role)
        live = self._live_pods(role)
        return len(live) == wanted and sum(1 for pod in live if _pod_ready(pod)) == wanted

    def scale(self, role: str, replicas: int) -> None:
        from chaosk8s.deployment.actions import scale_deployment

        scale_deployment(self.deployment(role), replicas, ns=self.namespace_of(role), secrets=self.chaos_secrets)

    def events(self) -> list[dict[str, Any]]:
        """Replica lifecycle events from the pods of the agent and inference tiers: scheduled,
        started and ready, from the pod's conditions and container state (one-second resolution),
        or from a kubelet's precise drillbook.dev/*-at annotations where it writes them."""
        found = [event for role in ("agent", "inference") if self.has(role)
                 for pod in self._live_pods(role) for event in pod_events(pod, role)]
        found += self._watchdog_undos()
        return sorted(found, key=lambda event: event["t"])

    def _watchdog_undos(self) -> list[dict[str, Any]]:
        """What the watchdog in the cluster undid (fault_undone_by_watchdog), from the records it
        left on the Deployments of the tiers a run scales."""
        from drillbook.kube_leases import undone_records

        return [record for role in ("agent", "inference", "aggressor") if self.has(role)
                for record in undone_records(self._deployment(role).metadata.annotations)]

    def replica_urls(self, role: str) -> list[str]:
        """http://podIP:port of the role's ready pods (for reading their metrics)."""
        return [f"http://{_pod_address(pod)}" for pod in self._live_pods(role) if _pod_address(pod) and _pod_ready(pod)]

    # ReplicaAddresses: where each ready pod serves, by uid (the ids of observe), stopping ones too
    def replica_addresses(self, role: str) -> dict[str, str]:
        return {pod.metadata.uid: address for pod in self._pods(role)
                if (address := _pod_address(pod)) and _pod_ready(pod)}

    # TenantMetrics: the model server's per-tenant metrics, read from its ready pods
    def tenant_metrics(self) -> dict[str, dict[str, float]]:
        if not self.has("inference"):
            return {}
        return model_server_metrics(self.replica_urls("inference"), self.profile.metrics_token("inference"))

    # TenantLimits: each tenant namespace's ResourceQuota (spec.hard), for tenants whose profile
    # entry names a namespace
    def _tenant_quotas(self) -> dict[str, Any]:
        spec = self.profile.spec.kubernetes
        assert spec is not None
        tenants = {name: ref for name, ref in self.profile.spec.tenants.items() if ref.namespace}
        if not tenants:
            raise ConfigError(f"target profile {self.name} names no tenant namespace (tenants.<name>.namespace)")
        for ref in tenants.values():  # the allow-list, before any call
            check_allowed(spec.context, str(ref.namespace), spec.allowed_contexts, spec.allowed_namespaces)
        return tenants

    def tenant_limits(self) -> dict[str, dict[str, Any]]:
        from kubernetes import client

        core = client.CoreV1Api(self._client())
        return {tenant: dict(core.read_namespaced_resource_quota(ref.quota, ref.namespace).spec.hard or {})
                for tenant, ref in self._tenant_quotas().items()}

    def lowered_limit(self, current: dict[str, Any], rps: float, burst: int, quota: str) -> dict[str, Any]:
        if not quota:
            raise ConfigError("shedding on kubernetes needs -p quota=resource=amount,... (the new ResourceQuota hard "
                              "limits, for example requests.nvidia.com/gpu=0,pods=2)")
        pairs = [item.split("=", 1) for item in quota.split(",") if item.strip()]
        if any(len(pair) != 2 or not pair[0].strip() or not pair[1].strip() for pair in pairs):
            raise ConfigError(f"invalid quota {quota!r}: use resource=amount pairs separated by commas")
        return {**current, **{name.strip(): value.strip() for name, value in pairs}}

    def set_tenant_limit(self, tenant: str, limit: dict[str, Any]) -> None:
        from kubernetes import client

        ref = self._tenant_quotas()[tenant]
        client.CoreV1Api(self._client()).replace_namespaced_resource_quota(ref.quota, ref.namespace, {
            "metadata": {"name": ref.quota, "namespace": ref.namespace}, "spec": {"hard": limit}})
