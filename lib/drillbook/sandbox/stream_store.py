"""Resumable turn streams in the state store: a streamed turn's events, kept where any replica reads them.

A streamed turn is a row in ``streams`` (its session, its turn key — the client's idempotency key —,
the input, who streams it, when that replica last said so, and its state: running, done or failed)
and its events in ``stream_events``, numbered 1, 2, … in the order they happened: tokens, then one
ending, ``ack`` (the turn is stored) or ``failed`` (it never will be). The ending is written in the
same transaction as the state, and ``ack`` in the same one as the turn itself: a turn is
acknowledged at most once, and never a part of it. Any replica serves a reconnecting client from
here; the replica that streams the turn is the only one that adds tokens, and only while the row
still names it (another replica that found it lost has failed the turn, and its writes stop).

Written against SqlStore's helpers (``_run``, ``_query``, ``_sql``, ``_append_transaction``,
``_append_in``), for both SQL engines.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Sequence

RUNNING, DONE, FAILED = "running", "done", "failed"
TOKEN, ACK, FAILURE = "token", "ack", "failed"
ENDINGS = (ACK, FAILURE)


def stream_schema_sql(prefix: str) -> list[str]:
    return [
        f"""CREATE TABLE IF NOT EXISTS {prefix}streams (
            session_id TEXT NOT NULL,
            turn_key TEXT NOT NULL,
            input TEXT NOT NULL,
            state TEXT NOT NULL,
            owner TEXT NOT NULL,
            heartbeat_at DOUBLE PRECISION NOT NULL,
            last_id INTEGER NOT NULL,
            reason TEXT,
            PRIMARY KEY (session_id, turn_key))""",
        f"""CREATE TABLE IF NOT EXISTS {prefix}stream_events (
            session_id TEXT NOT NULL,
            turn_key TEXT NOT NULL,
            id INTEGER NOT NULL,
            kind TEXT NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (session_id, turn_key, id))""",
        f"CREATE INDEX IF NOT EXISTS streams_running ON {prefix}streams (state)",  # the replicas' sweep
    ]


@dataclass(frozen=True)
class TurnStream:
    """A streamed turn as stored: who streams it, when it last said so, and how far it got."""

    session_id: str
    turn_key: str
    input: str
    state: str
    owner: str
    heartbeat_at: float
    last_id: int
    reason: str | None


@dataclass(frozen=True)
class StreamEvent:
    id: int
    kind: str
    data: str  # a JSON document


STREAM_COLUMNS = "session_id, turn_key, input, state, owner, heartbeat_at, last_id, reason"


class StreamOperations:
    """The stream operations of a SqlStore (mixed in; see the module's docstring)."""

    _run: Callable[..., Any]
    _query: Callable[..., list[tuple[Any, ...]]]
    _sql: Callable[[str], str]
    _append_transaction: Callable[..., Any]
    _append_in: Callable[..., Any]

    def _stream(self, conn: Any, session_id: str, key: str) -> TurnStream | None:
        rows = self._query(conn, f"SELECT {STREAM_COLUMNS} FROM {{t}}streams WHERE session_id = ? AND turn_key = ?",
                           session_id, key)
        return TurnStream(*rows[0]) if rows else None

    def stream(self, session_id: str, key: str) -> TurnStream | None:
        return self._run(self._stream, session_id, key)

    def open_stream(self, session_id: str, key: str, text_in: str, owner: str, now: float) -> tuple[TurnStream, bool]:
        """The turn's stream, opened for owner unless it exists already; (stream, opened now)."""
        def open_(conn: Any) -> tuple[TurnStream, bool]:
            cursor = conn.execute(self._sql(f"INSERT INTO {{t}}streams ({STREAM_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                                            "ON CONFLICT (session_id, turn_key) DO NOTHING"),
                                  (session_id, key, text_in, RUNNING, owner, now, 0, None))
            stream = self._stream(conn, session_id, key)
            assert stream is not None
            return stream, cursor.rowcount == 1

        return self._run(open_)

    def stream_events(self, session_id: str, key: str, after: int) -> list[StreamEvent]:
        rows = self._run(lambda conn: self._query(
            conn, "SELECT id, kind, data FROM {t}stream_events WHERE session_id = ? AND turn_key = ? AND id > ? "
                  "ORDER BY id", session_id, key, after))
        return [StreamEvent(*row) for row in rows]

    def _insert_events(self, conn: Any, session_id: str, key: str, events: Sequence[StreamEvent]) -> None:
        for event in events:
            conn.execute(self._sql("INSERT INTO {t}stream_events (session_id, turn_key, id, kind, data) "
                                   "VALUES (?, ?, ?, ?, ?)"), (session_id, key, event.id, event.kind, event.data))

    def extend_stream(self, session_id: str, key: str, owner: str, tokens: Sequence[str], now: float) -> bool:
        """Append tokens (none: a heartbeat) for the replica that streams the turn; False when the
        turn is no longer its to stream (ended, or failed by a replica that found it lost)."""
        def extend(conn: Any) -> bool:
            with self._append_transaction(conn, session_id):
                stream = self._stream(conn, session_id, key)
                if stream is None or stream.state != RUNNING or stream.owner != owner:
                    return False
                events = [StreamEvent(stream.last_id + n, TOKEN, json.dumps({"token": token}))
                          for n, token in enumerate(tokens, 1)]
                self._insert_events(conn, session_id, key, events)
                conn.execute(self._sql("UPDATE {t}streams SET heartbeat_at = ?, last_id = ? "
                                       "WHERE session_id = ? AND turn_key = ?"),
                             (now, stream.last_id + len(events), session_id, key))
                return True

        return self._run(extend)

    def finish_stream(self, session_id: str, key: str, owner: str, append_key: str | None, text_out: str,
                      describe: Callable[[Any, bool], dict[str, Any]]) -> Any:
        """Store the turn and its ``ack`` event in one transaction, if the turn is still owner's to
        finish; the stored turn, or None (it was failed meanwhile: nothing is stored)."""
        def finish(conn: Any) -> Any:
            with self._append_transaction(conn, session_id):
                stream = self._stream(conn, session_id, key)
                if stream is None or stream.state != RUNNING or stream.owner != owner:
                    return None
                turn, replayed = self._append_in(conn, session_id, append_key, stream.input, text_out)
                ending = StreamEvent(stream.last_id + 1, ACK, json.dumps({"ack": describe(turn, replayed)}))
                self._insert_events(conn, session_id, key, [ending])
                conn.execute(self._sql("UPDATE {t}streams SET state = ?, last_id = ? WHERE session_id = ? AND turn_key = ?"),
                             (DONE, ending.id, session_id, key))
                return turn

        return self._run(finish)

    def fail_stream(self, session_id: str, key: str, reason: str, *, owner: str | None = None,
                    lost_owner: str | None = None) -> bool:
        """End a running turn as failed, with its ``failed`` event: by the replica streaming it
        (owner), or by one that found that replica lost (lost_owner: only while the row still
        names it). False when the turn had ended already or changed hands."""
        def fail(conn: Any) -> bool:
            with self._append_transaction(conn, session_id):
                stream = self._stream(conn, session_id, key)
                expected = owner if owner is not None else lost_owner
                if stream is None or stream.state != RUNNING or (expected is not None and stream.owner != expected):
                    return False
                ending = StreamEvent(stream.last_id + 1, FAILURE, json.dumps({"failed": reason}))
                self._insert_events(conn, session_id, key, [ending])
                conn.execute(self._sql("UPDATE {t}streams SET state = ?, last_id = ?, reason = ? "
                                       "WHERE session_id = ? AND turn_key = ?"),
                             (FAILED, ending.id, reason, session_id, key))
                return True

        return self._run(fail)

    def running_streams(self) -> list[TurnStream]:
        """Every turn still streaming, for the replicas' sweep for lost ones."""
        rows = self._run(lambda conn: self._query(conn, f"SELECT {STREAM_COLUMNS} FROM {{t}}streams WHERE state = ?",
                                                  RUNNING))
        return [TurnStream(*row) for row in rows]


__all__ = ["ACK", "DONE", "ENDINGS", "FAILED", "FAILURE", "RUNNING", "StreamEvent", "StreamOperations", "TOKEN",
           "TurnStream", "stream_schema_sql"]
