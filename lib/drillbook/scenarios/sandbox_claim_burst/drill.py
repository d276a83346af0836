"""The claim burst: with sessions working, more sessions claim a code sandbox at once than the warm
pool holds; every claim is timed by its client, the pool is read (each reading stamped) until it
is full again. What it measures; the judging is .judge (pure, over what this records)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from drillbook.codeboxes import SandboxCall, sandboxes_of
from drillbook.drills import keep_observations
from drillbook.runbook import Run
from drillbook.scenarios.sandbox_claim_burst.judge import burst_figures, judge_burst

CLAIMS = "claims.jsonl"
POOL = "pool.jsonl"
WORKING = "working-runs.jsonl"
STALLED_S = 3.0  # before the burst: a pool that has not grown for this long is taken as it is
WORK = "import hashlib; print(hashlib.sha256(b'x' * 100000).hexdigest())"


def sandbox_claim_burst(run: Run, working_sessions: int, beyond_pool: int, refill_timeout_s: float,
                        max_claim_p50_s: float, max_claim_p90_s: float, max_claim_p99_s: float,
                        max_failed_claims: int) -> dict[str, Any]:
    found = sandboxes_of(run)
    if found is None:
        return {}
    target, tenants = found
    readings: list[dict[str, Any]] = []

    def read_pool() -> dict[str, Any]:
        at = time.time()
        pool = target.sandbox_fleet()["pool"]
        reading = {"at": at, "size": int(pool["size"]), "warm": int(pool["warm"])}
        readings.append(reading)
        return reading

    workers = [target.sandbox_session(tenants[i % len(tenants)]) for i in range(working_sessions)]
    working: list[SandboxCall] = []
    stop = threading.Event()
    loops = [threading.Thread(target=_keep_working, args=(w, working, stop), daemon=True) for w in workers]
    burst: list[Any] = []
    claims: list[SandboxCall] = []
    try:
        for loop in loops:
            loop.start()
        reading = _until_full(read_pool, refill_timeout_s, stalled_s=STALLED_S)
        size, warm_before = reading["size"], reading["warm"]
        count = max(size, warm_before) + beyond_pool
        burst = [target.sandbox_session(tenants[i % len(tenants)]) for i in range(count)]
        run.event("claim_burst_started", claims=count, warm=warm_before, pool=size)
        with ThreadPoolExecutor(max_workers=count) as pool:
            claims = list(pool.map(lambda session: session.claim(), burst))
        ended = max(call.ended for call in claims)
        run.event("claim_burst_answered", at=ended)
        _until_full(read_pool, refill_timeout_s)
    finally:
        stop.set()
        for loop in loops:
            loop.join(timeout=60)
        for session in [*burst, *workers]:
            session.release()
            session.close()
    claim_rows = [call.to_json() for call in claims]
    working_rows = [call.to_json() for call in working]
    keep_observations(run, CLAIMS, claim_rows)
    keep_observations(run, POOL, readings)
    keep_observations(run, WORKING, working_rows)
    figures = burst_figures(claim_rows, readings, warm_before, size, working_rows)
    for name, value, unit in figures.records():
        run.record(name, value, unit)
    run.keep(judge_burst(figures, max_claim_p50_s, max_claim_p90_s, max_claim_p99_s, max_failed_claims,
                         refill_timeout_s))
    return {"figures": figures}


def _until_full(read_pool: Any, timeout_s: float, stalled_s: float | None = None) -> dict[str, Any]:
    """Read the pool until it is full, for at most timeout_s; with stalled_s, also stop once it
    has not grown for that long (a pool that does not fill: the burst goes ahead and says so)."""
    deadline = time.monotonic() + timeout_s
    reading = read_pool()
    grew = time.monotonic()
    while reading["warm"] < reading["size"] and time.monotonic() < deadline:
        if stalled_s is not None and time.monotonic() - grew > stalled_s:
            break
        time.sleep(0.05)
        previous, reading = reading, read_pool()
        if reading["warm"] > previous["warm"]:
            grew = time.monotonic()
    return reading


def _keep_working(session: Any, calls: list[SandboxCall], stop: threading.Event) -> None:
    """A session that claims its sandbox and runs code in it until the burst is over (at most 300 runs)."""
    for _ in range(300):
        if stop.is_set():
            return
        calls.append(session.run(WORK))
        time.sleep(0.1)


__all__ = ["sandbox_claim_burst"]
