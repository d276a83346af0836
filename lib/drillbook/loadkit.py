"""What locustfiles build on: the agent-client User, its options, receipts and the request log.

Imported only inside a Locust process (it imports locust, which monkey-patches with gevent);
never import it in a notebook kernel or in drillbook's own process. Each Locust process writes
into the folder given by ``--drillbook-out``:

- ``receipts-<pid>.jsonl``: every acknowledged turn ``{session_id, tenant, seq, hash, ...}``,
  which the delivery audit later checks against what the workload stored;
- ``requests-<pid>.csv``: one line per request (start epoch, name, milliseconds as a float,
  ok, error), from which exact per-second and per-phase percentiles are computed;
- ``streams-<pid>.jsonl`` (streaming users): every streamed turn as its client received it,
  each event with its id and arrival time (drillbook.streamclient.TurnRecord);
- ``phases.jsonl`` (from a load shape): when each phase began.

Under Locust's master/worker mode only the master writes files: each worker sends its receipts
and request-log lines to the master in batches (a Locust custom message, every half second and
when its users stop, before it reports them stopped), and the master writes them to
``receipts-worker-<id>.jsonl`` and ``requests-worker-<id>.csv``. A worker therefore needs no
shared folder: it can run anywhere that reaches the master.

Your own locustfile (a target profile's ``load.locustfile``) imports this module to get the
request log, reads its keys with ``tenant_keys(environment)`` and calls ``acknowledged(...)``
for every acknowledged turn; drillbook then collects statistics and receipts as for its own.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import time
import uuid
from pathlib import Path
from typing import Any, TextIO

import gevent
from locust import FastHttpUser, between, events
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from drillbook import jsonl
from drillbook.agentapi import AgentApi
from drillbook.profile import parse_tenant_keys

TURN_RETRIES = 5
RETRYABLE_STATUS = {0, 429, 502, 503, 504}


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    group = parser  # locust's own parser: only it knows is_secret
    group.add_argument("--tenant-keys", env_var="DRILLBOOK_TENANT_KEYS", default="", is_secret=True,
                       help="tenant=key pairs, comma separated")
    group.add_argument("--agent-api", env_var="DRILLBOOK_AGENT_API", default="",
                       help="the target profile's agent API as JSON (paths, auth header, fields)")
    group.add_argument("--drillbook-out", env_var="DRILLBOOK_LOAD_OUT", default="",
                       help="folder for receipts, request log and phases")
    group.add_argument("--think-time", env_var="DRILLBOOK_THINK_TIME", type=float, default=0.5,
                       help="seconds between an agent session's turns")
    group.add_argument("--max-tokens", env_var="DRILLBOOK_MAX_TOKENS", type=int, default=0,
                       help="tokens per turn; 0 leaves it to the workload")
    group.add_argument("--drop-rate", env_var="DRILLBOOK_DROP_RATE", type=float, default=0.0,
                       help="share of streamed turns whose client drops the connection at a random token")
    group.add_argument("--handoff-rate", env_var="DRILLBOOK_HANDOFF_RATE", type=float, default=0.0,
                       help="share of dropped turns left for another process to resume")
    group.add_argument("--victim-tenant", env_var="DRILLBOOK_VICTIM_TENANT", default="")
    group.add_argument("--aggressor-tenant", env_var="DRILLBOOK_AGGRESSOR_TENANT", default="")
    group.add_argument("--victim-users", env_var="DRILLBOOK_VICTIM_USERS", type=int, default=4)
    group.add_argument("--aggressor-users", env_var="DRILLBOOK_AGGRESSOR_USERS", type=int, default=16)
    group.add_argument("--aggressor-tokens", env_var="DRILLBOOK_AGGRESSOR_TOKENS", type=int, default=64)
    group.add_argument("--baseline-s", env_var="DRILLBOOK_BASELINE_S", type=float, default=10.0)
    group.add_argument("--burst-s", env_var="DRILLBOOK_BURST_S", type=float, default=10.0)
    group.add_argument("--recovery-s", env_var="DRILLBOOK_RECOVERY_S", type=float, default=10.0)


RECORDS_MESSAGE = "drillbook_records"  # worker to master: receipts, request-log lines and streamed turns
RECORD_FILES = {"receipts": "jsonl", "requests": "csv", "streams": "jsonl"}  # what each process writes, by kind


class Recorder:
    """This process's receipt and request-log files; on a worker, the lines it sends its master."""

    def __init__(self) -> None:
        self.receipts: TextIO | None = None
        self.requests: TextIO | None = None
        self.streams: TextIO | None = None
        self.out: Path | None = None
        self.master: WorkerRunner | None = None  # set on a worker: lines go there, not to files
        self.pending: dict[str, list[str]] = {kind: [] for kind in RECORD_FILES}
        self.gathered: dict[str, dict[str, TextIO]] = {}  # on a master: each worker's files

    def open(self, out: str) -> None:
        if not out or self.receipts is not None:
            return
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        pid = os.getpid()
        self.receipts = open(self.out / f"receipts-{pid}.jsonl", "a", encoding="utf-8")
        self.requests = open(self.out / f"requests-{pid}.csv", "a", encoding="utf-8")
        self.streams = open(self.out / f"streams-{pid}.jsonl", "a", encoding="utf-8")

    def forward_to(self, runner: WorkerRunner) -> None:
        self.master = runner

    def _line(self, kind: str, line: str, handle: TextIO | None) -> None:
        if self.master is not None:
            self.pending[kind].append(line)
        elif handle is not None:
            handle.write(line)

    def receipt(self, record: dict[str, Any]) -> None:
        self._line("receipts", json.dumps(record) + "\n", self.receipts)

    def stream(self, record: dict[str, Any]) -> None:
        """A streamed turn as its client saw it (drillbook.streamclient.TurnRecord)."""
        self._line("streams", json.dumps(record) + "\n", self.streams)

    def request(self, start: float, name: str, millis: float, ok: bool, error: str) -> None:
        self._line("requests", f"{start:.6f},{name},{millis:.3f},{int(ok)},{error}\n", self.requests)

    def phase(self, name: str, started: float) -> None:
        if self.out is not None:
            jsonl.append(self.out / "phases.jsonl", {"phase": name, "started": started})

    def flush(self) -> None:
        if self.master is not None:
            batch, self.pending = self.pending, {kind: [] for kind in RECORD_FILES}
            if any(batch.values()):
                self.master.send_message(RECORDS_MESSAGE, {kind: "".join(lines) for kind, lines in batch.items()})
            return
        for handle in (self.receipts, self.requests, self.streams):
            if handle is not None:
                handle.flush()

    def gather(self, worker: str, batch: dict[str, str]) -> None:
        """On a master: one worker's batch of lines, appended to that worker's files."""
        if self.out is None:
            return
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", worker)[-80:]
        files = self.gathered.get(name)
        if files is None:
            files = {kind: open(self.out / f"{kind}-worker-{name}.{suffix}", "a", encoding="utf-8")
                     for kind, suffix in RECORD_FILES.items()}
            self.gathered[name] = files
        for kind, handle in files.items():
            if batch.get(kind):
                handle.write(batch[kind])
                handle.flush()


