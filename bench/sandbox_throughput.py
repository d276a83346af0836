"""Sandbox throughput and gateway overhead, measured side by side in one run.

1. Saturation: turns per second through the gateway with zero model delay (SQLite store),
   with C concurrent sessions for a bounded time.
2. Gateway overhead: the same turn at low concurrency, alternating between the gateway and an
   agent replica called directly (with the headers the gateway would add); p50/p95 of each and
   the difference. The direct path still reaches the model through the gateway's inference
   route, so the difference is the cost of the client-facing hop alone.

Run: python bench/sandbox_throughput.py [--seconds 10] [--concurrency 32] [--agents 2]
Every loop is bounded in count and time; traffic goes to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp
from drillbook.config import SandboxConfig
from drillbook.measure import percentile
from drillbook.sandbox import launcher
from drillbook.sandbox.service import HEADER_INTERNAL_TOKEN, HEADER_TENANT

MAX_REQUESTS = 500_000


async def saturate(gateway: str, key: str, seconds: float, concurrency: int) -> tuple[int, int, float]:
    headers = {"Authorization": f"Bearer {key}"}
    ok = failed = 0
    stop_at = time.monotonic() + seconds
    async with aiohttp.ClientSession(base_url=gateway, headers=headers,
                                     connector=aiohttp.TCPConnector(limit=0)) as http:
        async def worker() -> None:
            nonlocal ok, failed
            async with http.post("/v1/sessions") as response:
                session_id = (await response.json())["session_id"]
            while time.monotonic() < stop_at and ok + failed < MAX_REQUESTS:
                async with http.post(f"/v1/sessions/{session_id}/turns", json={"input": "go"},
                                     headers={"Idempotency-Key": uuid.uuid4().hex}) as response:
                    await response.read()
                    if response.status == 200:
                        ok += 1
                    else:
                        failed += 1

        started = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.monotonic() - started
    return ok, failed, elapsed


async def paired_latency(gateway: str, agent: str, key: str, tenant: str, internal_token: str,
                         rounds: int) -> tuple[list[float], list[float]]:
    """Alternate gateway and direct calls on one session so both see the same conditions."""
    via_gateway: list[float] = []
    direct: list[float] = []
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{gateway}/v1/sessions", headers={"Authorization": f"Bearer {key}"}) as response:
            session_id = (await response.json())["session_id"]
        paths = [
            (via_gateway, f"{gateway}/v1/sessions/{session_id}/turns", {"Authorization": f"Bearer {key}"}),
            (direct, f"{agent}/v1/sessions/{session_id}/turns",
             {HEADER_TENANT: tenant, HEADER_INTERNAL_TOKEN: internal_token}),
        ]
        for index in range(rounds):
            for samples, url, headers in (paths if index % 2 == 0 else paths[::-1]):
                started = time.perf_counter()
                async with http.post(url, json={"input": "go"},
                                     headers={**headers, "Idempotency-Key": uuid.uuid4().hex}) as response:
                    await response.read()
                    assert response.status == 200, response.status
                samples.append((time.perf_counter() - started) * 1000)
    return via_gateway, direct


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--agents", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1000)
    args = parser.parse_args()

    config = SandboxConfig(agents=args.agents, tokens_per_second=0, model_load_delay_s=0, gpu_slots=256,
                           rate_limit_rps=1e6, rate_limit_burst=100000)
    with tempfile.TemporaryDirectory(prefix="drillbook-bench-") as state:
        handle = launcher.start(config, Path(state))
        try:
            tenant, key = next(iter(handle.tenant_keys.items()))
            with handle.control() as control:
                agent_url = control.status()["services"]["agent"]["replicas"][0]["url"]
            ok, failed, elapsed = asyncio.run(saturate(handle.gateway_url, key, args.seconds, args.concurrency))
            via_gateway, direct = asyncio.run(paired_latency(handle.gateway_url, agent_url, key, tenant,
                                                             handle.runtime.internal_token, args.rounds))
        finally:
            launcher.stop(Path(state), handle=handle)

    rate = ok / elapsed
    print(f"saturation: {ok} turns in {elapsed:.1f}s = {rate:.0f} turns/s through the gateway "
          f"({failed} failed; {args.agents} agent replicas, {args.concurrency} concurrent sessions, SQLite)")
    print(f"  target >= 500 turns/s: {'met' if rate >= 500 else 'NOT met'} (ratio {rate / 500:.2f})")
    for name, samples in (("via gateway", via_gateway), ("direct to agent", direct)):
        print(f"{name:>16}: p50 {statistics.median(samples):.2f} ms, p95 {percentile(samples, 0.95):.2f} ms "
              f"({len(samples)} turns, one at a time)")
    overhead_p50 = statistics.median(via_gateway) - statistics.median(direct)
    overhead_p95 = percentile(via_gateway, 0.95) - percentile(direct, 0.95)
    print(f"gateway overhead: p50 {overhead_p50:+.2f} ms, p95 {overhead_p95:+.2f} ms; "
          f"ratio p50 {statistics.median(via_gateway) / statistics.median(direct):.2f}x")
    print(f"  target p50 overhead < 2 ms: {'met' if overhead_p50 < 2 else 'NOT met'}")


if __name__ == "__main__":
    main()
