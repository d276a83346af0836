"""Client traffic that chaos probes drive through a gateway while a fault is in place.

Concurrent sessions run turns (each with an idempotency key, sent once: retrying is the
platform's job, and a client-side retry would hide a gateway that does not) for a bounded time and
number of turns; every request's latency and outcome is kept, a failure with the reason the
platform gave. A window is
handed to whoever publishes it (the run's context) when it starts, so that safeguards watch it
fill and later probes judge it; the run writes it to its folder once, at the end. This is
deliberately small: sustained load belongs to Locust (drillbook.load).
"""

from __future__ import annotations

import json
import math
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

import httpx

from drillbook.agentapi import AgentApi, SessionNotOpened, failure_reason, open_session, receipt, send_turn
from drillbook.measure import percentile

REFERENCE_API = AgentApi()
WAKE_UP = "wake up"  # the first request from zero (cold start)

MAX_TURNS_PER_SESSION = 10_000


@dataclass
class TrafficWindow:
    """What clients saw in one window: acknowledged and failed turns, latencies, timing."""

    name: str
    tenant: str
    started: float = 0.0
    ended: float = 0.0
    acknowledged: int = 0
    failed: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)

    @property
    def error_rate(self) -> float:
        total = self.acknowledged + self.failed
        return self.failed / total if total else math.nan

    def percentile_ms(self, quantile: float) -> float:
        return percentile(self.latencies_ms, quantile)

    def summary(self) -> dict[str, Any]:
        return {"window": self.name, "tenant": self.tenant, "acknowledged": self.acknowledged, "failed": self.failed,
                "error_rate": self.error_rate, "p50_ms": self.percentile_ms(0.5), "p95_ms": self.percentile_ms(0.95),
                "started": self.started, "ended": self.ended, "errors": dict(self.errors)}


def drive(gateway: str, tenant: str, key: str, name: str, *, sessions: int, duration_s: float,
          max_turns: int = MAX_TURNS_PER_SESSION, max_tokens: int | None = None, think_s: float = 0.0,
          publish: Callable[[TrafficWindow], None] | None = None, api: AgentApi = REFERENCE_API) -> TrafficWindow:
    """Run `sessions` concurrent sessions for duration_s and at most max_turns each; publish gets
    the window as it starts filling.

    Every session that opens sends at least one turn, however long the open took: a window is a
    sample of the platform's answers, and a slow machine must not turn it into a sample of
    nothing (a 1 s steady-state sample whose opens took longer than that saw no turn at all, and
    the drill stopped for a steady state "not met" on a platform that served every request)."""
    window = TrafficWindow(name, tenant, started=time.time())
    if publish is not None:
        publish(window)
    lock = threading.Lock()
    stop_at = time.monotonic() + duration_s

    def record(ok: bool, millis: float, error: str = "") -> None:
        with lock:
            if ok:
                window.acknowledged += 1
                window.latencies_ms.append(millis)
            else:
                window.failed += 1
                window.errors[error] = window.errors.get(error, 0) + 1

    def one_session() -> None:
        with httpx.Client(base_url=gateway, headers=api.auth(key), timeout=30.0) as http:
            try:
                session_id = open_session(http, api)
            except SessionNotOpened as refused:
                record(False, 0.0, str(refused))
                return
            except httpx.HTTPError as error:
                record(False, 0.0, type(error).__name__)
                return
            for turn in range(max_turns):
                if turn and time.monotonic() >= stop_at:
                    return
                started = time.perf_counter()
                try:
                    response = send_turn(http, api, session_id, f"turn {turn}", uuid.uuid4().hex, max_tokens)
                    ok, error = response.status_code in (200, 201), failure_reason(response)
                except httpx.HTTPError as exc:
                    ok, error = False, type(exc).__name__
                record(ok, (time.perf_counter() - started) * 1000, "" if ok else error)
                if think_s:
                    time.sleep(think_s)

    threads = [threading.Thread(target=one_session, daemon=True) for _ in range(sessions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(duration_s + 60)
    window.ended = time.time()
    return window


def first_token_latency(gateway: str, key: str, timeout_s: float = 120.0, tenant: str = "",
                        api: AgentApi = REFERENCE_API) -> dict[str, Any]:
    """One turn on a new session: seconds to the first token and to the acknowledgement, and the
    acknowledged turn's receipt (so that the first request from zero is audited for delivery too).

    Streamed where the API streams (the first line carrying a token; the last line is the
    acknowledgement); otherwise the first token is the whole answer.
    """
    with httpx.Client(base_url=gateway, headers=api.auth(key), timeout=timeout_s) as http:
        sent = time.time()
        session_id = open_session(http, api)
        first_token = None
        last_line = ""
        lines: list[str] = []
        idempotency_key = uuid.uuid4().hex
        path = api.turn_path(session_id) + (f"?{api.stream_query}" if api.stream_query else "")
        with http.stream("POST", path, **api.body(api.turn_body_for(WAKE_UP, session_id, idempotency_key)),
                         headers=api.idempotency_headers(idempotency_key)) as streamed:
            if streamed.status_code not in (200, 201):
                raise httpx.HTTPStatusError(f"HTTP {streamed.status_code}", request=streamed.request, response=streamed)
            for line in streamed.iter_lines():
                if line and first_token is None and (not api.stream_query or '"token"' in line):
                    first_token = time.time()
                if line.strip():
                    last_line = line
                    lines.append(line)
        done = time.time()
    try:
        # A streamed answer acknowledges on its last line; any other answer is one JSON document
        # of any shape (an object, or a list of events), mapped by the profile's JMESPath.
        ack = json.loads(last_line if api.stream_query else "\n".join(lines))
        if isinstance(ack, dict) and isinstance(ack.get("ack"), dict):  # a streamed answer's last line may wrap it
            ack = ack["ack"]
        kept = receipt(api, ack, session_id, tenant, WAKE_UP, idempotency_key, acked_at=done)
    except (ValueError, TypeError, AttributeError):
        kept = None  # no acknowledgement in the answer: nothing to audit, and the audit says so
    return {"sent": sent, "first_token": first_token or done, "acknowledged": done,
            "first_token_s": (first_token or done) - sent, "total_s": done - sent, "receipt": kept}
