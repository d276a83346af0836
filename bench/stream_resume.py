"""Throughput of streaming-and-resuming users against plain users, side by side in one run.

One sandbox (the reference platform), the same user count and tokens per turn:

1. agent-sessions: plain turns (one request, the whole reply at once), with idempotency keys;
2. session-continuity with drop-rate 0: every turn streamed as Server-Sent Events, never dropped;
3. session-continuity with drop-rate 0.5: half the streams dropped at a random token and resumed
   from the last event id by a new client.

Acknowledged turns per second for each, and the ratios to plain turns; the resume latency of the
dropping run (from the first reconnect to the next event, what the drill judges). Rounds alternate,
best of each kept. On a machine with two cores Locust, the gateway, the agents and the model server
share them: read the ratios, not the absolute rates.

As the drill runs (tokens at 200/s, 0.2 s think time) the rates are the model's and the users'
pace; with --rate 0 --think 0 they are what the machine can push through each kind of client.

Run: python bench/stream_resume.py [--users 8] [--seconds 8] [--rounds 2] [--tokens 64] [--rate 200] [--think 0.2]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from drillbook import jsonl
from drillbook.config import LoadOptions, SandboxConfig
from drillbook.load import locustfile_for, profile_env, run_load
from drillbook.measure import percentile
from drillbook.sandbox import launcher
from drillbook.scenarios.session_continuity.judge import resume_latencies
from drillbook.streamclient import ACK, TurnRecord


def acknowledged_per_s(out: Path, seconds: float, streamed: bool) -> tuple[float, list[float]]:
    """Turns acknowledged per second, and (streamed) every resume latency in seconds."""
    if not streamed:
        return sum(1 for path in out.glob("receipts-*.jsonl") for _ in jsonl.read(path)) / seconds, []
    records = [TurnRecord.from_json(line) for path in out.glob("streams-*.jsonl") for line in jsonl.read(path)]
    acked = sum(1 for record in records if (ending := record.ending()) is not None and ending.kind == ACK)
    return acked / seconds, [latency for record in records for latency in resume_latencies(record)]


def one(handle, profile: str, settings: dict[str, str], users: int, seconds: float, out: Path) -> tuple[float, list[float]]:
    run_load(LoadOptions(host=handle.gateway_url, users=users, spawn_rate=users, run_time_s=seconds, stop_timeout_s=5,
                         env=profile_env(settings, seconds)), locustfile_for(profile), handle.tenant_keys, out)
    return acknowledged_per_s(out, seconds, profile == "session-continuity")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rate", type=float, default=200.0, help="the model's tokens per second (0: at once)")
    parser.add_argument("--think", type=float, default=0.2, help="think time between turns (0: none)")
    args = parser.parse_args()
    common = {"think-time": str(args.think), "max-tokens": str(args.tokens)}
    kinds = {"plain turns": ("agent-sessions", common),
             "streamed, never dropped": ("session-continuity", {**common, "drop-rate": "0"}),
             "streamed, half dropped and resumed": ("session-continuity", {**common, "drop-rate": "0.5"})}
    best = {name: 0.0 for name in kinds}
    latencies: list[float] = []
    with tempfile.TemporaryDirectory(prefix="drillbook-streams-") as scratch:
        handle = launcher.start(SandboxConfig(tokens_per_second=args.rate), Path(scratch) / "sandbox")
        try:
            for round_ in range(args.rounds):
                for index, (name, (profile, settings)) in enumerate(kinds.items()):
                    rate, resumed = one(handle, profile, settings, args.users, args.seconds,
                                        Path(scratch) / f"{round_}-{index}")
                    best[name] = max(best[name], rate)
                    latencies.extend(resumed)
                    print(f"round {round_ + 1} {name}: {rate:.1f} turns/s", flush=True)
        finally:
            launcher.stop(Path(scratch) / "sandbox", handle=handle)
    plain = best["plain turns"]
    print(f"\n{args.users} users, {args.tokens} tokens a turn at {args.rate:g} tokens/s, think {args.think:g}s, "
          f"best of {args.rounds} rounds:")
    for name, rate in best.items():
        print(f"  {name:38s} {rate:7.1f} turns/s   ratio to plain {rate / plain if plain else float('nan'):.2f}")
    if latencies:
        print(f"  resume latency over {len(latencies)} resumes: P50 {percentile(latencies, 0.5) * 1000:.1f} ms, "
              f"P95 {percentile(latencies, 0.95) * 1000:.1f} ms, P99 {percentile(latencies, 0.99) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
