"""tinyagent: a small agent service that is NOT drillbook's reference platform.

It exists so that tests can show drillbook drives someone else's workload through a target
profile alone. Its router, replica pool and admin API also run third-party services as the
replicas (``--worker-command``, e.g. a LangServe app under uvicorn), playing the part of the
platform a team runs its service on (compose, systemd, a cluster). It shares no code with drillbook (standard library only) and differs on purpose:
other paths (/api/conversations/...), another auth header (X-Api-Key), another idempotency
header (X-Request-Id), other field names (id, index, digest), no streaming, and its own store
(one SQLite file) with its own digest chain. Its read-back is not drillbook's contract either
(GET .../messages answers {"messages": [...]}), so the delivery audit needs a verifier plug-in.

    tinyagent.py serve --port P --admin-port A --data DIR [--replicas 2] [--load-delay 0.3]
                       [--bug lose-first-turn] [--worker-command CMD] [--health-path P] [--no-activator]
                       [--store-bug empty-backups] [--lie noop-kill|slow-restart|stale-status|noop-destroy
                       |noop-restore (repeat)]
    tinyagent.py ctl --admin URL [--token T] status | kill COUNT SIGNAL | scale N | backup | restore NAME |
                     destroy | recreate | healthy

Tenant keys come from TINYAGENT_KEYS (team=key,...); with TINYAGENT_ADMIN_TOKEN set, the admin
API's changes (kill, scale, the store's operations) need it in X-Admin-Token (ctl --token). `serve` runs a router on --port that
forwards to worker processes (restarted when they die, retried on another worker when one
fails mid-request, started on demand when scaled to zero) and an admin API on --admin-port.
The bug lose-first-turn acknowledges a conversation's first message without storing it. The lies
answer as if work was done: noop-kill names replicas it did not kill, slow-restart holds a killed
replica's replacement back 9 s, stale-status answers what it saw up to 2 s ago, noop-destroy and
noop-restore acknowledge and do nothing. The pool writes its own truth (each replica's death
and readiness, with the time) to DATA/truth.jsonl.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import shlex
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (id TEXT PRIMARY KEY, team TEXT NOT NULL, greeted INTEGER DEFAULT 0);
CREATE TABLE IF NOT EXISTS messages (conversation TEXT NOT NULL, idx INTEGER NOT NULL, request_id TEXT,
    text TEXT NOT NULL, reply TEXT NOT NULL, prev TEXT NOT NULL, digest TEXT NOT NULL,
    PRIMARY KEY (conversation, idx), UNIQUE (conversation, request_id));
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def connect(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(db, timeout=30, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    return conn


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def body(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}") if length else {}

    def answer(self, status: int, payload: object) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


# -- worker: one replica of the agent ---------------------------------------------------------

def worker(port: int, db: Path, bug: str) -> None:
    class Worker(Handler):
        def do_GET(self) -> None:
            parts = urlsplit(self.path).path.strip("/").split("/")
            if parts == ["health"]:
                return self.answer(200, {"ok": True})
            if len(parts) == 4 and parts[:2] == ["api", "conversations"] and parts[3] == "messages":
                conn = connect(db)
                try:
                    owner = conn.execute("SELECT team FROM conversations WHERE id=?", (parts[2],)).fetchone()
                    if owner is None or owner[0] != self.headers.get("X-Team"):
                        return self.answer(404, {"error": "no such conversation"})
                    rows = conn.execute("SELECT idx, digest, prev, request_id FROM messages WHERE conversation=? "
                                        "ORDER BY idx", (parts[2],)).fetchall()
                finally:
                    conn.close()
                return self.answer(200, {"messages": [{"index": i, "digest": d, "prev": p, "request_id": r}
                                                      for i, d, p, r in rows]})
            self.answer(404, {"error": "not found"})

        def do_POST(self) -> None:
            parts = urlsplit(self.path).path.strip("/").split("/")
            team = self.headers.get("X-Team", "")
            conn = connect(db)
            try:
                if parts == ["api", "conversations"]:
                    self.body()
                    conversation = uuid.uuid4().hex
                    conn.execute("INSERT INTO conversations (id, team) VALUES (?, ?)", (conversation, team))
                    return self.answer(201, {"id": conversation})
                if len(parts) == 4 and parts[:2] == ["api", "conversations"] and parts[3] == "messages":
                    return self.message(conn, parts[2], team, self.body().get("text", ""),
                                        self.headers.get("X-Request-Id"))
                self.answer(404, {"error": "not found"})
            finally:
                conn.close()

        def message(self, conn: sqlite3.Connection, conversation: str, team: str, text: str,
                    request_id: str | None) -> None:
            conn.execute("BEGIN IMMEDIATE")
            owner = conn.execute("SELECT team, greeted FROM conversations WHERE id=?", (conversation,)).fetchone()
            if owner is None or owner[0] != team:
                conn.execute("ROLLBACK")
                return self.answer(404, {"error": "no such conversation"})
            lose = bug == "lose-first-turn" and not owner[1]
            if request_id:
                seen = conn.execute("SELECT idx, digest, reply FROM messages WHERE conversation=? AND request_id=?",
                                    (conversation, request_id)).fetchone()
                if seen:
                    conn.execute("ROLLBACK")
                    return self.answer(200, {"index": seen[0], "digest": seen[1], "reply": seen[2]})
            last = conn.execute("SELECT idx, digest FROM messages WHERE conversation=? ORDER BY idx DESC LIMIT 1",
                                (conversation,)).fetchone()
            index, prev = (last[0] + 1, last[1]) if last else (1, "")
            reply = f"echo: {text[::-1]}"
            digest = hashlib.sha256(f"{prev}|{index}|{request_id}|{text}|{reply}".encode()).hexdigest()
            if lose:  # the bug: a conversation's first message is acknowledged below but never stored
                conn.execute("UPDATE conversations SET greeted=1 WHERE id=?", (conversation,))
            else:
                conn.execute("INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, ?)",
                             (conversation, index, request_id, text, reply, prev, digest))
            conn.execute("COMMIT")
            time.sleep(0.005)  # the reply takes a moment after the write, as inference would
            self.answer(200, {"index": index, "digest": digest, "reply": reply})

    server = ThreadingHTTPServer(("127.0.0.1", port), Worker)
    server.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    server.serve_forever()


# -- serve: router, supervisor and admin API ---------------------------------------------------

SLOW_RESTART_S = 9.0
STALE_STATUS_S = 2.0


class Replica:
    def __init__(self, name: str, port: int, process: subprocess.Popen) -> None:
        self.name, self.port, self.process = name, port, process
        self.ready = False


class Pool:
    """The worker replicas: desired count, restarts, readiness, kills and scaling."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.db = Path(args.data) / "store.sqlite"
        self.desired = args.replicas
        self.replicas: list[Replica] = []
        self.lock = threading.Lock()
        self.counter = 0
        self.stopping = False
        self.lies = set(args.lie or [])
        self.held_until = 0.0  # slow-restart: no replacement before this (monotonic)
        self.seen: tuple[float, dict] | None = None  # stale-status: the answer being repeated
        self.truth = Path(args.data) / "truth.jsonl"

    def tell_truth(self, event: str, name: str) -> None:
        with open(self.truth, "a", encoding="utf-8") as log:
            log.write(json.dumps({"t": time.time(), "event": event, "replica": name}) + "\n")

    def spawn(self) -> Replica:
        self.counter += 1
        port = free_port()
        if self.args.worker_command:  # someone else's service as the replica (it reads the store at {db})
            command = shlex.split(self.args.worker_command.replace("{port}", str(port)).replace("{db}", str(self.db)))
        else:
            command = [sys.executable, __file__, "worker", "--port", str(port), "--db", str(self.db),
                       "--bug", self.args.bug, "--load-delay", str(self.args.load_delay)]
        replica = Replica(f"tinyagent-{self.counter}", port, subprocess.Popen(command))
        self.replicas.append(replica)
        return replica

    def supervise(self) -> None:
        while not self.stopping:
            with self.lock:
                for gone in [r for r in self.replicas if r.process.poll() is not None]:
                    self.tell_truth("exited", gone.name)
                self.replicas = [r for r in self.replicas if r.process.poll() is None]
                while len(self.replicas) < self.desired and time.monotonic() >= self.held_until:
                    self.spawn()
                for extra in self.replicas[self.desired:]:
                    extra.ready = False
                    extra.process.terminate()
                pending = [r for r in self.replicas if not r.ready]
            for replica in pending:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{replica.port}{self.args.health_path}", timeout=1):
                        replica.ready = True
                        self.tell_truth("ready", replica.name)
                except OSError:
                    pass
            time.sleep(0.05)

    def status(self) -> dict:
        with self.lock:
            live = [r for r in self.replicas if r.process.poll() is None]
            now = {"desired": self.desired, "ready": sum(1 for r in live if r.ready), "replicas": len(live),
                   "ids": [f"{r.name}@{r.process.pid}" for r in live if r.ready]}
            if "stale-status" in self.lies:
                if self.seen is None or time.monotonic() - self.seen[0] >= STALE_STATUS_S:
                    self.seen = (time.monotonic(), now)
                now = self.seen[1]
            return now

    def kill(self, count: int, sig: str) -> list[str]:
        with self.lock:
            victims = [r for r in self.replicas if r.ready and r.process.poll() is None][:count]
            if "noop-kill" in self.lies:
                return [r.name for r in victims]
            if "slow-restart" in self.lies:
                self.held_until = time.monotonic() + SLOW_RESTART_S
            for replica in victims:
                replica.ready = False
                replica.process.send_signal(getattr(signal, sig))
                self.tell_truth("killed", replica.name)
            return [r.name for r in victims]

    def scale(self, replicas: int) -> None:
        with self.lock:
            self.desired = replicas

    def pick(self, avoid: set[str], wait_s: float) -> Replica | None:
        """A ready replica not in avoid; scales up from zero (the activator) and waits up to wait_s."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            with self.lock:
                if self.desired == 0:
                    if not self.args.activator:
                        return None  # nothing starts a replica for a request at zero
                    self.desired = 1
                ready = [r for r in self.replicas if r.ready and r.process.poll() is None and r.name not in avoid]
                if not ready:
                    ready = [r for r in self.replicas if r.ready and r.process.poll() is None]
                if ready:
                    return ready[int(time.monotonic() * 1000) % len(ready)]
            time.sleep(0.02)
        return None


def serve(args: argparse.Namespace) -> None:
    keys = {}
    for item in os.environ.get("TINYAGENT_KEYS", "").split(","):
        if "=" in item:
            team, key = item.split("=", 1)
            keys[key.strip()] = team.strip()
    Path(args.data, "backups").mkdir(parents=True, exist_ok=True)
    pool = Pool(args)
    conn = connect(pool.db)
    conn.executescript(SCHEMA)
    conn.close()

    class Router(Handler):
        def forward(self, method: str) -> None:
            team = keys.get(self.headers.get("X-Api-Key", ""))
            if team is None:
                return self.answer(401, {"error": "unknown X-Api-Key"})
            length = int(self.headers.get("Content-Length") or 0)
            payload = self.rfile.read(length) if length else b""
            headers = {"X-Team": team, "Content-Type": self.headers.get("Content-Type", "application/json")}
            if self.headers.get("X-Request-Id"):
                headers["X-Request-Id"] = self.headers["X-Request-Id"]
            tried: set[str] = set()
            for _ in range(4):
                replica = pool.pick(tried, wait_s=30.0)
                if replica is None:
                    break
                tried.add(replica.name)
                upstream = http.client.HTTPConnection("127.0.0.1", replica.port, timeout=30)
                try:
                    upstream.request(method, self.path, body=payload or None, headers=headers)
                    response = upstream.getresponse()
                except OSError:
                    upstream.close()
                    replica.ready = False  # a dead or dying replica: try another
                    continue
                if response.getheader("Content-Type", "").startswith("text/event-stream"):
                    return self.relay_stream(response, upstream)
                try:
                    data = response.read()
                except (OSError, http.client.HTTPException) as cut:
                    # The replica answered and died before its reply was whole: the request may
                    # have been applied, so it is not sent again (as a load balancer does with a
                    # POST); the client hears why.
                    replica.ready = False
                    return self.answer(502, {"error": f"reply cut: replica {replica.name} died mid-reply ({cut!r})"})
                finally:
                    upstream.close()
                self.send_response(response.status)
                self.send_header("Content-Type", response.getheader("Content-Type", "application/json"))
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            self.answer(503, {"error": "no replica could answer"})

        def relay_stream(self, response: http.client.HTTPResponse, upstream: http.client.HTTPConnection) -> None:
            """Server-Sent Events go through as they come, on a connection closed at their end; a
            client that leaves closes the replica's side too."""
            self.send_response(response.status)
            self.send_header("Content-Type", response.getheader("Content-Type", "text/event-stream"))
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            try:
                while chunk := response.read1(65536):
                    self.wfile.write(chunk)
                    self.wfile.flush()
            except (OSError, http.client.HTTPException):
                pass
            finally:
                upstream.close()

        def do_GET(self) -> None:
            self.forward("GET")

        def do_POST(self) -> None:
            self.forward("POST")

    class Admin(Handler):
        def do_GET(self) -> None:
            if self.path == "/status":
                return self.answer(200, pool.status())
            if self.path == "/store":
                try:
                    conn = connect(pool.db)
                    conn.execute("SELECT count(*) FROM messages").fetchone()
                    conn.close()
                    return self.answer(200, {"healthy": True})
                except sqlite3.Error as error:
                    return self.answer(503, {"healthy": False, "error": str(error)})
            self.answer(404, {"error": "not found"})

        def do_POST(self) -> None:
            token = os.environ.get("TINYAGENT_ADMIN_TOKEN")
            if token and self.headers.get("X-Admin-Token") != token:  # changes need the token; reads do not
                return self.answer(403, {"error": "X-Admin-Token required"})
            url = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            if url.path == "/kill":
                return self.answer(200, {"killed": pool.kill(int(query.get("count", 1)), query.get("signal", "SIGKILL"))})
            if url.path == "/scale":
                pool.scale(int(query["replicas"]))
                return self.answer(200, pool.status())
            if url.path == "/backup":
                name = time.strftime("%Y%m%dT%H%M%S") + f"-{uuid.uuid4().hex[:6]}.sqlite"
                source, target = connect(pool.db), sqlite3.connect(Path(args.data) / "backups" / name)
                if args.store_bug == "empty-backups":  # the bug: a backup of nothing, reported as taken
                    source.close()
                    source = sqlite3.connect(":memory:")
                source.backup(target)
                source.close()
                target.close()
                return self.answer(200, {"backup": name})
            if url.path == "/restore" and "noop-restore" in pool.lies:
                return self.answer(200, {"restored": "latest"})
            if url.path == "/destroy" and "noop-destroy" in pool.lies:
                return self.answer(200, {"destroyed": True})
            if url.path == "/restore":
                backups = sorted((Path(args.data) / "backups").glob("*.sqlite"))
                name = query.get("name", "latest")
                chosen = backups[-1] if name == "latest" and backups else Path(args.data) / "backups" / name
                if not chosen.exists():
                    return self.answer(404, {"error": f"no backup {name}"})
                source, target = sqlite3.connect(chosen), connect(pool.db)
                source.backup(target)
                source.close()
                target.close()
                return self.answer(200, {"restored": chosen.name})
            if url.path == "/destroy":  # every table dropped; their schema kept for recreate
                conn = connect(pool.db)
                tables = conn.execute("SELECT name, sql FROM sqlite_master WHERE type='table'").fetchall()
                Path(args.data, "schema.sql").write_text(";\n".join(sql for _, sql in tables) + ";\n")
                conn.executescript("".join(f'DROP TABLE IF EXISTS "{name}";' for name, _ in tables))
                conn.close()
                return self.answer(200, {"destroyed": True})
            if url.path == "/recreate":
                schema = Path(args.data, "schema.sql")
                conn = connect(pool.db)
                conn.executescript(schema.read_text() if schema.exists() else SCHEMA)
                conn.close()
                return self.answer(200, {"recreated": True})
            self.answer(404, {"error": "not found"})

    router = ThreadingHTTPServer(("127.0.0.1", args.port), Router)
    admin = ThreadingHTTPServer(("127.0.0.1", args.admin_port), Admin)
    for server in (router, admin):
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
    threading.Thread(target=pool.supervise, daemon=True).start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    pool.stopping = True
    with pool.lock:
        for replica in pool.replicas:
            replica.process.terminate()
        for replica in pool.replicas:
            try:
                replica.process.wait(5)
            except subprocess.TimeoutExpired:
                replica.process.kill()


