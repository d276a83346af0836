"""Code sandboxes for agent sessions: a warm pool, claims, runs, and workspaces that outlive sandboxes.

A session claims a sandbox (`POST /v1/sessions/{id}/sandbox`, through the gateway, so tenant
keys and rate limits apply): a warm one from the pool when there is one, else one booted for it
(cold). Its code runs in it (`POST .../sandbox/runs`); its workspace is persisted per session
after every run and restored into the next sandbox the session claims, so losing a sandbox loses
no finished work. An idle claim is released after `codebox_idle_s`. The pool is refilled in the
background, `codebox_boot_concurrency` boots at a time, each taking `codebox_boot_s` (the image
and runtime start a real sandbox pays).

A sandbox whose process dies (killed, out of memory) is forgotten at once: its claim is dropped,
never left stuck, and the session's next call claims another. The platform's operators (and
drillbook) list sandboxes and kill them on the internal routes, with the internal token.

Isolation is drillbook.sandbox.isolation's: bubblewrap and cgroups. Defects: no-isolation (code
runs as a plain subprocess), no-warm-pool (every claim boots), workspace-lost (nothing persisted),
and noop-kill (a sandbox kill is answered, and nothing dies).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import shutil
import signal
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from drillbook.config import Defect
from drillbook.sandbox import isolation
from drillbook.sandbox.service import HEADER_INTERNAL_TOKEN, HEADER_TENANT, ServiceContext, run_service

log = logging.getLogger("drillbook.codebox")

IDLE_SWEEP_S = 1.0
RUN_TIMEOUT_MAX_S = 120.0
EVENTS_KEPT = 2000


@dataclass
class CodeSandbox:
    id: str
    folder: Path
    process: asyncio.subprocess.Process | None = None
    groups: isolation.CgroupSet = field(default_factory=isolation.CgroupSet)
    state: str = "booting"  # booting, warm, claimed, dead
    warm: bool = True  # booted for the pool (False: booted for the claim that waited for it)
    tenant: str | None = None
    session: str | None = None
    booted_at: float | None = None
    claimed_at: float | None = None
    last_used: float = 0.0
    runs: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def workspace(self) -> Path:
        return self.folder / "workspace"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "pid": self.pid, "state": self.state, "warm": self.warm, "tenant": self.tenant,
                "session": self.session, "booted_at": self.booted_at, "claimed_at": self.claimed_at,
                "runs": self.runs, "running": self.lock.locked()}


class BootSlots:
    """So many boots at a time; a claim waiting for its sandbox goes before the pool's refills."""

    CLAIM, POOL = 0, 1

    def __init__(self, slots: int) -> None:
        self.free = slots
        self.waiting: tuple[deque[asyncio.Future[None]], ...] = (deque(), deque())

    async def acquire(self, priority: int) -> None:
        if self.free and not any(self.waiting):
            self.free -= 1
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting[priority].append(granted)
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self.release()  # granted as it was cancelled: pass the slot on
            else:
                self.waiting[priority].remove(granted)
            raise

    def release(self) -> None:
        for queue in self.waiting:
            while queue:
                granted = queue.popleft()
                if not granted.done():
                    granted.set_result(None)
                    return
        self.free += 1


class SandboxLost(Exception):
    """The sandbox died while it ran the session's code."""


