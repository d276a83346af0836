"""Keeps N replicas of each sandbox service running and is the ground truth of what happened to them.

It starts replicas as child processes (which die with it), probes their readiness, restarts
exited replicas with exponential back-off, scales (to zero too), kills on request with a given
signal, and serves the state store's backup, restore and destroy. Every change is an event with
a precise UTC timestamp in an append-only JSONL log. Its control API binds 127.0.0.1 only and
wants the control token on every request.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import ipaddress
import json
import logging
import os
import signal
import sys
import time
import dataclasses
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from drillbook.config import SLOW_RESTART_S, STALE_STATUS_S, Defect
from drillbook.digest import file_sha256
from drillbook.errors import BackupError, StoreUnavailable
from drillbook.processes import die_with_parent
from drillbook.sandbox.leases import LeaseBook, LeaseError
from drillbook.sandbox.runtime import Runtime
from drillbook.sandbox.service import LOOPBACK, use_fast_event_loop
from drillbook.sandbox.store import BackupInfo, StateStore

log = logging.getLogger("drillbook.supervisor")

STOP_GRACE_S = 5.0
LEASE_WATCH_S = 0.5  # how often the watchdog looks for expired fault leases
PORT_ANNOUNCE_TIMEOUT_S = 30.0
STABLE_RUN_S = 10.0  # a replica that ran this long resets its restart back-off
PROBE_INTERVAL_STARTING_S = 0.02
PROBE_INTERVAL_READY_S = 0.25
PROBE_FAILURES_UNREADY = 2
SIGNALS = {name: getattr(signal, name) for name in ("SIGKILL", "SIGTERM", "SIGINT", "SIGSTOP", "SIGCONT", "SIGQUIT")}


def utc_iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


# Runs in the child before exec: SIGKILL it when the supervisor dies, so nothing is orphaned.
_die_with_parent = die_with_parent(signal.SIGKILL)


class EventLog:
    """Append-only JSONL of everything the supervisor saw or did."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.events: list[dict[str, Any]] = []
        self._handle = open(path, "a", encoding="utf-8")

    def emit(self, kind: str, **fields: Any) -> dict[str, Any]:
        now = time.time()
        event = {"seq": len(self.events) + 1, "ts": utc_iso(now), "t": now, "kind": kind, **fields}
        self.events.append(event)
        self._handle.write(json.dumps(event) + "\n")
        self._handle.flush()
        return event

    def close(self) -> None:
        self._handle.close()


@dataclass
class Replica:
    id: str
    service: str
    process: asyncio.subprocess.Process | None = None
    url: str | None = None
    state: str = "scheduled"
    ready: bool = False
    restarts: int = 0
    stopping: bool = False
    started_at: float | None = None
    ready_at: float | None = None
    task: asyncio.Task[None] | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "service": self.service, "pid": self.process.pid if self.process else None,
            "url": self.url, "state": self.state, "ready": self.ready, "restarts": self.restarts,
            "started_at": utc_iso(self.started_at) if self.started_at else None,
            "ready_at": utc_iso(self.ready_at) if self.ready_at else None,
        }


@dataclass
class Service:
    name: str
    desired: int
    replicas: dict[str, Replica] = field(default_factory=dict)
    created: int = 0
    consecutive_failures: int = 0

    def live(self) -> list[Replica]:
        return [r for r in self.replicas.values() if not r.stopping]