# -- ctl: the commands a target profile names ---------------------------------------------------

def ctl(args: argparse.Namespace) -> int:
    def call(method: str, path: str) -> dict:
        request = urllib.request.Request(args.admin.rstrip("/") + path, method=method,
                                         headers={"X-Admin-Token": args.token} if args.token else {})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    op, rest = args.op, args.rest
    try:
        if op == "status":
            print(json.dumps(call("GET", "/status")))
        elif op == "kill":
            print("\n".join(call("POST", f"/kill?count={int(rest[0])}&signal={rest[1]}")["killed"]))
        elif op == "scale":
            call("POST", f"/scale?replicas={int(rest[0])}")
        elif op == "backup":
            print(call("POST", "/backup")["backup"])
        elif op == "restore":
            call("POST", f"/restore?name={rest[0] if rest else 'latest'}")
        elif op in ("destroy", "recreate"):
            call("POST", f"/{op}")
        elif op == "healthy":
            call("GET", "/store")
        else:
            print(f"unknown operation {op}", file=sys.stderr)
            return 2
    except OSError as error:
        print(f"tinyagent ctl {op}: {error}", file=sys.stderr)
        return 1
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(prog="tinyagent")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--admin-port", type=int, required=True)
    s.add_argument("--data", required=True)
    s.add_argument("--replicas", type=int, default=2)
    s.add_argument("--load-delay", type=float, default=0.3)
    s.add_argument("--bug", default="none", choices=["none", "lose-first-turn"])
    s.add_argument("--worker-command", default="", help="run this service as each replica ({port}, {db})")
    s.add_argument("--health-path", default="/health")
    s.add_argument("--store-bug", default="none", choices=["none", "empty-backups"])
    s.add_argument("--lie", action="append", choices=["noop-kill", "slow-restart", "stale-status", "noop-destroy",
                                                       "noop-restore"])
    s.add_argument("--no-activator", dest="activator", action="store_false",
                   help="a request at zero replicas waits for nothing to start it")
    w = sub.add_parser("worker")
    w.add_argument("--port", type=int, required=True)
    w.add_argument("--db", required=True)
    w.add_argument("--bug", default="none")
    w.add_argument("--load-delay", type=float, default=0.0)
    c = sub.add_parser("ctl")
    c.add_argument("--admin", required=True)
    c.add_argument("--token", help="the admin token changes need (the pool's TINYAGENT_ADMIN_TOKEN)")
    c.add_argument("op")
    c.add_argument("rest", nargs="*")
    args = parser.parse_args()
    if args.command == "serve":
        serve(args)
        return 0
    if args.command == "worker":
        import ctypes

        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: never outlive serve
        time.sleep(args.load_delay)  # loading the model, as it were
        worker(args.port, Path(args.db), args.bug)
        return 0
    return ctl(args)


if __name__ == "__main__":
    sys.exit(main())
