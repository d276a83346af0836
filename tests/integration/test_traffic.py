"""The chaos probes' client traffic (drillbook.chaos.traffic.drive) against a real HTTP server."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from drillbook.chaos.traffic import drive

pytestmark = pytest.mark.integration

OPEN_DELAY_S = 0.6


class SlowToOpen(BaseHTTPRequestHandler):
    """The reference agent API's open and turn, where opening a session takes OPEN_DELAY_S (a
    platform on a busy machine) and a turn is answered at once."""

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/v1/sessions":
            time.sleep(OPEN_DELAY_S)
            self._answer(201, {"session_id": uuid.uuid4().hex})
        elif self.path.startswith("/v1/sessions/") and self.path.endswith("/turns"):
            self.server.turns += 1  # type: ignore[attr-defined]
            self._answer(200, {"output": "ok", "seq": self.server.turns, "hash": None})  # type: ignore[attr-defined]
        else:
            self._answer(404, {"error": "no such route"})

    def _answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def slow_to_open() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), SlowToOpen)
    server.turns = 0  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_window_shorter_than_opening_a_session_still_samples_a_turn_per_session(slow_to_open):
    # Each open takes 0.6 s and the window asks for 0.2 s: every session still sends one turn, so
    # a steady-state sample on a slow machine judges the platform's answers, not an empty window.
    window = drive(slow_to_open, "team-a", "key", "sample", sessions=3, duration_s=0.2)
    assert (window.acknowledged, window.failed) == (3, 0)
    assert window.ended - window.started >= OPEN_DELAY_S
    # and a window longer than the open keeps sending turns until its time is up
    longer = drive(slow_to_open, "team-a", "key", "sample", sessions=2, duration_s=OPEN_DELAY_S + 0.5)
    assert longer.acknowledged > 2 and longer.failed == 0