class ControlError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Supervisor:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        config = runtime.config
        self.services = {
            "model": Service("model", config.models),
            "agent": Service("agent", config.agents),
            "gateway": Service("gateway", config.gateways),
            "codebox": Service("codebox", config.codeboxes),  # code sandboxes for sessions
            "aggressor": Service("aggressor", 0),  # a noisy tenant, started by experiments
        }
        self.events = EventLog(runtime.events_file)
        self.store: StateStore = runtime.open_store()
        self.endpoints_version = 0
        self.endpoints_changed = asyncio.Event()
        self.shutdown = asyncio.Event()
        self.control_url = ""
        self.http: aiohttp.ClientSession | None = None
        self.store_lock = asyncio.Lock()
        # Per-tenant rate limits the gateways apply; changed at run time by the shed runbook.
        self.tenant_limits = {tenant: {"rps": config.rate_limit_rps, "burst": config.rate_limit_burst}
                              for tenant in runtime.tenant_keys}
        # Leases on the faults runs made here: undone by _watch_leases when their runner stops renewing.
        self.leases = LeaseBook()

    # -- endpoints ---------------------------------------------------------------------------
    def _bump_endpoints(self) -> None:
        self.endpoints_version += 1
        self.endpoints_changed.set()
        self.endpoints_changed = asyncio.Event()

    def set_tenant_limit(self, tenant: str, rps: float, burst: int) -> dict[str, Any]:
        if tenant not in self.tenant_limits:
            raise ControlError(404, f"no tenant {tenant!r}")
        if not (rps > 0 and burst >= 1):
            raise ControlError(400, "rps must be above 0 and burst at least 1")
        previous = self.tenant_limits[tenant]
        self.tenant_limits[tenant] = {"rps": float(rps), "burst": int(burst)}
        self.events.emit("tenant_limit_changed", tenant=tenant, previous=previous, limit=self.tenant_limits[tenant])
        self._bump_endpoints()  # gateways pick limits up with their endpoint watch
        return {"tenant": tenant, "previous": previous, "limit": self.tenant_limits[tenant]}

    def audit_sessions(self) -> dict[str, Any]:
        """Every stored session with its turn count, last turn time and whether its chain verifies."""
        from drillbook.sandbox.chain import verify_chain

        sessions = []
        for session in self.store.sessions():
            turns = self.store.turns(session.id)
            check = verify_chain(session.id, turns)
            sessions.append({"session_id": session.id, "tenant": session.tenant, "turns": len(turns),
                             "last_turn_at": turns[-1].created_at if turns else None, "chain_ok": check.ok,
                             "broken_at": check.broken_at})
        return {"sessions": sessions}

    def endpoints_snapshot(self) -> dict[str, Any]:
        return {
            "version": self.endpoints_version,
            "limits": self.tenant_limits,
            "services": {
                name: {"desired": svc.desired,
                       "ready": [{"replica": r.id, "url": r.url} for r in svc.replicas.values()
                                 if r.ready and not r.stopping]}
                for name, svc in self.services.items()
            },
        }

    # -- replicas ----------------------------------------------------------------------------
    def _command(self, replica: Replica) -> list[str]:
        argv = [sys.executable, "-m", f"drillbook.sandbox.{replica.service}",
                "--runtime", str(self.runtime.runtime_file), "--replica", replica.id,
                "--control-url", self.control_url]
        if replica.service == "gateway":
            argv += ["--port", str(self.runtime.gateway_port)]
        return argv

    def reconcile(self, service: Service) -> None:
        live = service.live()
        for _ in range(service.desired - len(live)):
            service.created += 1
            replica = Replica(f"{service.name}-{service.created}", service.name)
            service.replicas[replica.id] = replica
            self.events.emit("replica_scheduled", service=service.name, replica=replica.id)
            replica.task = asyncio.create_task(self._keep_running(service, replica))
        surplus = len(live) - service.desired
        if surplus > 0:
            # Like a ReplicaSet: not-ready replicas go first, then the newest.
            victims = sorted(live, key=lambda r: (r.ready, -(r.started_at or 0.0)))[:surplus]
            for replica in victims:
                asyncio.create_task(self._stop_replica(replica, reason="scaled down"))

    async def _spawn(self, replica: Replica) -> asyncio.subprocess.Process:
        self.runtime.logs_dir.mkdir(parents=True, exist_ok=True)
        with open(self.runtime.logs_dir / f"{replica.id}.log", "ab") as log_file:
            process = await asyncio.create_subprocess_exec(
                *self._command(replica), stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=log_file, preexec_fn=_die_with_parent,
            )
        replica.process = process
        replica.started_at = time.time()
        replica.state = "started"
        self.events.emit("replica_started", service=replica.service, replica=replica.id, pid=process.pid,
                         restarts=replica.restarts)
        return process

    async def _announced_port(self, process: asyncio.subprocess.Process) -> int | None:
        assert process.stdout is not None
        try:
            line = await asyncio.wait_for(process.stdout.readline(), PORT_ANNOUNCE_TIMEOUT_S)
            return int(json.loads(line)["port"])
        except (asyncio.TimeoutError, ValueError, KeyError, json.JSONDecodeError):
            return None

    async def _keep_running(self, service: Service, replica: Replica) -> None:
        """One replica's life: start, probe, and after an exit restart with back-off until stopped."""
        while not replica.stopping and not self.shutdown.is_set():
            process = await self._spawn(replica)
            port = await self._announced_port(process)
            probe: asyncio.Task[None] | None = None
            if port is None:
                log.error("%s did not announce its port; killing it", replica.id)
                process.kill()
            else:
                replica.url = f"http://{LOOPBACK}:{port}"
                replica.state = "running"
                probe = asyncio.create_task(self._probe(replica))
            returncode = await process.wait()
            if probe is not None:
                probe.cancel()
            was_ready = replica.ready
            replica.ready = False
            replica.state = "exited"
            ran_for = time.time() - (replica.started_at or time.time())
            exit_fields: dict[str, Any] = {"code": returncode}
            if returncode < 0:
                exit_fields = {"signal": signal.Signals(-returncode).name}
            self.events.emit("replica_exited", service=service.name, replica=replica.id, ran_s=round(ran_for, 6),
                             **exit_fields)
            if was_ready:
                self._bump_endpoints()
            if replica.stopping or self.shutdown.is_set():
                break
            if ran_for >= STABLE_RUN_S:
                service.consecutive_failures = 0
            config = self.runtime.config
            delay = min(config.restart_backoff_max_s, config.restart_backoff_s * 2 ** service.consecutive_failures)
            if config.has(Defect.SLOW_RESTART):
                delay = max(delay, SLOW_RESTART_S)
            service.consecutive_failures += 1
            replica.restarts += 1
            replica.state = "backoff"
            self.events.emit("replica_restart_scheduled", service=service.name, replica=replica.id,
                             delay_s=round(delay, 3), restarts=replica.restarts)
            try:
                await asyncio.wait_for(replica.wake.wait(), delay)
            except asyncio.TimeoutError:
                pass
        service.replicas.pop(replica.id, None)

    async def _probe(self, replica: Replica) -> None:
        assert self.http is not None and replica.url is not None
        failures = 0
        while True:
            try:
                async with self.http.get(replica.url + "/ready", timeout=aiohttp.ClientTimeout(total=1.0)) as response:
                    ok = response.status == 200
                    reason = "" if ok else (await response.text())[:200]
            except (aiohttp.ClientError, asyncio.TimeoutError) as error:
                ok, reason = False, type(error).__name__
            if ok:
                failures = 0
                if not replica.ready:
                    replica.ready = True
                    replica.ready_at = time.time()
                    replica.state = "ready"
                    self.events.emit("replica_ready", service=replica.service, replica=replica.id,
                                     since_start_s=round(replica.ready_at - (replica.started_at or 0.0), 6))
                    self._bump_endpoints()
            elif replica.ready:
                failures += 1
                if failures >= PROBE_FAILURES_UNREADY:
                    replica.ready = False
                    replica.state = "unready"
                    self.events.emit("replica_unready", service=replica.service, replica=replica.id, reason=reason)
                    self._bump_endpoints()
            await asyncio.sleep(PROBE_INTERVAL_READY_S if replica.ready else PROBE_INTERVAL_STARTING_S)

    async def _stop_replica(self, replica: Replica, reason: str) -> None:
        replica.stopping = True
        replica.wake.set()
        was_ready = replica.ready
        replica.ready = False
        if was_ready:
            self._bump_endpoints()
        process = replica.process
        self.events.emit("replica_stopping", service=replica.service, replica=replica.id, reason=reason)
        if process is not None and process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), STOP_GRACE_S)
            except asyncio.TimeoutError:
                process.kill()
                await process.wait()
        if replica.task is not None:
            await replica.task

    # -- operations the control API offers ---------------------------------------------------
    def service(self, name: str) -> Service:
        if name not in self.services:
            raise ControlError(404, f"unknown service {name!r}; known: {', '.join(self.services)}")
        return self.services[name]

    def scale(self, name: str, replicas: int, reason: str, only_from: int | None = None) -> dict[str, Any]:
        """Set a tier's desired replicas. only_from: only when it is at that count now (the
        activator scales from zero only: a tier someone scaled up meanwhile is never lowered)."""
        service = self.service(name)
        if replicas < 0 or (name == "gateway" and replicas < 1):
            raise ControlError(400, f"replicas for {name} must be >= {1 if name == 'gateway' else 0}")
        previous = service.desired
        if only_from is not None and previous != only_from:
            return {"service": name, "from": previous, "to": previous,
                    "skipped": f"{name} is at {previous}, not {only_from}"}
        service.desired = replicas
        self.events.emit("scaled", service=name, **{"from": previous, "to": replicas}, reason=reason)
        self._bump_endpoints()
        self.reconcile(service)
        return {"service": name, "from": previous, "to": replicas}

    def kill(self, name: str, count: int, signal_name: str, replica_ids: list[str] | None) -> dict[str, Any]:
        service = self.service(name)
        if signal_name not in SIGNALS:
            raise ControlError(400, f"unknown signal {signal_name!r}; use one of {', '.join(SIGNALS)}")
        running = [r for r in service.live() if r.process is not None and r.process.returncode is None]
        if replica_ids:
            unknown = [rid for rid in replica_ids if rid not in {r.id for r in running}]
            if unknown:
                raise ControlError(404, f"no running replica {', '.join(unknown)} of {name}")
            targets = [r for r in running if r.id in replica_ids]
        else:
            if count < 1:
                raise ControlError(400, "count must be >= 1")
            if count > len(running):
                raise ControlError(409, f"{name} has {len(running)} running replicas, cannot kill {count}")
            targets = sorted(running, key=lambda r: (not r.ready, r.id))[:count]
        for replica in targets:
            assert replica.process is not None
            self.events.emit("replica_killed", service=name, replica=replica.id, pid=replica.process.pid,
                             signal=signal_name)
            if not self.runtime.config.has(Defect.NOOP_KILL):
                replica.process.send_signal(SIGNALS[signal_name])
        return {"service": name, "killed": [r.id for r in targets], "signal": signal_name}

    def status(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "control_url": self.control_url,
            "gateway_url": self.runtime.gateway_url,
            "defects": [d.value for d in self.runtime.config.defects],
            "store": self.runtime.config.store,
            "services": {
                name: {"desired": svc.desired,
                       "ready": sum(1 for r in svc.replicas.values() if r.ready and not r.stopping),
                       "replicas": [r.to_json() for r in svc.replicas.values()]}
                for name, svc in self.services.items()
            },
        }

    def backups(self) -> list[BackupInfo]:
        infos = []
        for meta in sorted(self.runtime.backups_dir.glob("*.json")):
            infos.append(BackupInfo(**json.loads(meta.read_text())))
        return infos

    async def backup(self) -> dict[str, Any]:
        if self.runtime.config.has(Defect.NO_BACKUPS):
            self.events.emit("backup_skipped", reason="backups disabled (defect no-backups)")
            return {"created": False, "reason": "backups are disabled on this sandbox"}
        async with self.store_lock:
            started = time.time()
            info = await asyncio.to_thread(self.store.backup, self.runtime.backups_dir)
            if self.runtime.config.has(Defect.EMPTY_BACKUPS):
                info = await asyncio.to_thread(hollow_backup, info, self.runtime.backups_dir)
        self.events.emit("backup_created", backup=info.id, sessions=info.sessions, turns=info.turns,
                         size_bytes=info.size_bytes, duration_s=round(time.time() - started, 6))
        return {"created": True, "backup": info.to_json()}

    async def restore(self, backup_id: str) -> dict[str, Any]:
        infos = self.backups()
        if not infos:
            raise ControlError(409, "there is no backup to restore")
        chosen = infos[-1] if backup_id == "latest" else next((b for b in infos if b.id == backup_id), None)
        if chosen is None:
            raise ControlError(404, f"no backup {backup_id!r}")
        if file_sha256(Path(chosen.path)) != chosen.sha256:
            raise ControlError(409, f"backup {chosen.id} does not match its recorded sha256")
        async with self.store_lock:
            self.events.emit("store_restore_started", backup=chosen.id)
            started = time.time()
            if not self.runtime.config.has(Defect.NOOP_RESTORE):
                await asyncio.to_thread(self.store.restore, Path(chosen.path))
        self.events.emit("store_restored", backup=chosen.id, duration_s=round(time.time() - started, 6))
        return {"restored": chosen.to_json()}

    async def destroy_store(self) -> dict[str, Any]:
        if not self.runtime.config.has(Defect.NOOP_DESTROY):
            async with self.store_lock:
                await asyncio.to_thread(self.store.destroy)
        self.events.emit("store_destroyed", store=self.runtime.config.store)
        return {"destroyed": self.runtime.config.store}

    async def recreate_store(self) -> dict[str, Any]:
        """An empty store with the schema: the last resort of a rollback when no backup exists."""
        async with self.store_lock:
            await asyncio.to_thread(self.store.init_schema)
        self.events.emit("store_recreated", store=self.runtime.config.store)
        return {"recreated": self.runtime.config.store}

    async def store_info(self) -> dict[str, Any]:
        try:
            sessions, turns = await asyncio.to_thread(self.store.counts)
        except StoreUnavailable as error:
            return {"kind": self.runtime.config.store, "healthy": False, "reason": str(error)}
        return {"kind": self.runtime.config.store, "healthy": True, "sessions": sessions, "turns": turns}

    # -- halt --------------------------------------------------------------------------------
    @property
    def _halt_file(self) -> Path:
        return self.runtime.state_dir / "halt.json"

    def halt_state(self) -> dict[str, Any]:
        """{"halted": false}, or who halted this target, why and when (kept across restarts)."""
        try:
            return {"halted": True, **json.loads(self._halt_file.read_text())}
        except (OSError, ValueError):
            return {"halted": False}

    async def halt(self, operator: str, reason: str) -> dict[str, Any]:
        """Stop every drill on this target: runs see it within their next look (drillbook.halt) and
        stop; every leased fault is undone now, whoever holds it; new runs refuse until lifted."""
        now = time.time()
        state = {"operator": operator, "reason": reason, "at": now, "at_utc": utc_iso(now)}
        write_json_atomic(self._halt_file, state)
        self.events.emit("halted", operator=operator, reason=reason)
        undone = []
        for lease in list(self.leases.leases.values()):
            self.leases.release(lease.fault)
            try:
                what = await self._undo(lease.undo, f"halted by {operator}: {reason}")
            except Exception as error:  # noqa: BLE001 - one failed undo must not stop the others
                self.events.emit("fault_halt_undo_failed", run=lease.run, fault=lease.fault, error=str(error))
                continue
            self.events.emit("fault_undone_by_halt", run=lease.run, fault=lease.fault, what=lease.what, undone=what)
            undone.append(what)
        return {"halted": True, **state, "undone": undone}

    def lift_halt(self) -> dict[str, Any]:
        was = self.halt_state()
        self._halt_file.unlink(missing_ok=True)
        if was["halted"]:
            self.events.emit("halt_lifted", operator=was.get("operator"), reason=was.get("reason"))
        return {"halted": False, "was": was}

    # -- fault leases ------------------------------------------------------------------------
    async def _watch_leases(self) -> None:
        """Undo each fault whose lease expired: its runner is gone (killed, its machine lost), and
        nothing but this supervisor knows the fault is still there."""
        while not self.shutdown.is_set():
            await asyncio.sleep(LEASE_WATCH_S)
            for lease in self.leases.expired(time.time()):
                try:
                    undone = await self._undo(lease.undo, f"the fault lease of run {lease.run} expired")
                except Exception as error:  # noqa: BLE001 - one failed undo must not stop the watchdog for the rest
                    self.events.emit("fault_lease_undo_failed", run=lease.run, fault=lease.fault, what=lease.what,
                                     error=str(error))
                    continue
                self.events.emit("fault_undone_by_watchdog", run=lease.run, fault=lease.fault, what=lease.what,
                                 undone=undone, lease_expired_at=lease.expires_at)

    async def _undo(self, undo: dict[str, Any], reason: str) -> str:
        """Do a lease's undo (leases.UNDO_FIELDS); says what was done."""
        if undo["op"] == "scale":
            self.scale(undo["service"], undo["replicas"], reason)
            return f"scaled {undo['service']} back to {undo['replicas']}"
        if self.backups():
            restored = await self.restore("latest")
            return f"restored the store from backup {restored['restored']['id']}"
        await self.recreate_store()
        return "recreated an empty store (no backup to restore)"

    # -- run ---------------------------------------------------------------------------------
    async def run(self) -> None:
        await asyncio.to_thread(self.store.init_schema, True)
        self.http = aiohttp.ClientSession()
        runner = web.AppRunner(control_app(self), access_log=None, handle_signals=False, shutdown_timeout=2.0)
        await runner.setup()
        site = web.TCPSite(runner, LOOPBACK, 0)
        await site.start()
        self.control_url = f"http://{LOOPBACK}:{runner.addresses[0][1]}"
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.shutdown.set)
        self.events.emit("sandbox_started", pid=os.getpid(), control_url=self.control_url,
                         gateway_url=self.runtime.gateway_url,
                         defects=[d.value for d in self.runtime.config.defects])
        write_json_atomic(self.runtime.state_dir / "sandbox.json", {
            "pid": os.getpid(), "control_url": self.control_url, "gateway_url": self.runtime.gateway_url,
            "started_at": utc_iso(time.time()),
        })
        for service in self.services.values():
            self.reconcile(service)
        watchdog = asyncio.create_task(self._watch_leases())
        await self.shutdown.wait()
        watchdog.cancel()
        self.events.emit("sandbox_stopping", open_leases=[lease.to_json() for lease in self.leases.leases.values()])
        replicas = [r for svc in self.services.values() for r in list(svc.replicas.values())]
        await asyncio.gather(*(self._stop_replica(r, reason="sandbox down") for r in replicas))
        self.events.emit("sandbox_stopped")
        self._bump_endpoints()  # releases long-polling watchers so the control API can close
        await runner.cleanup()
        await self.http.close()
        self.store.close()
        self.events.close()


