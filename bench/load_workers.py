"""Throughput of Locust's master/worker mode through drillbook.load, measured side by side in one run.

Against a trivial asyncio server on 127.0.0.1 (the one bench/load_overhead.py uses), with the same
locustfile (FastHttpUser, no wait) and user count:

1. drillbook.load with N workers versus drillbook.load with one worker: the ratio N to one.
2. drillbook.load with N workers versus raw Locust with the same master and N workers (no
   drillbook request log or receipts): the ratio to raw.
3. The N-worker run's request logs are merged: one per worker, every request in them.

Rounds alternate, best of each kept. On a machine with two cores, the server, the master and the
workers share them: read the ratios, not the absolute rates.

Run: python bench/load_workers.py [--workers 2] [--users 20] [--seconds 6] [--rounds 2]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from load_overhead import NoSessions, rps_from_json, trivial_server

from drillbook.config import LoadOptions
from drillbook.delivery import audit_delivery
from drillbook.load import run_load
from drillbook.ports import free_port


def raw_workers(locustfile: Path, host: str, users: int, seconds: float, workers: int, out: Path) -> float:
    """Raw Locust: a headless master and `workers` worker processes, nothing of drillbook's."""
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    master = subprocess.Popen([sys.executable, "-m", "locust", "-f", str(locustfile), "--headless", "--host", host,
                               "-u", str(users), "-r", str(users), "-t", f"{seconds:g}s", "--json-file",
                               str(out / "raw"), "--only-summary", "--stop-timeout", "0", "--master",
                               "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
                               "--expect-workers", str(workers)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    started = [subprocess.Popen([sys.executable, "-m", "locust", "-f", str(locustfile), "--worker", "--master-host",
                                 "127.0.0.1", "--master-port", str(port)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL) for _ in range(workers)]
    try:
        master.wait(seconds + 90)
        for worker in started:
            worker.wait(30)
    finally:
        for process in (master, *started):
            if process.poll() is None:
                process.kill()
                process.wait(10)
    return rps_from_json(out / "raw.json", seconds)


def ours(locustfile: Path, host: str, users: int, seconds: float, workers: int, out: Path) -> tuple[float, str]:
    result = run_load(LoadOptions(host=host, users=users, spawn_rate=users, run_time_s=seconds, stop_timeout_s=0,
                                  workers=workers), locustfile, {"t": "k"}, out)
    audit_delivery(result.receipts, NoSessions())  # part of the cost, as in every drill
    logs = [p for p in result.files if p.name.startswith("requests-") and p.stat().st_size]
    merged = (f"{len(result.requests)} logged requests of {result.total_requests} counted by Locust, "
              f"from {len(logs)} workers' request logs")
    return result.total_requests / seconds, merged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="drillbook-bench-") as tmp:
        work = Path(tmp)
        with trivial_server(work) as (host, raw_file, ours_file):
            one, many, raw = [], [], []
            merged = ""
            for index in range(args.rounds):
                one.append(ours(ours_file, host, args.users, args.seconds, 1, work / f"one{index}")[0])
                rate, merged = ours(ours_file, host, args.users, args.seconds, args.workers, work / f"many{index}")
                many.append(rate)
                raw.append(raw_workers(raw_file, host, args.users, args.seconds, args.workers, work / f"raw{index}"))
        best_one, best_many, best_raw = max(one), max(many), max(raw)
        print(f"requests/s, best of {args.rounds}, {args.users} users, {args.seconds:g}s: drillbook 1 worker "
              f"{best_one:.0f}, drillbook {args.workers} workers {best_many:.0f}, raw Locust {args.workers} "
              f"workers {best_raw:.0f}")
        print(f"ratio {args.workers} workers to 1: {best_many / best_one:.2f}; "
              f"drillbook to raw Locust, {args.workers} workers: {best_many / best_raw:.3f} (target >= 0.95)")
        print(f"last {args.workers}-worker run: {merged}")

if __name__ == "__main__":
    main()
