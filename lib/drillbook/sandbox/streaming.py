"""Resumable streamed turns in the agent service: a turn that outlives its client's connection.

``POST /v1/sessions/{id}/streams`` (with an Idempotency-Key: the turn's key) starts a turn and
answers Server-Sent Events: ``token`` events, then one ending, ``ack`` (stored) or ``failed``
(never will be), each with its ``id`` (1, 2, …). The turn runs as a task of the replica, not of
the request: a client that goes away takes nothing with it. ``GET
/v1/sessions/{id}/streams/{key}`` with ``Last-Event-ID`` (or ``?after=N``) sends, from any replica,
what came after that event: the rest of the turn once, or the finished turn if it has ended. A
retried start with the same key is a resume from where the retry says (from the start by default).

A stream with nothing to send sends an SSE comment every ``KEEPALIVE_S``: a client that hears
nothing for longer knows its connection is dead (a deleted pod's connections go silent rather than
break) and resumes. Every event is in the state store before any client sees it (drillbook.sandbox.stream_store), so
the replica that serves a reconnect needs nothing from the one that streams the turn. When that
replica dies the turn is failed, never acknowledged in part: whoever finds the turn's replica
gone (its address refuses, or answers with another boot id) or silent past ``LOST_AFTER_S``
fails it, and every replica sweeps for such turns every ``SWEEP_S``.

Defects: ``no-stream-resume`` runs a reconnected turn again from its start (its tokens come
twice; it is stored twice); ``turn-dies-with-client`` cancels a turn when the connection that
started it drops.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from functools import partial
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web

from drillbook.config import Defect
from drillbook.errors import StoreUnavailable
from drillbook.sandbox.service import HEADER_IDEMPOTENCY
from drillbook.sandbox.store import ack
from drillbook.sandbox.stream_store import ENDINGS, RUNNING, StreamEvent, TurnStream

if TYPE_CHECKING:
    from drillbook.sandbox.agent import AgentService

log = logging.getLogger("drillbook.agent.streams")

FLUSH_S = 0.05  # tokens are written to the store at most this far apart
HEARTBEAT_S = 0.5  # the streaming replica says it still streams at least this often
LOST_AFTER_S = 10.0  # silent this long, a turn's replica is taken as lost even if its address answers
SWEEP_S = 1.0
POLL_S = 0.1  # how often a client's reader looks for new events of a turn streamed elsewhere
BOOT = secrets.token_hex(6)  # this process: a replica restarted at the same address is another one
REPLICA_LOST = "the replica streaming this turn was lost; no part of it was stored"
REPLICA_STOPPED = "the replica streaming this turn stopped; no part of it was stored"
KEEPALIVE_S = 1.0  # a waiting turn's stream says so this often (an SSE comment), so a stalled one shows
KEEPALIVE = b": keepalive\n\n"
CANCELLED_WITH_CLIENT = "cancelled: the connection that started the turn went away"
EVENT_STREAM = "text/event-stream"


def sse(event: StreamEvent) -> bytes:
    """One Server-Sent Event (its data is one line of JSON)."""
    return f"id: {event.id}\nevent: {event.kind}\ndata: {event.data}\n\n".encode()


def last_event_id(request: web.Request) -> int | None:
    """Where a client resumes: the Last-Event-ID header, or the `after` query; None if neither."""
    raw = request.headers.get("Last-Event-ID") or request.query.get("after")
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise web.HTTPBadRequest(text=json.dumps({"error": f"Last-Event-ID / after must be an event id, not {raw!r}"}),
                                 content_type="application/json") from None
    if value < 0:
        raise web.HTTPBadRequest(text=json.dumps({"error": "Last-Event-ID / after must be >= 0"}),
                                 content_type="application/json")
    return value


class TurnStreams:
    """The resumable-stream routes of one agent replica, and the turns it streams."""

    def __init__(self, service: "AgentService") -> None:
        self.service = service
        config = service.ctx.runtime.config
        self.restarts_on_resume = config.has(Defect.NO_STREAM_RESUME)
        self.dies_with_client = config.has(Defect.TURN_DIES_WITH_CLIENT)
        self.tasks: dict[tuple[str, str], asyncio.Task[None]] = {}
        self.written: dict[tuple[str, str], asyncio.Event] = {}  # set at each write of a turn streamed here
        self.sweeper: asyncio.Task[None] | None = None
        self.address: str | None = None  # this replica as the gateway reaches it, from the first request

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self, app: web.Application) -> None:
        self.sweeper = asyncio.create_task(self._sweep())

    async def stop(self, app: web.Application) -> None:
        if self.sweeper is not None:
            self.sweeper.cancel()
        running = list(self.tasks.values())
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    def owner(self, request: web.Request) -> str:
        """This replica as a turn's owner: the address other replicas can check, and its boot id."""
        if self.address is None:
            sock = request.transport.get_extra_info("sockname") if request.transport else None
            self.address = f"http://{sock[0]}:{sock[1]}" if sock else ""
        return f"{self.address}#{BOOT}"

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"alive": True, "boot": BOOT})

    # -- routes ------------------------------------------------------------------------------
    async def start_turn(self, request: web.Request) -> web.StreamResponse:
        tenant, session_id = await self.service._owned_session(request)
        key = request.headers.get(HEADER_IDEMPOTENCY)
        if not key:
            return web.json_response({"error": f"a streamed turn needs an {HEADER_IDEMPOTENCY} header: "
                                               "it is the turn's id for resuming"}, status=400)
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": "the body must be a JSON object {input, max_tokens?}"}, status=400)
        if not isinstance(body, dict):
            return web.json_response({"error": "the body must be a JSON object {input, max_tokens?}"}, status=400)
        text_in, max_tokens = str(body.get("input", "")), body.get("max_tokens")
        owner = self.owner(request)
        stream, opened = await self.service._db(self.service.store.open_stream, session_id, key, text_in, owner,
                                                time.time())
        if opened:
            self._launch(tenant, session_id, key, text_in, max_tokens, owner, append_key=key)
            origin = self.tasks.get((session_id, key)) if self.dies_with_client else None
            return await self.tail(request, session_id, key, last_event_id(request) or 0, cancels=origin)
        return await self._reconnect(request, tenant, stream, max_tokens)

    async def resume_turn(self, request: web.Request) -> web.StreamResponse:
        tenant, session_id = await self.service._owned_session(request)
        key = request.match_info["turn_key"]
        stream = await self.service._db(self.service.store.stream, session_id, key)
        if stream is None:
            return web.json_response({"error": f"no streamed turn {key} in session {session_id}"}, status=404)
        return await self._reconnect(request, tenant, stream, None)

    async def _reconnect(self, request: web.Request, tenant: str, stream: TurnStream, max_tokens: Any) -> web.StreamResponse:
        if self.restarts_on_resume:
            # The defect: the turn is run again from its start, under a fresh key, and stored again.
            again = f"{stream.turn_key}~{secrets.token_hex(4)}"
            owner = self.owner(request)
            await self.service._db(self.service.store.open_stream, stream.session_id, again, stream.input, owner,
                                   time.time())
            self._launch(tenant, stream.session_id, again, stream.input, max_tokens, owner, append_key=None)
            return await self.tail(request, stream.session_id, again, 0)
        return await self.tail(request, stream.session_id, stream.turn_key, last_event_id(request) or 0)

    # -- the turn ----------------------------------------------------------------------------
    def _launch(self, tenant: str, session_id: str, key: str, text_in: str, max_tokens: Any, owner: str,
                append_key: str | None) -> None:
        ident = (session_id, key)
        self.written[ident] = asyncio.Event()
        task = asyncio.create_task(self._stream_turn(tenant, session_id, key, text_in, max_tokens, owner, append_key))
        self.tasks[ident] = task

        def forget(_: Any) -> None:
            self.tasks.pop(ident, None)
            self.written.pop(ident, None)

        task.add_done_callback(forget)

    def _wake(self, ident: tuple[str, str]) -> None:
        event = self.written.get(ident)
        if event is not None:
            event.set()
            self.written[ident] = asyncio.Event()

    async def _stream_turn(self, tenant: str, session_id: str, key: str, text_in: str, max_tokens: Any, owner: str,
                           append_key: str | None) -> None:
        """Generate the turn's tokens into the store, then store the turn with its ack, or fail it."""
        service, store, ident = self.service, self.service.store, (session_id, key)
        assert service.http is not None
        pending: list[str] = []
        tokens: list[str] = []
        mine = True

        async def flush() -> None:
            nonlocal mine
            batch = pending[:]
            pending.clear()
            mine = await service._db(store.extend_stream, session_id, key, owner, batch, time.time())
            self._wake(ident)
            if not mine:
                raise asyncio.CancelledError  # failed by a replica that found this one lost: stop writing

        heartbeat = asyncio.create_task(self._heartbeat(session_id, key, owner))
        try:
            payload = {"tenant": tenant, "prompt": text_in, "max_tokens": max_tokens, "stream": True}
            async with service.http.post(service.inference_url, json=payload, headers=service.internal_headers) as upstream:
                if upstream.status != 200:
                    raise aiohttp.ClientResponseError(upstream.request_info, (), status=upstream.status,
                                                      message=f"model tier answered {upstream.status}")
                flushed = time.monotonic()
                async for line in upstream.content:
                    event = json.loads(line)
                    if "token" not in event:
                        continue
                    pending.append(event["token"])
                    tokens.append(event["token"])
                    if time.monotonic() - flushed >= FLUSH_S:
                        await flush()
                        flushed = time.monotonic()
            if pending:
                await flush()
            await service._db(store.finish_stream, session_id, key, owner, append_key, " ".join(tokens), ack)
            self._wake(ident)
            await service._after_commit()
        except asyncio.CancelledError as stopped:
            if mine:  # stopped here (shutting down, or the defect's client gone): say so if the store lets us
                await self._fail_quietly(session_id, key, owner, str(stopped.args[0]) if stopped.args else REPLICA_STOPPED)
            raise
        except (aiohttp.ClientError, asyncio.TimeoutError) as error:
            await self._fail_quietly(session_id, key, owner, f"inference unavailable: {error}")
        except StoreUnavailable as error:
            log.warning("turn %s of %s: store unavailable (%s); it will be found lost", key, session_id, error)
        finally:
            heartbeat.cancel()

    async def _fail_quietly(self, session_id: str, key: str, owner: str, reason: str) -> None:
        try:
            await asyncio.shield(self.service._db(partial(self.service.store.fail_stream, owner=owner), session_id, key, reason))
            self._wake((session_id, key))
        except (StoreUnavailable, asyncio.CancelledError):
            pass

    async def _heartbeat(self, session_id: str, key: str, owner: str) -> None:
        store = self.service.store
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            try:
                if not await self.service._db(store.extend_stream, session_id, key, owner, [], time.time()):
                    return
            except StoreUnavailable:
                continue

    # -- readers -----------------------------------------------------------------------------
    async def tail(self, request: web.Request, session_id: str, key: str, after: int,
                   cancels: asyncio.Task[None] | None = None) -> web.StreamResponse:
        """Send the turn's events after `after`, as they are stored, until its ending.

        cancels: the turn this connection takes down with it when it drops (the defect only)."""
        store, ident = self.service.store, (session_id, key)
        response = web.StreamResponse(headers={"Content-Type": EVENT_STREAM, "Cache-Control": "no-cache"})
        await response.prepare(request)
        cursor = after
        said = time.monotonic()
        try:
            while True:
                events = await self.service._db(store.stream_events, session_id, key, cursor)
                for event in events:
                    await response.write(sse(event))
                    cursor = event.id
                    said = time.monotonic()
                if not events and time.monotonic() - said >= KEEPALIVE_S:
                    await response.write(KEEPALIVE)  # a client (or proxy) sees a live stream from a silent one
                    said = time.monotonic()
                if events and events[-1].kind in ENDINGS:
                    break
                if events:
                    continue
                stream = await self.service._db(store.stream, session_id, key)
                if stream is None:  # the store was restored to before this turn began
                    break
                if stream.state != RUNNING:
                    continue  # its ending is stored with it: the next read has it
                if await self._lost(stream):
                    await self.service._db(partial(store.fail_stream, lost_owner=stream.owner), session_id, key, REPLICA_LOST)
                    continue
                written = self.written.get(ident)
                if written is not None:
                    try:
                        await asyncio.wait_for(written.wait(), HEARTBEAT_S)
                    except asyncio.TimeoutError:
                        pass
                else:
                    await asyncio.sleep(POLL_S)
            await response.write_eof()
        except (asyncio.CancelledError, ConnectionResetError):
            if cancels is not None:
                cancels.cancel(CANCELLED_WITH_CLIENT)
            raise
        return response

    async def _lost(self, stream: TurnStream) -> bool:
        """Whether the replica streaming a turn is gone: silent too long, its address refusing, or
        answering as another process. A replica never finds itself lost."""
        if time.time() - stream.heartbeat_at > LOST_AFTER_S:
            return True
        address, _, boot = stream.owner.partition("#")
        if boot == BOOT or not address:
            return False
        assert self.service.http is not None
        try:
            async with self.service.http.get(f"{address}/healthz",
                                             timeout=aiohttp.ClientTimeout(total=2.0, sock_connect=1.0)) as answer:
                return answer.status != 200 or (await answer.json()).get("boot") != boot
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError):
            return True  # nothing accepts connections there (a deleted pod's address may not even answer)
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
            return False  # slow or odd, not gone: the heartbeat decides

    async def _sweep(self) -> None:
        """Fail turns whose replica is gone, so that no turn is left running with nobody to end it."""
        store = self.service.store
        while True:
            await asyncio.sleep(SWEEP_S)
            try:
                lost: dict[str, bool] = {}  # each replica asked once a sweep
                for stream in await self.service._db(store.running_streams):
                    if (stream.session_id, stream.turn_key) in self.tasks:
                        continue
                    if stream.owner not in lost or time.time() - stream.heartbeat_at > LOST_AFTER_S:
                        lost[stream.owner] = await self._lost(stream)
                    if lost[stream.owner]:
                        await self.service._db(partial(store.fail_stream, lost_owner=stream.owner), stream.session_id,
                                               stream.turn_key, REPLICA_LOST)
            except StoreUnavailable:
                continue
            except Exception as error:  # noqa: BLE001 - the sweep goes on; a replica must not die of it
                log.warning("stream sweep failed: %s", error)


__all__ = ["BOOT", "EVENT_STREAM", "LOST_AFTER_S", "REPLICA_LOST", "TurnStreams", "last_event_id", "sse"]
