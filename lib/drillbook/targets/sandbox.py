"""The local reference platform as a target, driven through its supervisor's control API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from drillbook.config import fault_lease_s
from drillbook.errors import ControlApiError
from drillbook.observation import ReplicaObservation, observe_replicas
from drillbook.profile import LoadedProfile, builtin_sandbox
from drillbook.targets.platform import diagnose, model_server_metrics
from drillbook.targets.capabilities import SANDBOXES, TargetCheck
from drillbook.heartbeat import LeaseHeartbeat

SANDBOX_SERVICES = {"agent": "agent", "inference": "model", "state_store": "store"}


SANDBOX_CHILD = "sandbox"  # its kind in the process ledger (drillbook.processes.STOP_GRACE_S)


class SandboxPlatform:
    """The reference platform as a game day starts it when it finds none running, and stops it after."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.handle: Any = None
        self.entry: Any = None

    def running(self) -> bool:
        from drillbook.sandbox import launcher

        return launcher.find(self.state_dir) is not None

    def _ledger(self) -> Any:
        from drillbook.processes import PROCESSES, ProcessLedger

        return ProcessLedger(self.state_dir / PROCESSES)

    def start(self) -> None:
        """Start it, and write its supervisor down as this process's child: if this process dies
        (SIGKILL) before stop(), `drillbook rollback --state-dir` stops it."""
        from drillbook.config import SandboxConfig
        from drillbook.sandbox import launcher

        self.handle = launcher.start(SandboxConfig(), self.state_dir)
        self.entry = self._ledger().started(SANDBOX_CHILD, self.handle.pid, f"sandbox on {self.state_dir}")

    def stop(self) -> None:
        from drillbook.sandbox import launcher

        if self.handle is not None and launcher.find(self.state_dir) is not None:
            launcher.stop(self.state_dir, handle=self.handle)
        if self.entry is not None:
            self._ledger().stopped(self.entry, "stopped by the game day that started it")
        self.handle = self.entry = None


