"""Fault leases kept in the cluster, and the watchdog that undoes them there.

On a Kubernetes target every scale a run makes (cold start's scale to zero, the aggressors) is
written onto the Deployment it changed as an annotation, ``drillbook.dev/lease.<fault>``: what was
done, the replica count that undoes it, and when the lease runs out. The run renews the lease
while it lives (the heartbeat every third of DRILLBOOK_FAULT_LEASE_S) and removes it once it has
undone the fault itself. A watchdog that lives in the cluster (deploy/watchdog: the drillbook image
under its own service account, which may only read and patch Deployments in the namespaces it
watches) reads those annotations alone, nothing of the runner's, and scales back every Deployment
whose lease ran out, in one patch that also removes the lease and records the undo as
``drillbook.dev/undone.<fault>``; the patch carries the resourceVersion it read, so a renewal that
came in between wins. The runner's clock and the watchdog's are assumed to agree within the lease
(NTP); a skew shortens or lengthens the lease by as much.

A store destroyed through the profile's commands is not leased here: the cluster cannot run them.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timezone
from typing import Any, Callable

from drillbook.errors import ConfigError

LEASE_PREFIX = "drillbook.dev/lease."
UNDONE_PREFIX = "drillbook.dev/undone."
KEEP_UNDONE = 20  # undo records kept on one Deployment, newest
WATCH_INTERVAL_S = 2.0
# What the watchdog does through the API, as (group, resource, verb): deploy/watchdog grants exactly these.
WATCHDOG_RIGHTS = {("apps", "deployments", "list"), ("apps", "deployments", "patch")}


def lease_key(fault: str) -> str:
    return f"{LEASE_PREFIX}{fault}"


def lease_record(fault: Any, replicas: int, seconds: float, now: float) -> dict[str, Any]:
    return {"fault": fault.id, "run": fault.run_id, "what": f"{fault.kind} {json.dumps(fault.detail, sort_keys=True)}"[:300],
            "replicas": int(replicas), "seconds": float(seconds), "granted_at": now, "expires_at": now + seconds}


def leases_on(annotations: dict[str, str] | None) -> list[dict[str, Any]]:
    """The lease records an object's annotations carry (unreadable ones skipped: a person's edit)."""
    found = []
    for key, value in (annotations or {}).items():
        if key.startswith(LEASE_PREFIX):
            try:
                record = json.loads(value)
                if isinstance(record.get("replicas"), int) and isinstance(record.get("expires_at"), (int, float)):
                    found.append(record)
            except (TypeError, ValueError):
                continue
    return found


def expired(annotations: dict[str, str] | None, now: float) -> list[dict[str, Any]]:
    """The leases that ran out, oldest grant first; when several ran out on one Deployment, the
    oldest holds the count from before any of them (a pure function)."""
    return sorted((r for r in leases_on(annotations) if r["expires_at"] <= now), key=lambda r: r.get("granted_at", 0))


class ClusterLeases:
    """The run's side: the lease written on, renewed on and removed from the Deployment."""

    def __init__(self, patch: Callable[[str, str, dict[str, Any]], None],
                 read: Callable[[str, str], dict[str, str]], seconds: float) -> None:
        from drillbook.heartbeat import LeaseHeartbeat

        self.patch = patch  # (namespace, deployment, annotations to set, None to remove)
        self.read = read  # (namespace, deployment) -> its annotations now
        self.held: dict[str, tuple[str, str, dict[str, Any]]] = {}
        self.heartbeat = LeaseHeartbeat(self._renew, seconds)
        self.patching = threading.Lock()  # a renewal never puts back a lease released in between

    def lease(self, fault: Any, namespace: str, deployment: str, replicas: int) -> None:
        record = lease_record(fault, replicas, self.heartbeat.seconds, time.time())
        with self.patching:
            self.patch(namespace, deployment, {lease_key(fault.id): json.dumps(record, sort_keys=True)})
            self.held[fault.id] = (namespace, deployment, record)
        self.heartbeat.hold(fault.id, fault.run_id)

    def release(self, fault: Any) -> None:
        self.heartbeat.release(fault.id)
        with self.patching:
            held = self.held.pop(fault.id, None)
            if held is not None:
                self.patch(held[0], held[1], {lease_key(fault.id): None})

    def _renew(self, runs: list[str]) -> None:
        now = time.time()
        with self.patching:
            for fault, (namespace, deployment, record) in list(self.held.items()):
                if record["run"] not in runs:
                    continue
                if lease_key(fault) not in self.read(namespace, deployment):  # a halt undid it: not put back
                    self.held.pop(fault, None)
                    continue
                record = record | {"expires_at": now + record["seconds"]}
                self.held[fault] = (namespace, deployment, record)
                self.patch(namespace, deployment, {lease_key(fault): json.dumps(record, sort_keys=True)})


