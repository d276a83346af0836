"""drillbook's chaos runner next to plain `chaos run` on the same experiment, and how fast a
SIGINT puts the sandbox back, measured in one run.

1. Wall time of `drillbook chaos run cold-start` versus `chaos run` on the same experiment with
   the same configuration (rollback strategy always), alternating, median of N each.
   Target: within 10%.
2. SIGINT sent to `drillbook chaos run cold-start` while both tiers are at zero: time until every
   service has its original replicas ready again. Target: under 2 s.

Run: python bench/chaos_overhead.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml

from drillbook.chaos.runner import experiment_path, sandbox_configuration
from drillbook.config import SandboxConfig
from drillbook.sandbox import launcher


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, check=False, capture_output=True, timeout=300)
    return time.perf_counter() - started


def settled(handle, original: dict[str, int]) -> bool:
    with handle.control() as control:
        services = control.status()["services"]
    return all(services[n]["desired"] == want and services[n]["ready"] == want and len(services[n]["replicas"]) == want
               for n, want in original.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="drillbook-bench-") as tmp:
        work = Path(tmp)
        state = work / "sandbox"
        handle = launcher.start(SandboxConfig(tokens_per_second=200), state)
        try:
            env = {**os.environ, "DRILLBOOK_STATE_DIR": str(state)}
            experiment = yaml.safe_load(experiment_path("cold-start").read_text())
            configuration = {**experiment["configuration"], "idle_s": 0.5, **sandbox_configuration(state)}
            plain, ours = [], []
            for round_index in range(args.rounds):
                plain_file = work / f"plain-{round_index}.json"
                experiment["configuration"] = {**configuration, "drillbook_run_id": uuid.uuid4().hex[:12],
                                               "drillbook_run_dir": str(work / f"plain-run-{round_index}")}
                plain_file.write_text(json.dumps(experiment))
                plain.append(timed([sys.executable, "-m", "chaostoolkit", "--no-version-check", "--log-file",
                                    str(work / "chaos.log"), "run", "--rollback-strategy", "always",
                                    "--journal-path", str(work / f"journal-{round_index}.json"), str(plain_file)],
                                   env, work))
                ours.append(timed([sys.executable, "-m", "drillbook", "chaos", "run", "cold-start", "--var",
                                   "idle_s=0.5", "--out", str(work / f"ours-{round_index}")], env, work))
            plain_median, ours_median = statistics.median(plain), statistics.median(ours)
            print(f"cold-start experiment, median of {args.rounds}: chaos run {plain_median:.2f}s, "
                  f"drillbook chaos run {ours_median:.2f}s; ratio {ours_median / plain_median:.3f} "
                  f"(target <= 1.10)")

            with handle.control() as control:
                original = {n: s["desired"] for n, s in control.status()["services"].items()}
            restore_times = []
            for round_index in range(args.rounds):
                runner = subprocess.Popen([sys.executable, "-m", "drillbook", "chaos", "run", "cold-start", "--var",
                                           "idle_s=60", "--out", str(work / f"sigint-{round_index}")], env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    with handle.control() as control:
                        services = control.status()["services"]
                    if services["agent"]["desired"] == 0 and services["model"]["desired"] == 0 \
                            and not services["model"]["replicas"]:
                        break
                    time.sleep(0.05)
                sent = time.perf_counter()
                runner.send_signal(signal.SIGINT)
                while not settled(handle, original) and time.perf_counter() - sent < 60:
                    time.sleep(0.02)
                restore_times.append(time.perf_counter() - sent)
                runner.wait(60)
            print(f"SIGINT to every service ready at its original count: median {statistics.median(restore_times):.2f}s, "
                  f"max {max(restore_times):.2f}s over {args.rounds} (target < 2 s; includes the model's load delay "
                  f"of {handle.runtime.config.effective_model_load_delay_s:g}s)")
        finally:
            launcher.stop(state, handle=handle)


if __name__ == "__main__":
    main()
