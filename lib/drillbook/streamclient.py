"""A client of resumable turn streams that records everything it received, and when.

Plain http.client (so it runs the same in a Locust process, where gevent makes it cooperative,
and in drillbook's own): one connection reads Server-Sent Events until the turn's ending, until
the client drops it on purpose (after a number of tokens: the drill's fault), or until it breaks.
``follow_turn`` starts a turn and resumes it after the last event id it saw, as many times as it
takes, within a deadline: each connection is kept (when it opened, what came, each event stamped
with when it arrived, how it ended), so that the session-continuity judge
(drillbook.scenarios.session_continuity.judge) computes every figure from what was received.
"""

from __future__ import annotations

import http.client
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable
from urllib.parse import urlsplit

from drillbook.jmes import pick
from drillbook.streamapi import StreamApi

TOKEN, ACK, FAILURE, OTHER = "token", "ack", "failed", "other"
ENDED, DROPPED, BROKEN, REFUSED = "ended", "dropped", "broken", "refused"
NEW_CLIENT, OTHER_PROCESS = "new-client", "other-process"
STALL_S = 5.0  # a stream silent this long (no event, no keepalive) is taken as dead, and resumed


@dataclass
class Received:
    """One event as the client received it."""

    id: str | None
    kind: str
    text: str | None  # a token's text (not named "token": evidence masks values under secret-like names)
    at: float
    detail: Any = None  # the acknowledgement, or the platform's reason for a failure


@dataclass
class Connection:
    """One connection of a turn's stream: the event id it resumed after (None: from the start),
    when it opened and closed, what it received, and how it ended."""

    after: str | None
    opened_at: float
    by: str = NEW_CLIENT  # who opened it: a new client object, or another process
    status: int | None = None
    events: list[Received] = field(default_factory=list)
    closed_at: float = 0.0
    how: str = BROKEN
    detail: str = ""

    @property
    def first_event_at(self) -> float | None:
        return self.events[0].at if self.events else None


@dataclass
class TurnRecord:
    """A streamed turn as one client (and whoever resumed it) saw it."""

    session_id: str
    tenant: str
    turn_key: str
    sent: str
    started_at: float
    connections: list[Connection] = field(default_factory=list)

    def resume_id(self, api: StreamApi) -> str:
        """What a resume names the turn by: the workload's own id (api.streams.turn_id) once an
        event carried it, else the idempotency key."""
        if api.turn_id is not None:
            for connection in self.connections:
                for event in connection.events:
                    if event.kind == OTHER and event.detail is not None:
                        return str(event.detail)
        return self.turn_key

    def last_id(self) -> str | None:
        ids = [event.id for connection in self.connections for event in connection.events if event.id is not None]
        return ids[-1] if ids else None

    def ending(self) -> Received | None:
        for connection in self.connections:
            for event in connection.events:
                if event.kind in (ACK, FAILURE):
                    return event
        return None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> "TurnRecord":
        connections = [Connection(**{**c, "events": [Received(**e) for e in c["events"]]}) for c in record["connections"]]
        return cls(record["session_id"], record["tenant"], record["turn_key"], record["sent"], record["started_at"],
                   connections)


def classify(api: StreamApi, data: Any, name: str | None = None) -> tuple[str, str | None, Any]:
    """(kind, token, detail) of an event (its data, and its SSE event name), through the profile."""
    if api.ack_event is not None and name == api.ack_event:
        return ACK, None, data
    if api.ack is not None and pick(api.ack, data) is not None:
        return ACK, None, pick(api.ack, data)
    if api.failed is not None and (reason := pick(api.failed, data)) is not None:
        return FAILURE, None, reason
    token = pick(api.token, data)
    if token is not None:
        return TOKEN, str(token), None
    return OTHER, None, pick(api.turn_id, data)  # the workload's own id for the turn, where it names one


