"""The agent loop as a stateless service: sessions and turns, state kept in the state store.

A turn reads the session, runs the turn's `code` in the session's code sandbox when it carries
some (the code tool; its result goes into the prompt and the stored output), asks the model (through the gateway's inference route, so the
activator covers a scaled-to-zero model tier), appends the turn transactionally with its seq and
chained hash, and acknowledges ``{seq, hash}``. A turn carrying an Idempotency-Key that was
already applied returns the stored acknowledgement instead of running again. The gateway
authenticates tenants and passes the tenant in a header; a session of another tenant is 404.
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

import aiohttp
from aiohttp import web

from drillbook.errors import StoreUnavailable
from drillbook.sandbox.service import HEADER_IDEMPOTENCY, HEADER_INTERNAL_TOKEN, HEADER_TENANT, ServiceContext, run_service
from drillbook.sandbox.store import StateStore, ack
from drillbook.sandbox.streaming import TurnStreams

T = TypeVar("T")

INFERENCE_PATH = "/internal/v1/generate"


class InferenceUnavailable(Exception):
    """The model tier did not answer (the gateway gave up holding the request)."""


class ToolFailed(Exception):
    """The code tool's sandbox did not run the turn's code."""


class AgentService:
    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self.store: StateStore = ctx.runtime.open_store()
        self.pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="store")
        self.inference_url = ctx.runtime.inference_url or ctx.runtime.gateway_url + INFERENCE_PATH
        self.internal_headers = {HEADER_INTERNAL_TOKEN: ctx.runtime.internal_token}
        self.http: aiohttp.ClientSession | None = None
        # After persisting a turn the agent indexes it before answering; a replica killed in
        # this window has applied the turn but never acknowledged it, so the client retries.
        self.post_commit_delay = ctx.runtime.config.post_commit_delay_s
        self.streams = TurnStreams(self)

    async def _after_commit(self) -> None:
        if self.post_commit_delay > 0:
            await asyncio.sleep(self.post_commit_delay)

    async def start(self, app: web.Application) -> None:
        self.http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=30),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
        )
        if not self.ctx.supervised:
            # A container has no supervisor to prepare the store: the replicas create what is
            # missing themselves (idempotent; a replica that loses the race to another tries again).
            for attempt in range(3):
                try:
                    await asyncio.to_thread(self.store.init_schema)
                    break
                except Exception:  # noqa: BLE001 - the other replica's CREATE won; the next pass sees it
                    if attempt == 2:
                        raise
                    await asyncio.sleep(0.5)

    async def stop(self, app: web.Application) -> None:
        if self.http is not None:
            await self.http.close()
        self.pool.shutdown(wait=False, cancel_futures=True)

    async def _db(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    # -- probes ------------------------------------------------------------------------------
    async def ready(self, request: web.Request) -> web.Response:
        try:
            await self._db(self.store.ping)
        except StoreUnavailable as error:
            return web.json_response({"ready": False, "reason": str(error)}, status=503)
        return web.json_response({"ready": True})

    # -- sessions ----------------------------------------------------------------------------
    def _tenant(self, request: web.Request) -> str:
        tenant = request.headers.get(HEADER_TENANT)
        if not tenant or request.headers.get(HEADER_INTERNAL_TOKEN) != self.ctx.runtime.internal_token:
            raise web.HTTPUnauthorized(text=json.dumps({"error": "requests must come through the gateway"}),
                                       content_type="application/json")
        return tenant

    async def _owned_session(self, request: web.Request) -> tuple[str, str]:
        tenant = self._tenant(request)
        session_id = request.match_info["session_id"]
        session = await self._db(self.store.get_session, session_id)
        if session is None or session.tenant != tenant:
            raise web.HTTPNotFound(text=json.dumps({"error": f"no session {session_id}"}), content_type="application/json")
        return tenant, session_id

    async def create_session(self, request: web.Request) -> web.Response:
        tenant = self._tenant(request)
        session = await self._db(self.store.create_session, tenant, request.headers.get(HEADER_IDEMPOTENCY) or None)
        return web.json_response({"session_id": session.id, "tenant": session.tenant, "created_at": session.created_at},
                                 status=201)

    async def read_session(self, request: web.Request) -> web.Response:
        tenant, session_id = await self._owned_session(request)
        turns = await self._db(self.store.turns, session_id)
        return web.json_response({"session_id": session_id, "tenant": tenant,
                                  "turns": [turn.to_json() for turn in turns]})

    async def run_turn(self, request: web.Request) -> web.StreamResponse:
        tenant, session_id = await self._owned_session(request)
        body = await request.json()
        text_in = str(body.get("input", ""))
        max_tokens = body.get("max_tokens")
        stream = request.query.get("stream") in {"1", "true"}
        key = request.headers.get(HEADER_IDEMPOTENCY) or None
        if key is not None and self.store.idempotency:
            # Checked before the model is called, so a retried turn costs no inference; the append
            # below checks again inside its transaction for retries that race each other.
            existing = await self._db(self.store.find_turn, session_id, key)
            if existing is not None:
                return await self._respond(request, ack(existing, True), stream, replay_tokens=existing.output)
        if stream:
            return await self._streamed_turn(request, tenant, session_id, key, text_in, max_tokens)
        tool = ""
        if isinstance(body.get("code"), str):  # the code tool: run it in the session's sandbox first
            try:
                tool = await self._run_code(tenant, session_id, body["code"])
            except ToolFailed as error:
                return web.json_response({"error": f"the code sandbox failed: {error}"}, status=502)
        try:
            text_out = await self._generate(tenant, f"{text_in}\n{tool}" if tool else text_in, max_tokens)
        except InferenceUnavailable as error:
            return web.json_response({"error": f"inference unavailable: {error}"}, status=503)
        turn, replayed = await self._db(self.store.append_turn, session_id, key, text_in,
                                        f"{tool}\n{text_out}" if tool else text_out)
        await self._after_commit()
        return web.json_response(ack(turn, replayed))

    async def _run_code(self, tenant: str, session_id: str, code: str) -> str:
        """The code tool: the session's sandbox runs code (through the gateway's internal route, so
        the tenant's session rules hold); its result as one line for the prompt and the turn."""
        assert self.http is not None
        url = f"{self.ctx.runtime.gateway_url}/internal/v1/sessions/{session_id}/sandbox/runs"
        try:
            async with self.http.post(url, json={"code": code}, headers={**self.internal_headers, HEADER_TENANT: tenant},
                                      timeout=aiohttp.ClientTimeout(total=150)) as response:
                answer = await response.json(content_type=None)
                if response.status != 200:
                    raise ToolFailed(f"{response.status} {answer.get('error', '')}".strip())
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as error:
            raise ToolFailed(str(error) or type(error).__name__) from None
        return f"[code exit {answer.get('exit_code')}] {str(answer.get('stdout', '')).strip()[:2000]}"

    async def _generate(self, tenant: str, prompt: str, max_tokens: Any) -> str:
        assert self.http is not None
        payload = {"tenant": tenant, "prompt": prompt, "max_tokens": max_tokens}
        try:
            async with self.http.post(self.inference_url, json=payload, headers=self.internal_headers) as response:
                if response.status != 200:
                    raise InferenceUnavailable(f"model tier answered {response.status}")
                return str((await response.json())["text"])
        except aiohttp.ClientError as error:
            raise InferenceUnavailable(str(error) or type(error).__name__) from None

    async def _streamed_turn(self, request: web.Request, tenant: str, session_id: str, key: str | None,
                             text_in: str, max_tokens: Any) -> web.StreamResponse:
        """Stream tokens to the client as ndjson as they arrive; the last line is the acknowledgement."""
        assert self.http is not None
        payload = {"tenant": tenant, "prompt": text_in, "max_tokens": max_tokens, "stream": True}
        tokens: list[str] = []
        response: web.StreamResponse | None = None
        try:
            async with self.http.post(self.inference_url, json=payload, headers=self.internal_headers) as upstream:
                if upstream.status != 200:
                    return web.json_response({"error": f"inference unavailable: model tier answered {upstream.status}"},
                                             status=503)
                async for line in upstream.content:
                    event = json.loads(line)
                    if "token" not in event:
                        continue
                    if response is None:
                        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
                        await response.prepare(request)
                    tokens.append(event["token"])
                    await response.write((json.dumps({"token": event["token"]}) + "\n").encode())
        except aiohttp.ClientError as error:
            if response is None:
                return web.json_response({"error": f"inference unavailable: {error}"}, status=503)
            raise
        turn, replayed = await self._db(self.store.append_turn, session_id, key, text_in, " ".join(tokens))
        await self._after_commit()
        if response is None:
            return await self._respond(request, ack(turn, replayed), True, replay_tokens="")
        await response.write((json.dumps({"ack": ack(turn, replayed)}) + "\n").encode())
        await response.write_eof()
        return response

    async def _respond(self, request: web.Request, body: dict[str, Any], stream: bool, replay_tokens: str) -> web.StreamResponse:
        if not stream:
            return web.json_response(body)
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        lines = [json.dumps({"token": token}) for token in replay_tokens.split()] + [json.dumps({"ack": body})]
        await response.write(("\n".join(lines) + "\n").encode())
        await response.write_eof()
        return response


@web.middleware
async def store_errors(request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
    """A store that is gone makes the replica answer 503, which the gateway may retry elsewhere."""
    try:
        return await handler(request)
    except StoreUnavailable as error:
        return web.json_response({"error": str(error)}, status=503)


async def create_app(ctx: ServiceContext) -> web.Application:
    service = AgentService(ctx)
    app = web.Application(middlewares=[store_errors])
    app.on_startup.append(service.start)
    app.on_startup.append(service.streams.start)
    app.on_shutdown.append(service.streams.stop)
    app.on_cleanup.append(service.stop)
    app.router.add_get("/ready", service.ready)
    app.router.add_get("/healthz", service.streams.healthz)
    app.router.add_post("/v1/sessions", service.create_session)
    app.router.add_get("/v1/sessions/{session_id}", service.read_session)
    app.router.add_post("/v1/sessions/{session_id}/turns", service.run_turn)
    app.router.add_post("/v1/sessions/{session_id}/streams", service.streams.start_turn)
    app.router.add_get("/v1/sessions/{session_id}/streams/{turn_key}", service.streams.resume_turn)
    return app


def main(argv: list[str] | None = None) -> None:
    run_service("agent", create_app, argv)


if __name__ == "__main__":
    main()
