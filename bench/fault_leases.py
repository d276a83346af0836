"""How long a lost runner's faults outlive it on the sandbox: kill to undo, over several trials.

Each trial starts `drillbook chaos run cold-start` (both tiers scaled to zero, a long idle) with a
short fault lease, SIGKILLs the runner's whole session once both leases are held, deletes its
fault ledger (its machine is gone) and times, from the supervisor's own events, the kill to each
`fault_undone_by_watchdog` and to both tiers ready again. The target is lease + the watchdog's
0.5 s tick; the issue allows lease + 10 s.

Run: python bench/fault_leases.py [--trials 3] [--lease 3]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from drillbook.config import SandboxConfig
from drillbook.sandbox import launcher


def until(condition, timeout_s: float) -> None:  # noqa: ANN001 - any callable
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("not within the time allowed")
        time.sleep(0.05)


def trial(work: Path, lease_s: float) -> tuple[float, float]:
    state = work / "sandbox"
    handle = launcher.start(SandboxConfig(tokens_per_second=0), state)
    try:
        def services() -> dict:
            with handle.control() as control:
                return control.status()["services"]

        env = {**os.environ, "DRILLBOOK_STATE_DIR": str(state), "DRILLBOOK_FAULT_LEASE_S": str(lease_s)}
        runner = subprocess.Popen([sys.executable, "-m", "drillbook", "chaos", "run", "cold-start", "--var",
                                   "idle_s=300", "--out", str(work / "run")], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True)

        def leased() -> bool:
            with handle.control() as control:
                return len(control.leases()) == 2

        until(leased, 120)
        os.killpg(runner.pid, signal.SIGKILL)
        killed = time.time()
        runner.wait(30)
        (state / "faults.jsonl").unlink()
        until(lambda: all(s["ready"] == s["desired"] >= 1 for name, s in services().items() if name != "aggressor"),
              lease_s + 60)
        ready = time.time()
        with handle.control() as control:
            undone = [e["t"] for e in control.events() if e["kind"] == "fault_undone_by_watchdog"]
        return max(undone) - killed, ready - killed
    finally:
        launcher.stop(state, handle=handle)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--lease", type=float, default=3.0, help="DRILLBOOK_FAULT_LEASE_S for the runner")
    args = parser.parse_args()
    undo, ready = [], []
    with tempfile.TemporaryDirectory(prefix="drillbook-leases-") as scratch:
        for index in range(args.trials):
            to_undo, to_ready = trial(Path(scratch) / str(index), args.lease)
            undo.append(to_undo)
            ready.append(to_ready)
            print(f"trial {index + 1}: kill -> last undo {to_undo:.2f} s, kill -> tiers ready {to_ready:.2f} s "
                  f"(lease {args.lease:g} s)", flush=True)
    print(f"median over {args.trials}: kill -> undo {statistics.median(undo):.2f} s "
          f"(ratio to the lease {statistics.median(undo) / args.lease:.2f}), kill -> ready "
          f"{statistics.median(ready):.2f} s; allowed: lease + 10 s = {args.lease + 10:g} s")


if __name__ == "__main__":
    main()