def hollow_backup(info: BackupInfo, directory: Path) -> BackupInfo:
    """The empty-backups defect: the SQLite backup file keeps its schema and loses every row,
    while its record still claims the sessions and turns the store had."""
    import sqlite3

    conn = sqlite3.connect(info.path, isolation_level=None)
    try:
        conn.execute("DELETE FROM turns")
        conn.execute("DELETE FROM sessions")
        conn.execute("VACUUM")
    finally:
        conn.close()
    hollow = dataclasses.replace(info, size_bytes=Path(info.path).stat().st_size, sha256=file_sha256(Path(info.path)))
    write_json_atomic(directory / f"{info.id}.json", hollow.to_json())
    return hollow


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(payload, indent=2))
    os.replace(partial, path)


def control_app(supervisor: Supervisor) -> web.Application:
    token = supervisor.runtime.control_token

    @web.middleware
    async def guard(request: web.Request, handler: Any) -> web.StreamResponse:
        peer = request.remote or ""
        try:
            loopback = ipaddress.ip_address(peer).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            return web.json_response({"error": "control API is loopback-only"}, status=403)
        supplied = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(supplied.encode(), token.encode()):
            return web.json_response({"error": "missing or wrong control token"}, status=401)
        try:
            return await handler(request)
        except ControlError as error:
            return web.json_response({"error": str(error)}, status=error.status)
        except (BackupError, StoreUnavailable) as error:
            return web.json_response({"error": str(error)}, status=500)

    async def body_of(request: web.Request) -> dict[str, Any]:
        if not request.can_read_body:
            return {}
        try:
            body = await request.json()
        except json.JSONDecodeError:
            raise ControlError(400, "request body must be JSON") from None
        if not isinstance(body, dict):
            raise ControlError(400, "request body must be a JSON object")
        return body

    def integer(body: dict[str, Any], name: str, default: int | None = None) -> int:
        value = body.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ControlError(400, f"{name} must be an integer")
        return value

    seen: list[tuple[float, dict[str, Any]]] = []  # the stale-status defect's memory

    async def status(request: web.Request) -> web.Response:
        now = supervisor.status()
        if supervisor.runtime.config.has(Defect.STALE_STATUS):
            if not seen or time.time() - seen[0][0] >= STALE_STATUS_S:
                seen[:] = [(time.time(), now)]
            now = seen[0][1]
        return web.json_response(now)

    async def endpoints(request: web.Request) -> web.Response:
        after = int(request.query.get("after", "-1"))
        timeout = min(60.0, float(request.query.get("timeout", "0")))
        if supervisor.endpoints_version <= after and timeout > 0:
            try:
                await asyncio.wait_for(supervisor.endpoints_changed.wait(), timeout)
            except asyncio.TimeoutError:
                pass
        return web.json_response(supervisor.endpoints_snapshot())

    async def events(request: web.Request) -> web.Response:
        after = int(request.query.get("after", "0"))
        return web.json_response({"events": supervisor.events.events[after:]})

    async def scale(request: web.Request) -> web.Response:
        body = await body_of(request)
        only_from = body.get("only_from")
        return web.json_response(supervisor.scale(request.match_info["name"], integer(body, "replicas"),
                                                  str(body.get("reason", "control API")),
                                                  None if only_from is None else integer(body, "only_from")))

    async def kill(request: web.Request) -> web.Response:
        body = await body_of(request)
        replica_ids = body.get("replicas")
        if replica_ids is not None and not (isinstance(replica_ids, list) and all(isinstance(x, str) for x in replica_ids)):
            raise ControlError(400, "replicas must be a list of replica ids")
        return web.json_response(supervisor.kill(request.match_info["name"], integer(body, "count", 1),
                                                 str(body.get("signal", "SIGKILL")), replica_ids))

    async def store_info(request: web.Request) -> web.Response:
        return web.json_response(await supervisor.store_info())

    async def backups(request: web.Request) -> web.Response:
        return web.json_response({"backups": [b.to_json() for b in supervisor.backups()]})

    async def backup(request: web.Request) -> web.Response:
        return web.json_response(await supervisor.backup())

    async def restore(request: web.Request) -> web.Response:
        body = await body_of(request)
        return web.json_response(await supervisor.restore(str(body.get("backup", "latest"))))

    async def destroy(request: web.Request) -> web.Response:
        return web.json_response(await supervisor.destroy_store())

    async def recreate(request: web.Request) -> web.Response:
        return web.json_response(await supervisor.recreate_store())

    async def store_sessions(request: web.Request) -> web.Response:
        async with supervisor.store_lock:
            try:
                return web.json_response(await asyncio.to_thread(supervisor.audit_sessions))
            except StoreUnavailable as error:
                raise ControlError(503, f"the store cannot be read: {error}") from None

    async def tenants(request: web.Request) -> web.Response:
        return web.json_response({"limits": supervisor.tenant_limits})

    async def tenant_limit(request: web.Request) -> web.Response:
        body = await body_of(request)
        rps = body.get("rps")
        if isinstance(rps, bool) or not isinstance(rps, (int, float)):
            raise ControlError(400, "rps must be a number")
        return web.json_response(supervisor.set_tenant_limit(request.match_info["tenant"], float(rps),
                                                             integer(body, "burst")))

    async def grant_lease(request: web.Request) -> web.Response:
        try:
            lease = supervisor.leases.grant(await body_of(request), time.time())
        except LeaseError as error:
            raise ControlError(400, str(error)) from None
        supervisor.events.emit("fault_leased", run=lease.run, fault=lease.fault, what=lease.what,
                               expires_at=lease.expires_at)
        return web.json_response(lease.to_json())

    async def renew_leases(request: web.Request) -> web.Response:
        try:
            return web.json_response({"renewed": supervisor.leases.renew((await body_of(request)).get("runs"),
                                                                        time.time())})
        except LeaseError as error:
            raise ControlError(400, str(error)) from None

    async def release_lease(request: web.Request) -> web.Response:
        lease = supervisor.leases.release(request.match_info["fault"])
        if lease is not None:
            supervisor.events.emit("fault_lease_released", run=lease.run, fault=lease.fault)
        return web.json_response({"released": lease is not None})

    async def leases(request: web.Request) -> web.Response:
        return web.json_response({"leases": [lease.to_json() for lease in supervisor.leases.leases.values()]})

    async def halt_state(request: web.Request) -> web.Response:
        return web.json_response(supervisor.halt_state())

    async def halt(request: web.Request) -> web.Response:
        body = await body_of(request)
        operator, reason = str(body.get("operator") or "").strip(), str(body.get("reason") or "").strip()
        if not operator:
            raise ControlError(400, "a halt names its operator")
        return web.json_response(await supervisor.halt(operator[:120], reason[:300]))

    async def lift(request: web.Request) -> web.Response:
        return web.json_response(supervisor.lift_halt())

    async def shutdown(request: web.Request) -> web.Response:
        asyncio.get_running_loop().call_soon(supervisor.shutdown.set)
        return web.json_response({"stopping": True}, status=202)

    app = web.Application(middlewares=[guard])
    app.router.add_get("/v1/status", status)
    app.router.add_get("/v1/endpoints", endpoints)
    app.router.add_get("/v1/events", events)
    app.router.add_post("/v1/services/{name}/scale", scale)
    app.router.add_post("/v1/services/{name}/kill", kill)
    app.router.add_get("/v1/store", store_info)
    app.router.add_get("/v1/store/backups", backups)
    app.router.add_post("/v1/store/backup", backup)
    app.router.add_post("/v1/store/restore", restore)
    app.router.add_post("/v1/store/destroy", destroy)
    app.router.add_post("/v1/store/recreate", recreate)
    app.router.add_get("/v1/store/sessions", store_sessions)
    app.router.add_get("/v1/tenants", tenants)
    app.router.add_post("/v1/tenants/{tenant}/limit", tenant_limit)
    app.router.add_get("/v1/leases", leases)
    app.router.add_post("/v1/leases", grant_lease)
    app.router.add_post("/v1/leases/renew", renew_leases)
    app.router.add_delete("/v1/leases/{fault}", release_lease)
    app.router.add_get("/v1/halt", halt_state)
    app.router.add_post("/v1/halt", halt)
    app.router.add_delete("/v1/halt", lift)
    app.router.add_post("/v1/shutdown", shutdown)
    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="drillbook sandbox supervisor (started by `drillbook sandbox up`)")
    parser.add_argument("--runtime", type=Path, required=True)
    args = parser.parse_args(argv)
    # The store, its backups and every file the services write hold the tenants' sessions: for
    # this user only (0600, folders 0700), in this process and the services it starts.
    os.umask(0o077)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s supervisor %(levelname)s %(message)s")
    use_fast_event_loop()
    asyncio.run(Supervisor(Runtime.read(args.runtime)).run())


if __name__ == "__main__":
    main()