class CodeboxService:
    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        config = ctx.runtime.config
        self.config = config
        self.store = ctx.runtime.open_store()
        self.root = ctx.runtime.state_dir / "codebox"
        self.live_dir: Path | None = None  # the running sandboxes' folders (isolation.live_folder), made at start
        self.workspaces_dir = self.root / "workspaces"
        self.isolated = not config.has(Defect.NO_ISOLATION)
        self.pool_size = config.codebox_pool  # what it says it keeps; no-warm-pool keeps none
        self.keeps_pool = not config.has(Defect.NO_WARM_POOL)
        self.persist = not config.has(Defect.WORKSPACE_LOST)
        self.limits = isolation.Limits(config.codebox_memory_mib * 1024 * 1024, config.codebox_pids,
                                       config.codebox_cpus)
        self.cgroups = isolation.Cgroups(f"drillbook-codebox-{os.getpid()}") if self.isolated else None
        self.as_root = os.geteuid() == 0
        self.sandboxes: dict[str, CodeSandbox] = {}
        self.claims: dict[str, CodeSandbox] = {}  # session id -> its sandbox
        self.claiming: dict[str, asyncio.Lock] = {}  # one claim at a time per session
        self.booting = BootSlots(config.codebox_boot_concurrency)
        self.pool_changed = asyncio.Event()
        self.counter = itertools.count(1)
        self.events: list[dict[str, Any]] = []
        self.tasks: set[asyncio.Task[Any]] = set()
        self.unavailable = "" if not self.isolated or isolation.bwrap_path() else (
            "bubblewrap (bwrap) is not installed: code sandboxes need it")

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self, app: web.Application) -> None:
        self.workspaces_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)  # the kept workspaces: the service's alone
        self.live_dir = await asyncio.to_thread(isolation.live_folder, self.root / "live-folder")
        self._spawn(self._keep_pool())
        self._spawn(self._release_idle())

    async def stop(self, app: web.Application) -> None:
        for task in list(self.tasks):
            task.cancel()
        for sandbox in list(self.sandboxes.values()):
            await self._destroy(sandbox, "service stopping")
        if self.cgroups is not None:
            self.cgroups.close()
        if self.live_dir is not None:  # a start that failed before making it has nothing to remove
            shutil.rmtree(self.live_dir, ignore_errors=True)

    def _spawn(self, coroutine: Any) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    def event(self, kind: str, **fields: Any) -> None:
        self.events.append({"t": time.time(), "kind": kind, **fields})
        del self.events[:-EVENTS_KEPT]

    # -- the pool ----------------------------------------------------------------------------
    def warm(self) -> list[CodeSandbox]:
        return [s for s in self.sandboxes.values() if s.state == "warm"]

    async def _keep_pool(self) -> None:
        while True:
            booting = [s for s in self.sandboxes.values() if s.state == "booting" and s.warm]
            missing = self.pool_size - len(self.warm()) - len(booting)
            if missing > 0 and self.keeps_pool and not self.unavailable:
                for _ in range(missing):
                    self._spawn(self._boot_for_pool())
            self.pool_changed.clear()
            try:
                await asyncio.wait_for(self.pool_changed.wait(), 1.0)
            except asyncio.TimeoutError:
                pass

    async def _boot_for_pool(self) -> None:
        try:
            await self._boot(warm=True)
        except Exception as error:  # noqa: BLE001 - said in the events and the log; the pool tries again
            self.event("boot_failed", error=f"{type(error).__name__}: {error}")
            log.warning("a warm sandbox did not boot: %s", error)
            await asyncio.sleep(1.0)

    async def _boot(self, warm: bool) -> CodeSandbox:
        number = next(self.counter)
        assert self.live_dir is not None
        sandbox = CodeSandbox(f"cb-{os.getpid()}-{number}", self.live_dir / f"cb-{number}", warm=warm)
        self.sandboxes[sandbox.id] = sandbox
        try:
            await self.booting.acquire(BootSlots.POOL if warm else BootSlots.CLAIM)
            try:
                started = time.monotonic()
                await self._start_process(sandbox)
                rest = self.config.codebox_boot_s - (time.monotonic() - started)
                if rest > 0:
                    await asyncio.sleep(rest)
            finally:
                self.booting.release()
        except BaseException:
            await self._destroy(sandbox, "boot failed")
            raise
        if sandbox.state == "booting":
            sandbox.state, sandbox.booted_at = "warm", time.time()
            self.event("booted", sandbox=sandbox.id, warm=warm)
        self.pool_changed.set()
        return sandbox

    async def _start_process(self, sandbox: CodeSandbox) -> None:
        sandbox.workspace.mkdir(parents=True)
        init = sandbox.folder.parent / "init.py"  # isolation.live_folder's copy
        if self.isolated:
            if self.as_root:
                os.chown(sandbox.folder, isolation.NOBODY, isolation.NOBODY)
                os.chown(sandbox.workspace, isolation.NOBODY, isolation.NOBODY)
            sandbox.groups = await asyncio.to_thread(self.cgroups.create, sandbox.id, self.limits)
            argv = isolation.sandbox_argv(sandbox.workspace, init)
            setup = isolation.preexec(sandbox.groups, drop_to_nobody=self.as_root)
            env: dict[str, str] | None = {"PATH": "/usr/bin:/bin"}
        else:  # the defect: the init as a plain child, with the service's own environment and rights
            argv, setup, env = isolation.plain_argv(init), isolation.preexec(isolation.CgroupSet(), False), None
        sandbox.process = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
            cwd=str(sandbox.workspace), env=env, preexec_fn=setup, start_new_session=True, limit=4 * 1024 * 1024)
        assert sandbox.process.stdout is not None
        line = await asyncio.wait_for(sandbox.process.stdout.readline(), 30)
        if not line or not json.loads(line).get("ready"):
            raise RuntimeError(f"sandbox {sandbox.id} did not start")
        self._spawn(self._watch(sandbox))

    async def _watch(self, sandbox: CodeSandbox) -> None:
        assert sandbox.process is not None
        code = await sandbox.process.wait()
        if sandbox.state != "dead":
            self.event("died", sandbox=sandbox.id, session=sandbox.session, tenant=sandbox.tenant, exit_code=code)
            await self._destroy(sandbox, f"exited {code}")

    async def _destroy(self, sandbox: CodeSandbox, why: str) -> None:
        """Forget a sandbox: its claim goes with it (never left stuck), its process and folder too."""
        sandbox.state = "dead"
        if sandbox.session and self.claims.get(sandbox.session) is sandbox:
            del self.claims[sandbox.session]
        self.sandboxes.pop(sandbox.id, None)
        if sandbox.process is not None and sandbox.process.returncode is None:
            try:
                os.killpg(sandbox.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                await asyncio.wait_for(sandbox.process.wait(), 5)
            except asyncio.TimeoutError:
                log.warning("sandbox %s did not exit", sandbox.id)
        await asyncio.to_thread(sandbox.groups.remove)
        shutil.rmtree(sandbox.folder, ignore_errors=True)
        self.pool_changed.set()
        log.info("sandbox %s gone: %s", sandbox.id, why)

    # -- claims ------------------------------------------------------------------------------
    def _workspace_of(self, tenant: str, session: str) -> Path:
        return self.workspaces_dir / tenant / session

    async def claim(self, tenant: str, session: str) -> tuple[CodeSandbox, bool]:
        """The session's sandbox: its live claim, a warm one, or one booted for it. True when new."""
        async with self.claiming.setdefault(session, asyncio.Lock()):
            return await self._claim(tenant, session)

    async def _claim(self, tenant: str, session: str) -> tuple[CodeSandbox, bool]:
        held = self.claims.get(session)
        if held is not None and held.state == "claimed":
            return held, False
        if self.unavailable:
            raise web.HTTPNotImplemented(text=json.dumps({"error": self.unavailable}),
                                             content_type="application/json")
        warm = self.warm()
        sandbox = warm[0] if warm else await self._boot(warm=False)
        if sandbox.state != "warm":  # it died while booting
            raise SandboxLost(sandbox.id)
        sandbox.state, sandbox.tenant, sandbox.session = "claimed", tenant, session
        sandbox.claimed_at = sandbox.last_used = time.time()
        self.claims[session] = sandbox
        self.pool_changed.set()
        if self.persist:
            await asyncio.to_thread(self._restore, self._workspace_of(tenant, session), sandbox.workspace)
        self.event("claimed", sandbox=sandbox.id, session=session, tenant=tenant, warm=bool(warm))
        return sandbox, True

    def _restore(self, kept: Path, workspace: Path) -> None:
        if kept.is_dir():
            shutil.copytree(kept, workspace, dirs_exist_ok=True)
            if self.as_root and self.isolated:
                for path in [workspace, *workspace.rglob("*")]:
                    os.lchown(path, isolation.NOBODY, isolation.NOBODY)

    def _persist(self, workspace: Path, kept: Path) -> None:
        """Replace the session's kept workspace with the sandbox's, atomically by rename."""
        kept.parent.mkdir(parents=True, exist_ok=True)
        fresh = kept.with_name(kept.name + ".new")
        shutil.rmtree(fresh, ignore_errors=True)
        shutil.copytree(workspace, fresh, symlinks=True)
        old = kept.with_name(kept.name + ".old")
        if kept.exists():
            kept.rename(old)
        fresh.rename(kept)
        shutil.rmtree(old, ignore_errors=True)

    async def run(self, tenant: str, session: str, request: dict[str, Any]) -> dict[str, Any]:
        sandbox, _ = await self.claim(tenant, session)
        async with sandbox.lock:
            process = sandbox.process
            if sandbox.state != "claimed" or process is None or process.stdin is None or process.stdout is None:
                raise SandboxLost(sandbox.id)
            sandbox.last_used = time.time()
            try:
                process.stdin.write((json.dumps(request) + "\n").encode())
                await process.stdin.drain()
                line = await process.stdout.readline()
            except (ConnectionError, BrokenPipeError):
                line = b""
            if not line:
                raise SandboxLost(sandbox.id)
            answer = json.loads(line)
            sandbox.runs += 1
            sandbox.last_used = time.time()
            if self.persist and sandbox.state == "claimed":
                await asyncio.to_thread(self._persist, sandbox.workspace, self._workspace_of(tenant, session))
        return {"sandbox_id": sandbox.id, **answer}

    async def release(self, session: str, why: str) -> bool:
        sandbox = self.claims.pop(session, None)
        if sandbox is None:
            return False
        self.event("released", sandbox=sandbox.id, session=session, tenant=sandbox.tenant, why=why)
        await self._destroy(sandbox, f"released ({why})")
        return True

    async def _release_idle(self) -> None:
        while True:
            await asyncio.sleep(IDLE_SWEEP_S)
            now = time.time()
            for session, sandbox in list(self.claims.items()):
                if not sandbox.lock.locked() and now - sandbox.last_used > self.config.codebox_idle_s:
                    await self.release(session, "idle")

    # -- routes ------------------------------------------------------------------------------
    def _tenant_session(self, request: web.Request) -> tuple[str, str]:
        if request.headers.get(HEADER_INTERNAL_TOKEN) != self.ctx.runtime.internal_token:
            raise web.HTTPUnauthorized(text='{"error": "unauthorised"}', content_type="application/json")
        tenant = request.headers.get(HEADER_TENANT, "")
        session_id = request.match_info["session_id"]
        session = self.store.get_session(session_id)
        if session is None or session.tenant != tenant:
            raise web.HTTPNotFound(text='{"error": "no such session"}', content_type="application/json")
        return tenant, session_id

    async def claim_route(self, request: web.Request) -> web.Response:
        tenant, session = await asyncio.to_thread(self._tenant_session, request)
        started = time.monotonic()
        try:
            sandbox, new = await self.claim(tenant, session)
        except SandboxLost as lost:
            return web.json_response({"error": "sandbox lost while booting", "sandbox_id": str(lost)}, status=410)
        return web.json_response({"sandbox_id": sandbox.id, "new": new, "warm": sandbox.warm,
                                  "seconds": time.monotonic() - started}, status=201 if new else 200)

    async def run_route(self, request: web.Request) -> web.Response:
        tenant, session = await asyncio.to_thread(self._tenant_session, request)
        body = await request.json()
        if not isinstance(body, dict) or not isinstance(body.get("code"), str):
            return web.json_response({"error": "a run needs code (a string)"}, status=400)
        language = body.get("language", "python")
        if language not in ("python", "sh"):
            return web.json_response({"error": "language is python or sh"}, status=400)
        timeout = min(RUN_TIMEOUT_MAX_S, float(body.get("timeout_s", 30)))
        try:
            answer = await self.run(tenant, session, {"code": body["code"], "language": language, "timeout_s": timeout})
        except SandboxLost as lost:
            return web.json_response({"error": "sandbox lost", "sandbox_id": str(lost)}, status=410)
        return web.json_response(answer)

    async def release_route(self, request: web.Request) -> web.Response:
        _, session = await asyncio.to_thread(self._tenant_session, request)
        released = await self.release(session, "asked")
        return web.json_response({"released": released})

    def _internal(self, request: web.Request) -> None:
        if request.headers.get(HEADER_INTERNAL_TOKEN) != self.ctx.runtime.internal_token:
            raise web.HTTPUnauthorized(text='{"error": "unauthorised"}', content_type="application/json")

    async def list_route(self, request: web.Request) -> web.Response:
        self._internal(request)
        after = float(request.query.get("after", "0"))
        return web.json_response({
            "at": time.time(), "pool": {"size": self.pool_size, "warm": len(self.warm())},
            "sandboxes": [s.to_json() for s in self.sandboxes.values()],
            "isolation": {"available": not self.unavailable, "namespaces": self.isolated and not self.unavailable,
                          "limits": bool(self.isolated and self.cgroups and self.cgroups.enforced),
                          "why_not": self.unavailable or (self.cgroups.why if self.cgroups else "no-isolation")},
            "events": [e for e in self.events if e["t"] > after]})

    async def kill_route(self, request: web.Request) -> web.Response:
        self._internal(request)
        sandbox = self.sandboxes.get(request.match_info["sandbox_id"])
        if sandbox is None or sandbox.process is None:
            return web.json_response({"error": "no such sandbox"}, status=404)
        name = (await request.json()).get("signal", "SIGKILL") if request.can_read_body else "SIGKILL"
        if name not in ("SIGKILL", "SIGTERM"):
            return web.json_response({"error": "signal is SIGKILL or SIGTERM"}, status=400)
        self.event("kill_asked", sandbox=sandbox.id, session=sandbox.session, signal=name)
        if not self.config.has(Defect.NOOP_KILL):  # the lie: answered as killed, and nothing dies
            try:
                os.killpg(sandbox.process.pid, getattr(signal, name))
            except ProcessLookupError:
                pass
        return web.json_response({"sandbox_id": sandbox.id, "pid": sandbox.pid, "signal": name})

    async def ready(self, request: web.Request) -> web.Response:
        return web.json_response({"ready": True, "unavailable": self.unavailable})


async def create_app(ctx: ServiceContext) -> web.Application:
    service = CodeboxService(ctx)
    app = web.Application()
    app.on_startup.append(service.start)
    app.on_cleanup.append(service.stop)
    app.router.add_get("/ready", service.ready)
    app.router.add_get("/healthz", service.ready)
    app.router.add_post("/v1/sessions/{session_id}/sandbox", service.claim_route)
    app.router.add_delete("/v1/sessions/{session_id}/sandbox", service.release_route)
    app.router.add_post("/v1/sessions/{session_id}/sandbox/runs", service.run_route)
    app.router.add_get("/internal/v1/sandboxes", service.list_route)
    app.router.add_post("/internal/v1/sandboxes/{sandbox_id}/kill", service.kill_route)
    return app


def main(argv: list[str] | None = None) -> None:
    run_service("codebox", create_app, argv)


if __name__ == "__main__":
    main()