def undo_expired(apps: Any, namespace: str, deployment: Any, now: float, every: bool = False,
                 kind: str = "fault_undone_by_watchdog") -> list[str]:
    """Scale one Deployment back for the leases on it that ran out (every: all its leases, for a
    halt): one patch, conditional on the resourceVersion read, that sets the replicas, removes
    those leases and records the undo."""
    from kubernetes.client import ApiException

    due = sorted(leases_on(deployment.metadata.annotations), key=lambda r: r.get("granted_at", 0)) if every else \
        expired(deployment.metadata.annotations, now)
    if not due:
        return []
    oldest = due[0]
    stamp = datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="seconds")
    annotations: dict[str, str | None] = {lease_key(r["fault"]): None for r in due}
    for record in due:
        annotations[f"{UNDONE_PREFIX}{record['fault']}"] = json.dumps(
            {"kind": kind, "t": now, "run": record["run"], "fault": record["fault"],
             "undone": f"scaled {deployment.metadata.name} back to {oldest['replicas']}",
             "lease_expired_at": record["expires_at"]}, sort_keys=True)
    old_undos = sorted((k for k in (deployment.metadata.annotations or {}) if k.startswith(UNDONE_PREFIX)))
    for key in old_undos[:max(0, len(old_undos) + len(due) - KEEP_UNDONE)]:
        annotations[key] = None
    body = {"metadata": {"resourceVersion": deployment.metadata.resource_version, "annotations": annotations},
            "spec": {"replicas": oldest["replicas"]}}
    try:
        apps.patch_namespaced_deployment(deployment.metadata.name, namespace, body)
    except ApiException as error:
        if error.status == 409:  # renewed or changed since it was read: looked at again next round
            return []
        raise
    why = "was undone by the halt" if every else "ran out"
    return [f"{stamp} {namespace}/{deployment.metadata.name}: lease of fault {r['fault']} (run {r['run']}) {why}; "
            f"scaled back to {oldest['replicas']}" for r in due]


def watch(apps: Any, namespaces: list[str], say: Callable[[str], None], interval_s: float = WATCH_INTERVAL_S,
          rounds: int | None = None, alive: Callable[[], None] | None = None) -> None:
    """The watchdog: every interval, every Deployment of the namespaces, from their annotations
    alone (rounds: how many, None for ever; a namespace that cannot be read is said and skipped)."""
    from kubernetes.client import ApiException

    done = 0
    while rounds is None or done < rounds:
        for namespace in namespaces:
            try:
                deployments = apps.list_namespaced_deployment(namespace).items
            except ApiException as error:
                say(f"cannot list deployments in {namespace}: HTTP {error.status} {error.reason}")
                continue
            for deployment in deployments:
                try:
                    for line in undo_expired(apps, namespace, deployment, time.time()):
                        say(line)
                except ApiException as error:
                    say(f"cannot scale {namespace}/{deployment.metadata.name} back: HTTP {error.status} {error.reason}")
        done += 1
        if alive is not None:
            alive()
        if rounds is None or done < rounds:
            time.sleep(interval_s)


HALT_CONFIGMAP = "drillbook-halt"  # in the target's namespace: the halt every run on it reads


class HaltNotReadable(ConfigError):
    """The runner may not read the halt: it is refused, since it could not be stopped."""


def halt_state(core: Any, namespace: str) -> dict[str, Any]:
    """{"halted": false}, or who halted the target, why and when, from the ConfigMap."""
    from kubernetes.client import ApiException

    try:
        data = core.read_namespaced_config_map(HALT_CONFIGMAP, namespace).data or {}
    except ApiException as error:
        if error.status == 404:
            return {"halted": False}
        if error.status == 403:  # a run that cannot see the halt button must not start
            raise HaltNotReadable(f"cannot read the halt (ConfigMap {HALT_CONFIGMAP} in {namespace}): not allowed; "
                                  f"grant get on it to the runner (deploy/rbac/runner.yaml)") from None
        raise
    return {"halted": True, "operator": data.get("operator", ""), "reason": data.get("reason", ""),
            "at": float(data.get("at", 0) or 0), "at_utc": data.get("at_utc", "")}


def halt(core: Any, apps: Any, namespace: str, deployments: list[tuple[str, str]], operator: str,
         reason: str) -> dict[str, Any]:
    """Write the halt where the runs read it, then scale back every Deployment a run holds a
    lease on (namespace, name), now, whoever holds it."""
    from kubernetes.client import ApiException

    now = time.time()
    data = {"operator": operator[:120], "reason": reason[:300], "at": repr(now),
            "at_utc": datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="seconds")}
    body = {"metadata": {"name": HALT_CONFIGMAP, "labels": {"app.kubernetes.io/managed-by": "drillbook"}}, "data": data}
    try:
        core.create_namespaced_config_map(namespace, body)
    except ApiException as error:
        if error.status != 409:
            raise
        core.replace_namespaced_config_map(HALT_CONFIGMAP, namespace, body)
    undone = []
    for where, name in deployments:
        try:
            deployment = apps.read_namespaced_deployment(name, where)
        except ApiException as error:
            if error.status == 404:
                continue
            raise
        undone += undo_expired(apps, where, deployment, now, every=True, kind="fault_undone_by_halt")
    return {"halted": True, **data, "at": now, "undone": undone}


def lift_halt(core: Any, namespace: str) -> dict[str, Any]:
    from kubernetes.client import ApiException

    was = halt_state(core, namespace)
    try:
        core.delete_namespaced_config_map(HALT_CONFIGMAP, namespace)
    except ApiException as error:
        if error.status != 404:
            raise
    return {"halted": False, "was": was}


def undone_records(annotations: dict[str, str] | None) -> list[dict[str, Any]]:
    """The watchdog's undo records on one object (fault_undone_by_watchdog events)."""
    found = []
    for key, value in (annotations or {}).items():
        if key.startswith(UNDONE_PREFIX):
            try:
                found.append(json.loads(value))
            except ValueError:
                continue
    return sorted(found, key=lambda record: record.get("t", 0))


__all__ = ["ClusterLeases", "LEASE_PREFIX", "UNDONE_PREFIX", "expired", "leases_on", "undo_expired", "undone_records",
           "watch"]
