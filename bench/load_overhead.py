"""What drillbook's load path costs next to raw Locust, measured side by side in one run.

1. Requests/s: raw `locust` (FastHttpUser, GET /) against a trivial asyncio server, versus the
   same locustfile with drillbook's request log and receipts (drillbook.loadkit) run through
   drillbook.load (subprocess, parsing). Ratio printed; target >= 0.95.
2. Parsing plus delivery audit of a synthetic 10-minute, 100-session run (one turn per second
   per session: 60,000 requests and receipts). Target < 5 s.
3. Agent sessions one Locust process sustains against the sandbox (think time 1 s) before Locust
   warns that its CPU is saturated: a bounded sweep of user counts.

Run: python bench/load_overhead.py [--seconds 8] [--users 20] [--skip-sweep]
Traffic goes to 127.0.0.1 only; every run is bounded in time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from drillbook.config import LoadOptions, SandboxConfig
from drillbook.delivery import audit_delivery
from drillbook.load import collect, locustfile_for, run_load
from drillbook.ports import free_port
from drillbook.sandbox import launcher
from drillbook.sandbox.chain import GENESIS_HASH, turn_hash
from drillbook.sandbox.verifier import StoredSessionsVerifier
from drillbook.sandbox.store import Turn

TRIVIAL_SERVER = textwrap.dedent("""
    import asyncio, sys, uvloop
    from aiohttp import web
    async def ok(request):
        return web.Response(text="ok")
    app = web.Application()
    app.router.add_get("/", ok)
    uvloop.install()
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
""")

RAW_LOCUSTFILE = textwrap.dedent("""
    from locust import FastHttpUser, constant, task
    class Raw(FastHttpUser):
        wait_time = constant(0)
        @task
        def get(self):
            self.client.get("/")
""")

DRILLBOOK_LOCUSTFILE = "import drillbook.loadkit  # request log, receipts, options\n" + RAW_LOCUSTFILE


def rps_from_json(path: Path, seconds: float) -> float:
    entries = json.loads(path.read_text())
    return sum(e["num_requests"] for e in entries) / seconds


def raw_locust(locustfile: Path, host: str, users: int, seconds: float, out: Path) -> float:
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "locust", "-f", str(locustfile), "--headless", "--host", host,
                    "-u", str(users), "-r", str(users), "-t", f"{seconds:g}s", "--json-file", str(out / "raw"),
                    "--only-summary", "--stop-timeout", "0"], check=True, capture_output=True,
                   timeout=seconds + 60)
    return rps_from_json(out / "raw.json", seconds)


@contextmanager
def trivial_server(work: Path) -> Iterator[tuple[str, Path, Path]]:
    """The trivial asyncio server on 127.0.0.1, with the raw and the drillbook locustfile for it:
    (host, raw locustfile, drillbook locustfile). The server is stopped on the way out."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", TRIVIAL_SERVER, str(port)])
    try:
        time.sleep(1.0)
        raw_file, ours_file = work / "raw.py", work / "ours.py"
        raw_file.write_text(RAW_LOCUSTFILE)
        ours_file.write_text(DRILLBOOK_LOCUSTFILE)
        yield f"http://127.0.0.1:{port}", raw_file, ours_file
    finally:
        server.terminate()
        server.wait(10)


def compare_rps(users: int, seconds: float, work: Path) -> None:
    with trivial_server(work) as (host, raw_file, ours_file):
        results = {"raw": [], "drillbook": []}
        for round_index in range(2):  # alternate, so drift hits both sides
            results["raw"].append(raw_locust(raw_file, host, users, seconds, work / f"raw{round_index}"))
            started = time.perf_counter()
            result = run_load(LoadOptions(host=host, users=users, spawn_rate=users, run_time_s=seconds,
                                          stop_timeout_s=0), ours_file, {"t": "k"}, work / f"ours{round_index}")
            parse_s = time.perf_counter() - started - result.wall_s
            results["drillbook"].append(result.total_requests / seconds)
            audit_delivery(result.receipts, NoSessions())
        raw, ours = max(results["raw"]), max(results["drillbook"])
        print(f"requests/s, best of 2, {users} users, {seconds:g}s: raw locust {raw:.0f}, "
              f"through drillbook.load {ours:.0f}; ratio {ours / raw:.3f} (target >= 0.95); "
              f"parse after exit {parse_s:.2f}s")