class SandboxTarget:
    """The sandbox's services by role (agent, inference) or by their own names (aggressor)."""

    name = "sandbox"
    kind = "sandbox"

    def __init__(self, state_dir: Path, profile: LoadedProfile | None = None) -> None:
        from drillbook.sandbox import launcher

        self.profile = profile or builtin_sandbox()
        self.api = self.profile.spec.api
        self.handle = launcher.require(Path(state_dir))
        self.heartbeat = LeaseHeartbeat(self._renew_leases, fault_lease_s(), away=(ControlApiError,))

    granted = "the reference platform"

    def refusals(self, needs: Any) -> list[str]:
        """The reference platform offers everything a declared scenario needs, but code sandboxes
        on a machine without bubblewrap."""
        if not any(where == SANDBOXES for where, _ in needs):
            return []
        try:
            isolation = self.sandbox_fleet().get("isolation", {})
        except Exception as error:  # noqa: BLE001 - said as the reason, not raised: this is a check
            return [f"its code sandbox service does not answer: {type(error).__name__}: {error}"[:300]]
        return [] if isolation.get("available") else [str(isolation.get("why_not") or "no code sandboxes")]

    def undeclared(self, needs: Any) -> list[str]:
        return []

    def readings(self) -> list[Any]:
        """The supervisor's status of each service and the store's health."""
        with self._control() as control:
            status = control.status()
            found = [TargetCheck(f"{name} status", True, f"desired {s.get('desired')}, ready {s.get('ready')}")
                     for name, s in sorted(status["services"].items())]
            store = control.store()
        return found + [TargetCheck("store healthy", bool(store.get("healthy")), str(store)[:160])]

    def service(self, role: str) -> str:
        spec = self.profile.spec.workload.agent if role == "agent" else \
            self.profile.spec.workload.inference if role == "inference" else None
        return (spec.service if spec and spec.service else None) or SANDBOX_SERVICES.get(role, role)

    def platform_running(self) -> bool:
        """The supervisor this target opened still runs (not a new sandbox on the same folder)."""
        from drillbook.sandbox import launcher

        found = launcher.find(self.handle.state_dir)
        return found is not None and found.pid == self.handle.pid

    def _control(self):  # noqa: ANN202 - a ControlClient context manager
        return self.handle.control()

    def _status(self, role: str) -> dict[str, Any]:
        with self._control() as control:
            return control.status()["services"][self.service(role)]

    def has(self, role: str) -> bool:
        with self._control() as control:
            return self.service(role) in control.status()["services"]

    def kill(self, role: str, count: int, signal: str) -> list[str]:
        with self._control() as control:
            return list(control.kill(self.service(role), count=count, signal=signal)["killed"])

    def desired(self, role: str) -> int:
        return int(self._status(role)["desired"])

    def ready(self, role: str) -> int:
        return int(self._status(role)["ready"])

    def observe(self, role: str) -> ReplicaObservation:
        """One status read; a ready replica is known by its id and its process id."""
        def read() -> tuple[int, int, list[str]]:
            status = self._status(role)
            ids = [f"{r['id']}@{r['pid']}" for r in status["replicas"] if r.get("ready")]
            return int(status["desired"]), int(status["ready"]), ids

        return observe_replicas(read)

    def scale(self, role: str, replicas: int) -> None:
        with self._control() as control:
            control.scale(self.service(role), replicas, reason="chaos")

    def settled(self, role: str) -> bool:
        info = self._status(role)
        return info["ready"] == info["desired"] == len(info["replicas"])

    def replica_urls(self, role: str) -> list[str]:
        return [r["url"] for r in self._status(role)["replicas"] if r["url"]]

    # CodeSandboxes: the codebox service's sandboxes, through the gateway and its internal routes
    def sandbox_session(self, tenant: str) -> Any:
        from drillbook.codeboxes import new_session

        gateway, keys = self.gateway()
        return new_session(gateway, self.api, keys[tenant], tenant)

    def _codebox(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        import httpx

        urls = self.replica_urls("codebox")
        if not urls:
            raise RuntimeError("the code sandbox service has no running replica")
        answer = httpx.request(method, urls[0] + path, timeout=30, **kwargs,
                               headers={"X-Drillbook-Internal-Token": self.handle.runtime.internal_token})
        answer.raise_for_status()
        return answer.json()

    def sandbox_fleet(self) -> dict[str, Any]:
        return self._codebox("GET", "/internal/v1/sandboxes")

    def kill_sandbox(self, sandbox_id: str, signal: str = "SIGKILL") -> dict[str, Any]:
        return self._codebox("POST", f"/internal/v1/sandboxes/{sandbox_id}/kill", json={"signal": signal})

    # Halting: the supervisor keeps the halt and undoes the leased faults itself
    def halt_state(self) -> dict[str, Any]:
        with self._control() as control:
            return control.halt_state()

    def halt(self, operator: str, reason: str) -> dict[str, Any]:
        with self._control() as control:
            return control.halt(operator, reason)

    def lift_halt(self) -> dict[str, Any]:
        with self._control() as control:
            return control.lift_halt()

    def kill_sandbox_service(self) -> None:
        self.kill("codebox", 1, "SIGKILL")

    def sandbox_service_killable(self) -> bool:
        return True

    def sandbox_alive(self, sandbox: dict[str, Any]) -> bool | None:
        from drillbook.processes import start_ticks

        return None if not sandbox.get("pid") else start_ticks(int(sandbox["pid"])) is not None

    def escape_targets(self, tenant: str, session: str) -> list[dict[str, Any]]:
        """The platform's loopback ports (gateway, control API, every replica) and files (the
        runtime file with its keys, the store, another session's kept workspace), and places to
        write outside a workspace."""
        from urllib.parse import urlsplit

        runtime, state = self.handle.runtime, self.handle.state_dir
        found = [{"name": "gateway", "kind": "tcp", "address": urlsplit(self.handle.gateway_url).netloc},
                 {"name": "control API", "kind": "tcp", "address": urlsplit(self.handle.control_url).netloc}]
        with self._control() as control:
            services = control.status()["services"]
        for name, service in sorted(services.items()):
            for replica in service["replicas"]:
                if replica.get("url"):
                    found.append({"name": f"{name} {replica['id']}", "kind": "tcp",
                                  "address": urlsplit(replica["url"]).netloc})
        if runtime.config.store == "postgres" and runtime.config.dsn:
            dsn = urlsplit(runtime.config.dsn)
            found.append({"name": "store", "kind": "tcp", "address": f"{dsn.hostname}:{dsn.port or 5432}"})
        found += [{"name": "platform secrets (runtime file)", "kind": "read", "address": str(state / "runtime.json")},
                  {"name": "another session's workspace", "kind": "read",
                   "address": str(state / "codebox" / "workspaces" / tenant / session)},
                  {"name": "the platform's state folder", "kind": "write", "address": str(state)},
                  {"name": "the system's temporary folder", "kind": "write", "address": "/tmp"},
                  {"name": "/usr", "kind": "write", "address": "/usr"}]
        if runtime.config.store == "sqlite":
            found.append({"name": "store", "kind": "read", "address": str(runtime.store_path)})
        return found

    # TenantMetrics: the model server's per-tenant metrics
    def tenant_metrics(self) -> dict[str, dict[str, float]]:
        return model_server_metrics(self.replica_urls("inference"), self.handle.runtime.internal_token)

    # Diagnostics: the reference platform's own metrics and slowest requests, for triage
    def diagnose(self, window_s: float, notable: set[str]) -> dict[str, Any]:
        return diagnose(self.handle, window_s, notable)

    # StoreCatalog: the supervisor lists backups and stored sessions
    def backups(self) -> list[dict[str, Any]]:
        with self._control() as control:
            return control.backups()

    def store_sessions(self) -> list[dict[str, Any]]:
        with self._control() as control:
            return control.store_sessions()

    # TenantLimits: the gateway's per-tenant rate limit {rps, burst}
    def tenant_limits(self) -> dict[str, dict[str, Any]]:
        with self._control() as control:
            return control.tenant_limits()

    def lowered_limit(self, current: dict[str, Any], rps: float, burst: int, quota: str) -> dict[str, Any]:
        return {"rps": float(rps), "burst": int(burst)}

    # FaultLeases: the supervisor leases every scale and store destruction a run makes (a kill needs
    # none: the supervisor replaces a killed replica anyway)
    def lease_fault(self, fault: Any) -> None:
        from drillbook.sandbox.leases import UNDO_FIELDS

        if fault.undo.get("op") not in UNDO_FIELDS:
            return
        undo = dict(fault.undo)
        if undo["op"] == "scale":  # the ledger names a role (inference); the supervisor its service (model)
            undo["service"] = self.service(undo["service"])
        with self._control() as control:
            control.lease(fault.id, fault.run_id, f"{fault.kind} {json.dumps(fault.detail, sort_keys=True)}"[:500],
                          undo, self.heartbeat.seconds)
        self.heartbeat.hold(fault.id, fault.run_id)

    def _renew_leases(self, runs: list[str]) -> None:
        with self.handle.control() as control:
            control.renew_leases(runs)

    def release_fault(self, fault: Any) -> None:
        self.heartbeat.release(fault.id)
        try:
            with self._control() as control:
                control.release_lease(fault.id)
        except ControlApiError:
            pass  # a platform that stopped holds no lease (it starts clean)

    def set_tenant_limit(self, tenant: str, limit: dict[str, Any]) -> None:
        with self._control() as control:
            control.set_tenant_limit(tenant, float(limit["rps"]), int(limit["burst"]))

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
        """Supervisor events, with `service` also given as its role (model -> inference)."""
        roles = {service: role for role, service in SANDBOX_SERVICES.items()}
        with self._control() as control:
            return [{**e, "role": roles.get(e.get("service", ""), e.get("service"))} for e in control.events()]

    def gateway(self) -> tuple[str, dict[str, str]]:
        return self.handle.gateway_url, self.handle.tenant_keys

    def secrets(self) -> list[str]:
        """Values that must never appear in evidence."""
        return [*self.handle.tenant_keys.values(), self.handle.runtime.control_token,
                self.handle.runtime.internal_token]