def read_stream(base_url: str, method: str, path: str, headers: dict[str, str], body: bytes | None, api: StreamApi,
                after: str | None, drop_after_tokens: int | None = None, timeout_s: float = 30.0,
                by: str = NEW_CLIENT, clock: Callable[[], float] = time.time, stall_s: float = STALL_S) -> Connection:
    """One connection: read events until an ending, until drop_after_tokens tokens came (then
    drop it: close the socket mid-stream), until it breaks or stalls (nothing, not even a
    keepalive comment, for stall_s: a connection to a deleted pod goes silent rather than break),
    or until timeout_s passes."""
    parts = urlsplit(base_url)
    connection = Connection(after=after, opened_at=clock(), by=by)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=min(timeout_s, stall_s))
    deadline = time.monotonic() + timeout_s
    tokens = 0
    try:
        conn.request(method, path, body=body, headers={"Accept": "text/event-stream", **headers})
        response = conn.getresponse()
        connection.status = response.status
        if response.status != 200:
            connection.how, connection.detail = REFUSED, f"HTTP {response.status}: {response.read(300)!r}"
            return connection
        event_id, name, data = None, None, []
        while time.monotonic() < deadline:
            raw = response.readline()
            if not raw:
                connection.detail = "the stream ended without an ending event"
                return connection
            line = raw.decode("utf-8").rstrip("\r\n")
            if line.startswith(":"):
                continue
            if line:
                field, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if field == "id":
                    event_id = value
                elif field == "event":
                    name = value
                elif field == "data":
                    data.append(value)
                continue
            if not data and (name is None or name != api.ack_event):
                name = None
                continue
            try:
                document = json.loads("\n".join(data))
            except ValueError:
                document = None
            kind, token, detail = classify(api, document, name)
            connection.events.append(Received(event_id, kind, token, clock(), detail))
            data, name = [], None
            if kind in (ACK, FAILURE):
                connection.how = ENDED
                return connection
            if kind == TOKEN:
                tokens += 1
                if drop_after_tokens is not None and tokens >= drop_after_tokens:
                    connection.how = DROPPED
                    return connection
        connection.detail = f"no ending within {timeout_s:g}s"
        return connection
    except (OSError, http.client.HTTPException) as error:
        connection.how = REFUSED if connection.status is None else BROKEN
        stalled = isinstance(error, TimeoutError) and connection.status is not None
        connection.detail = f"stalled: nothing for {stall_s:g}s" if stalled else f"{type(error).__name__}: {error}"
        return connection
    finally:
        connection.closed_at = clock()
        conn.close()  # a drop: the socket goes away mid-stream, as a client's would


def follow_turn(base_url: str, api: StreamApi, auth: dict[str, str], record: TurnRecord, body: bytes,
                drops: list[int], deadline_s: float, idempotency: dict[str, str],
                pause_s: Callable[[int], float] = lambda attempt: min(0.5, 0.02 * 2 ** attempt),
                sleep: Callable[[float], None] = time.sleep, by: str = NEW_CLIENT,
                max_connections: int | None = None) -> TurnRecord:
    """Start the turn (record.connections empty) or go on with it, resuming after the last event
    seen until it ends or deadline_s passes. drops: after how many tokens each successive
    connection is dropped on purpose (then the next resumes). A stack without resume gets one
    connection; max_connections stops sooner (the rest is left to another process)."""
    deadline = time.monotonic() + deadline_s
    attempt = 0
    while time.monotonic() < deadline and record.ending() is None:
        if max_connections is not None and len(record.connections) >= max_connections:
            break
        drop = drops[len(record.connections)] if len(record.connections) < len(drops) else None
        remaining = max(0.5, deadline - time.monotonic())
        if not any(connection.status == 200 for connection in record.connections):  # not started yet
            headers = {**auth, **idempotency, "Content-Type": "application/json"}
            connection = read_stream(base_url, "POST", api.start_path(record.session_id), headers, body, api, None,
                                     drop, remaining, by=by)
        elif api.resume is None:
            break
        else:
            after = record.last_id()
            path, headers = api.resume_request(record.session_id, record.resume_id(api), after)
            connection = read_stream(base_url, "GET", path, {**auth, **headers}, None, api, after, drop, remaining,
                                     by=by)
        record.connections.append(connection)
        if connection.how in (REFUSED, BROKEN) and not connection.events:
            attempt += 1
            sleep(pause_s(attempt))
    return record


__all__ = ["ACK", "BROKEN", "Connection", "DROPPED", "ENDED", "FAILURE", "NEW_CLIENT", "OTHER_PROCESS", "REFUSED",
           "Received", "TOKEN", "TurnRecord", "classify", "follow_turn", "read_stream"]
