"""The halt button, timed: on one sandbox, over several trials, a `drillbook run cold-start` is
halted from a second process once its first fault is leased.

Per trial, from starting `drillbook halt` (a new process): to its answer (the supervisor undoes
the leased faults before it answers), to the runner's seeing the halt (the moment its watch
stopped the run, in the run's `interrupted` event) and to the runner's exit (rolled back and
sealed). P50 and max over the trials.

Run: python bench/halt.py [--trials 5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path


from drillbook.config import SandboxConfig
from drillbook.measure import percentile
from drillbook.sandbox import launcher


def drillbook(state: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "drillbook", *args], text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "DRILLBOOK_STATE_DIR": str(state)})


def leased(handle: launcher.SandboxHandle) -> bool:
    with handle.control() as control:
        return bool(control.leases())


def trial(handle: launcher.SandboxHandle, results: Path) -> tuple[float, float, float]:
    run = drillbook(handle.state_dir, "run", "cold-start", "-p", "trials=3", "--results", str(results))
    deadline = time.monotonic() + 120
    while not leased(handle):
        if time.monotonic() > deadline:
            raise SystemExit("no fault was leased within 120 s")
        time.sleep(0.05)
    began = time.time()
    halted = drillbook(handle.state_dir, "halt", "--operator", "bench", "--reason", "timing")
    halted.communicate(timeout=60)
    answered = time.time()
    run.communicate(timeout=120)
    exited = time.time()
    (timeline,) = sorted(results.glob("*_cold-start_*"), key=lambda p: p.stat().st_mtime)[-1:]
    seen = next(datetime.fromisoformat(json.loads(line)["at"].replace("Z", "+00:00")).timestamp()
                for line in (timeline / "timeline.jsonl").read_text().splitlines()
                if json.loads(line).get("kind") == "interrupted")  # `at`: when the runner's watch saw the halt
    drillbook(handle.state_dir, "halt", "--lift").communicate(timeout=60)
    return answered - began, seen - began, exited - began


def main(trials: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        handle = launcher.start(SandboxConfig(tokens_per_second=0), Path(folder) / "state")
        try:
            rows = [trial(handle, Path(folder) / "results") for _ in range(trials)]
        finally:
            launcher.stop(handle.state_dir, handle=handle)
    for label, index in (("halt -> answered (faults undone)", 0), ("halt -> the run saw it", 1),
                         ("halt -> runner exited (sealed)", 2)):
        values = [row[index] for row in rows]
        print(f"{label:34} P50 {percentile(values, 0.5):6.2f}s   max {max(values):6.2f}s   ({trials} trials)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    main(parser.parse_args().trials)