class NoSessions:
    def read(self, tenant: str, session_id: str) -> list[Turn] | None:
        return None

    def chain_ok(self, session_id: str, turns: list[Turn]) -> bool:
        return True


def synthetic_run(out: Path, sessions: int = 100, seconds: int = 600) -> StoredSessionsVerifier:
    """Locust JSON, request log and receipts of a 10-minute run, one turn/s per session."""
    out.mkdir(parents=True, exist_ok=True)
    start = 1_800_000_000
    stored: dict[str, list[Turn]] = {}
    with open(out / "requests-1.csv", "w") as log, open(out / "receipts-1.jsonl", "w") as receipts:
        for index in range(sessions):
            session_id = f"ses_{index:04d}"
            prev, turns = GENESIS_HASH, []
            for seq in range(1, seconds + 1):
                digest = turn_hash(prev, session_id, seq, f"k{seq}", "in", "out")
                turns.append(Turn(session_id, seq, f"k{seq}", "in", "out", prev, digest, "t"))
                prev = digest
                t = start + seq + index / sessions
                log.write(f"{t:.6f},turn,{12.5 + (seq % 7):.3f},1,\n")
                receipts.write(json.dumps({"session_id": session_id, "tenant": "a", "seq": seq, "hash": digest,
                                           "idempotency_key": f"k{seq}", "attempts": 1, "acked_at": t}) + "\n")
            stored[session_id] = turns
    total = sessions * seconds
    (out / "locust.json").write_text(json.dumps([{
        "name": "turn", "method": "POST", "num_requests": total, "num_failures": 0, "max_response_time": 18.5,
        "response_times": {str(12 + d): total // 7 for d in range(7)},
        "num_reqs_per_sec": {str(start + s): sessions for s in range(1, seconds + 1)}, "num_fail_per_sec": {}}]))
    return StoredSessionsVerifier(stored)


def parse_and_audit(work: Path) -> None:
    verifier = synthetic_run(work / "synthetic")
    started = time.perf_counter()
    result = collect(work / "synthetic", 0, 600.0)
    parsed = time.perf_counter()
    report = audit_delivery(result.receipts, verifier)
    done = time.perf_counter()
    assert report.ok and report.acknowledged == 60_000
    print(f"10-minute, 100-session run (60,000 requests and receipts): parse {parsed - started:.2f}s, "
          f"audit {done - parsed:.2f}s, total {done - started:.2f}s (target < 5 s)")


def sweep_sessions(work: Path, seconds: float) -> None:
    config = SandboxConfig(agents=2, tokens_per_second=50, max_tokens=16, gpu_slots=512, rate_limit_rps=1e6,
                           rate_limit_burst=100000)
    state = work / "sandbox"
    handle = launcher.start(config, state)
    try:
        sustained = 0
        for users in (50, 100, 200, 400, 800, 1600):
            out = work / f"sweep-{users}"
            options = LoadOptions(host=handle.gateway_url, users=users, spawn_rate=users, run_time_s=seconds,
                                  stop_timeout_s=5, env={"DRILLBOOK_THINK_TIME": "1.0"})
            result = run_load(options, locustfile_for("agent-sessions"), handle.tenant_keys, out)
            log = (out / "locust.log").read_text()
            warned = "CPU usage" in log
            turns = result.stats.set_index("name")["requests"].get("turn", 0)
            print(f"  {users:4d} sessions: {turns / seconds:6.0f} turns/s, failures {result.total_failures}, "
                  f"CPU warning: {'yes' if warned else 'no'}")
            if warned or result.total_failures:
                break
            sustained = users
        print(f"one Locust process sustained {sustained} concurrent agent sessions (think time 1 s) against the "
              f"sandbox on this machine without a CPU warning")
    finally:
        launcher.stop(state, handle=handle)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--skip-sweep", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="drillbook-bench-") as tmp:
        work = Path(tmp)
        compare_rps(args.users, args.seconds, work)
        parse_and_audit(work)
        if not args.skip_sweep:
            sweep_sessions(work, args.seconds)


if __name__ == "__main__":
    main()
