"""How true drillbook's recovery figure is: the figure the HA drill takes from readings (kill,
landing seen, readiness read every 0.25 s, recovered once 3 readings in a row are full, counted
only from readings that began after the landing) against the platform's own clock, over N kills.

1. tinyagent through a commands profile (a status command per reading, as a user's would be);
   its pool logs each replica's death and readiness: the truth. Healthy, and again with the
   stale-status lie (the status answers what it saw up to 2 s ago).
2. The sandbox (the reference platform), against its supervisor's event log (replica_exited,
   replica_ready of the killed replica).

Prints, per case, the error of the moment drillbook saw the replicas back against the moment the
platform itself logged them ready (seen - truth, seconds; the recovery figure is that moment
minus the kill, so its error is the same): min, median, p95, max, how many were early (below
zero) and the largest error as a ratio of the sampling interval. The promise: never early, late by at most about one interval plus a reading's
own duration (a stale status adds its staleness, and is late, never early).

Run: python bench/recovery_fidelity.py [--kills 20]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from drillbook.config import SandboxConfig  # noqa: E402
from drillbook.measure import kill_landing, percentile, recovered_at  # noqa: E402
from drillbook.observation import ReplicaObservation  # noqa: E402
from drillbook.profile import builtin_sandbox, load_profile  # noqa: E402
from drillbook.sandbox import launcher  # noqa: E402
from drillbook.targets import target_for  # noqa: E402

INTERVAL_S = 0.25  # drills.ReadinessWatch's default
SUSTAIN = 3  # drills.SUSTAIN_READINGS


def measured_recovery(target, role: str = "agent", timeout_s: float = 15.0) -> tuple[float, float | None]:
    """One kill measured as the HA drill measures it; returns (kill issued at, seen back at)."""
    readings: list[ReplicaObservation] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            readings.append(target.observe(role))
            stop.wait(INTERVAL_S)

    before = target.observe(role)
    sampler = threading.Thread(target=sample, daemon=True)
    issued = time.time()
    target.kill(role, 1, "SIGKILL")
    sampler.start()
    deadline = time.monotonic() + timeout_s
    recovered = None
    while time.monotonic() < deadline:
        time.sleep(INTERVAL_S)
        landing = kill_landing(before, list(readings), issued)
        recovered = recovered_at(list(readings), landing.at, SUSTAIN)
        if recovered is not None:
            break
    stop.set()
    sampler.join(5)
    return issued, recovered


def settle(target, role: str = "agent") -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not target.observe(role).full:
        time.sleep(0.1)
    time.sleep(0.5)


def tinyagent_truth(data: Path, after: float) -> float | None:
    """When the pool itself saw the replacement ready: its first 'ready' after its 'killed'."""
    import json

    events = [json.loads(line) for line in (data / "truth.jsonl").read_text().splitlines()]
    killed = next((e["t"] for e in events if e["event"] == "killed" and e["t"] >= after), None)
    return next((e["t"] for e in events if killed and e["event"] == "ready" and e["t"] > killed), None)


def start_tinyagent(work: Path, lies: list[str]) -> tuple[subprocess.Popen, Path, Path]:
    from tests.helpers import free_port
    from tests.integration.test_own_workload import TINYAGENT, write_profile

    port, admin_port = free_port(), free_port()
    data = work / f"tiny-{'-'.join(lies) or 'healthy'}"
    process = subprocess.Popen(
        [sys.executable, str(TINYAGENT), "serve", "--port", str(port), "--admin-port", str(admin_port),
         "--data", str(data), "--replicas", "2", *(f"--lie={lie}" for lie in lies)],
        env={**os.environ, "TINYAGENT_KEYS": "red=red-secret-1,blue=blue-secret-2"}, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.environ.setdefault("TINY_RED_KEY", "red-secret-1")
    os.environ.setdefault("TINY_BLUE_KEY", "blue-secret-2")
    profile = write_profile(work / f"{data.name}.yaml", port, f"http://127.0.0.1:{admin_port}", "readback")
    return process, profile, data


def case(name: str, kills: int, target, truth: Callable[[float], float | None]) -> None:
    errors = []
    for _ in range(kills):
        settle(target)
        issued, recovered = measured_recovery(target)
        true = truth(issued)
        if recovered is None or true is None:
            print(f"  {name}: a kill without a figure or a truth (seen back {recovered}, truth {true})")
            continue
        errors.append(recovered - true)
    if not errors:
        print(f"{name}: no kill measured")
        return
    early = sum(1 for e in errors if e < 0)
    print(f"{name}: {len(errors)} of {kills} kills measured; error (seen - truth) s: min {min(errors):+.3f} median "
          f"{statistics.median(errors):+.3f} p95 {percentile(errors, 0.95):+.3f} max {max(errors):+.3f}; "
          f"early {early}; max error / interval {max(errors) / INTERVAL_S:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="drillbook-bench-") as tmp:
        work = Path(tmp)
        os.environ["DRILLBOOK_STATE_DIR"] = str(work / "state")
        for lies in ([], ["stale-status"]):
            process, profile, data = start_tinyagent(work, lies)
            try:
                target = target_for(load_profile(str(profile)))
                case(f"tinyagent (commands){' + ' + ', '.join(lies) if lies else ''}", args.kills, target,
                     lambda issued: tinyagent_truth(data, issued))
            finally:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(15)
        state = work / "sandbox"
        handle = launcher.start(SandboxConfig(tokens_per_second=200), state)
        try:
            target = target_for(builtin_sandbox(), state)

            def supervisor_truth(issued: float) -> float | None:
                events = target.events()
                exited = next((e for e in events if e["kind"] == "replica_exited" and e["t"] >= issued), None)
                ready = next((e["t"] for e in events if exited and e["kind"] == "replica_ready"
                              and e.get("replica") == exited["replica"] and e["t"] > exited["t"]), None)
                return ready

            case("sandbox (supervisor's event log)", args.kills, target, supervisor_truth)
        finally:
            launcher.stop(state, handle=handle)


if __name__ == "__main__":
    main()