recorder = Recorder()


def tenant_keys(environment: Environment) -> dict[str, str]:
    """The tenant keys drillbook handed this Locust process (for your own locustfile)."""
    return parse_tenant_keys(environment.parsed_options.tenant_keys)


def acknowledged(session_id: str, tenant: str, seq: int | None, digest: str | None,
                 idempotency_key: str | None = None, attempts: int = 1, sent: str | None = None) -> None:
    """Keep a receipt of an acknowledged turn, for the delivery audit (for your own locustfile):
    what was sent (its input text and idempotency key) and the position and digest the
    acknowledgement carried, where the API gives them."""
    recorder.receipt({"session_id": session_id, "tenant": tenant, "seq": seq, "hash": digest,
                      "idempotency_key": idempotency_key, "attempts": attempts, "acked_at": time.time(),
                      "sent": sent})


@events.init.add_listener
def _open_files(environment: Environment, **_: Any) -> None:
    if isinstance(environment.runner, WorkerRunner):
        recorder.forward_to(environment.runner)
        return
    if environment.parsed_options is not None:
        recorder.open(environment.parsed_options.drillbook_out)
    if isinstance(environment.runner, MasterRunner):
        environment.runner.register_message(
            RECORDS_MESSAGE, lambda environment, msg, **_: recorder.gather(str(msg.node_id), msg.data or {}))


@events.request.add_listener
def _log_request(request_type: str, name: str, response_time: float, exception: BaseException | None = None,
                 start_time: float | None = None, **_: Any) -> None:
    started = start_time if start_time is not None else time.time() - response_time / 1000
    error = "" if exception is None else type(exception).__name__ + ":" + str(exception).replace(",", ";")[:80]
    recorder.request(started, name, response_time, exception is None, error.replace("\n", " "))


@events.test_stop.add_listener
def _flush_on_stop(**_: Any) -> None:
    recorder.flush()


@events.quitting.add_listener
def _flush_on_quit(**_: Any) -> None:
    recorder.flush()


def think_time(user: "AgentClientUser") -> float:
    """A Locust wait_time: --think-time, spread by half either way (0: none)."""
    think = user.environment.parsed_options.think_time
    return between(think * 0.5, think * 1.5)(user) if think > 0 else 0


_tenant_cycle: itertools.cycle[str] | None = None  # users spread over tenants in turn, per process


class AgentClientUser(FastHttpUser):
    """An agent client: one session, turns with idempotency keys, retries with the same key,
    and a receipt for every acknowledged ``{seq, hash}``.

    Subclasses set ``tenant_option`` to pin a tenant (by option name), or leave it None to
    spread users over every tenant in ``--tenant-keys``. Paths, auth header and fields come
    from the target profile's agent API (``--agent-api``; the reference platform's by default).
    """

    abstract = True
    tenant_option: str | None = None

    tenant: str
    session_id: str | None = None

    def _pick_tenant(self) -> tuple[str, str]:
        options = self.environment.parsed_options
        keys = parse_tenant_keys(options.tenant_keys)
        if not keys:
            raise RuntimeError("no tenant keys: set --tenant-keys or DRILLBOOK_TENANT_KEYS")
        pinned = getattr(options, self.tenant_option) if self.tenant_option else ""
        if pinned:
            return pinned, keys[pinned]
        global _tenant_cycle
        if _tenant_cycle is None:
            _tenant_cycle = itertools.cycle(sorted(keys))
        name = next(_tenant_cycle)
        return name, keys[name]

    def on_start(self) -> None:
        options = self.environment.parsed_options
        self.api = AgentApi.model_validate_json(options.agent_api) if options.agent_api else AgentApi()
        self.tenant, key = self._pick_tenant()
        self.auth = self.api.auth(key)
        self.session_id = None
        self.turn_index = 0
        if self.api.mints_sessions():
            self.session_id = self.api.minted_session()
            return
        key = uuid.uuid4().hex  # one key for every attempt: a retried open opens one session
        for attempt in range(TURN_RETRIES):
            with self.client.post(self.api.open_session, **self.api.body(self.api.open_body()),
                                  headers={**self.auth, **self.api.idempotency_headers(key)},
                                  name="open session", catch_response=True) as response:
                if response.status_code in (200, 201):
                    self.session_id = self.api.session_id_of(response.json())
                    if self.session_id is not None:
                        return
                    response.failure(f"open session: api.session_id_field {self.api.session_id_field!r} "
                                     "selects nothing in the answer")
                else:
                    response.failure(f"open session: HTTP {response.status_code}")
            gevent.sleep(min(2.0, 0.1 * 2 ** attempt))

    def next_turn(self) -> tuple[str, str] | None:
        """The next turn's idempotency key and input text, once the session is open (None: it
        could not be opened)."""
        if self.session_id is None:
            self.on_start()
            if self.session_id is None:
                return None
        self.turn_index += 1
        return uuid.uuid4().hex, f"turn {self.turn_index} of {self.session_id}"

    def run_turn(self, max_tokens: int = 0, name: str = "turn") -> None:
        """One turn, retried with the same idempotency key until acknowledged or out of attempts."""
        turn = self.next_turn()
        if turn is None or self.session_id is None:
            return
        key, text = turn
        body = self.api.turn_body_for(text, self.session_id, key, max_tokens)
        path = self.api.turn_path(self.session_id)
        for attempt in range(1, TURN_RETRIES + 1):
            with self.client.post(path, **self.api.body(body), headers={**self.auth, **self.api.idempotency_headers(key)},
                                  name=name, catch_response=True) as response:
                if response.status_code in (200, 201):
                    ack = self.api.acknowledgement(response.json())
                    acknowledged(self.session_id, self.tenant, ack.seq, ack.digest, key, attempt, sent=text)
                    return
                response.failure(f"HTTP {response.status_code}")
                if response.status_code not in RETRYABLE_STATUS:
                    return
            gevent.sleep(min(2.0, 0.05 * 2 ** attempt))

    def stream_turn(self, max_tokens: int, drop_rate: float, handoff_rate: float, deadline_s: float = 30.0) -> None:
        """One streamed turn (api.streams): dropped at a random token with drop_rate, then resumed by
        a new client object that knows only the session and the last event id, or (handoff_rate of
        the drops) left for another process to resume. Every connection is recorded (streams file)
        and reported to Locust: "stream turn" until its ending, "resume" until the next event."""
        from drillbook.streamclient import TurnRecord, follow_turn

        turn = self.next_turn()
        if turn is None or self.session_id is None:
            return
        key, text = turn
        streams = self.api.streams
        record = TurnRecord(self.session_id, self.tenant, key, text, time.time())
        dropped = random.random() < drop_rate and max_tokens > 1
        drops = [random.randint(1, max_tokens - 1)] if dropped else []
        handed_off = dropped and random.random() < handoff_rate
        body = json.dumps(self.api.turn_body_for(text, self.session_id, key, max_tokens)).encode()
        try:
            follow_turn(self.host, streams, self.auth, record, body, drops, deadline_s, self.api.idempotency_headers(key),
                        max_connections=1 if handed_off else None)  # handed off: the rest is another process's
        finally:  # a turn cut short by the load's end is recorded too: another process resumes it
            recorder.stream({**record.to_json(), "handed_off": handed_off or record.ending() is None})
            self._report_stream(record)

    def _report_stream(self, record: Any) -> None:
        from drillbook.streamclient import ACK

        fire = self.environment.events.request.fire
        for index, connection in enumerate(record.connections):
            name = "stream turn" if index == 0 else "resume"
            until = connection.first_event_at if index else connection.closed_at
            failed = not connection.events and connection.how in ("refused", "broken")
            fire(request_type="SSE", name=name, start_time=connection.opened_at,
                 response_time=((until or connection.closed_at) - connection.opened_at) * 1000, response_length=0,
                 exception=RuntimeError(connection.detail or connection.how) if failed else None, context={})
        ending = record.ending()
        if ending is not None and ending.kind == ACK:
            ack = self.api.acknowledgement(ending.detail)
            acknowledged(record.session_id, self.tenant, ack.seq, ack.digest, record.turn_key, len(record.connections),
                         sent=record.sent)


_started_at: list[float] = []


FLUSH_EVERY_S = 0.5


def _flush_while_running() -> None:
    while True:
        gevent.sleep(FLUSH_EVERY_S)
        recorder.flush()


@events.test_start.add_listener
def _mark_start(**_: Any) -> None:
    _started_at[:] = [time.time()]
    gevent.spawn(_flush_while_running)  # so that a caller can see that requests are flowing


def elapsed() -> float:
    """Seconds since this process saw the test start."""
    return time.time() - _started_at[0] if _started_at else 0.0


def noisy_phase(options: Any, seconds: float) -> str:
    """baseline, burst, recovery or done, from the phase lengths in the options."""
    for name, end in (("baseline", options.baseline_s),
                      ("burst", options.baseline_s + options.burst_s),
                      ("recovery", options.baseline_s + options.burst_s + options.recovery_s)):
        if seconds < end:
            return name
    return "done"


class PhasedShape:
    """Mixin for load shapes: record each phase's start once, as the shape moves through them."""

    _current_phase: str | None = None

    def enter_phase(self, name: str) -> None:
        if name != self._current_phase:
            self._current_phase = name
            recorder.phase(name, time.time())
