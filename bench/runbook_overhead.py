"""The toolkit's own cost per runbook, the default game day's wall time, and cold-start fidelity.

1. Per runbook (default parameters, on one sandbox): wall time of `execute` minus the time its
   parameters ask for (load, baseline, burst, idle). Target: under 5 s each.
2. The default game day end to end (it starts and stops its own sandbox). Target: under 6 minutes.
3. Cold-start fidelity: a sandbox whose model-load delay is drawn at random; over N trials, the
   P50 time to first token drillbook measured at the client, minus the P50 of the supervisor's
   logged truth (request sent to the model replica's ready event). Target: within max(2%, 25 ms).

Run: python bench/runbook_overhead.py [--trials 5] [--skip-gameday]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from drillbook.chaos import run as run_experiment
from drillbook.chaos.runner import sandbox_configuration
from drillbook.targets.sandbox import SandboxTarget
from drillbook.config import SandboxConfig
from drillbook.execute import execute
from drillbook.parameters import notebook_parameters, runbook_path
from drillbook.gameday import plan_path, run_gameday
from drillbook.sandbox import launcher


def asked_for(name: str) -> float:
    p = {k: v.default for k, v in notebook_parameters(runbook_path(name)).items()}
    return {"ha-replica-loss": p.get("duration_s", 0) + 2.0,  # load, then the experiment's 2 s traffic
            "noisy-neighbour": p.get("baseline_s", 0) + p.get("burst_s", 0) + 1.0,  # + the 1 s pause
            "cold-start": p.get("trials", 0) * p.get("idle_s", 0),
            "restore-drill": 0.0}[name]


def overhead(work: Path) -> None:
    state = work / "sandbox"
    handle = launcher.start(SandboxConfig(), state)
    try:
        for name in ("ha-replica-loss", "noisy-neighbour", "cold-start", "restore-drill"):
            started = time.perf_counter()
            executed = execute(name, results=work / "results", sandbox_state=state)
            wall = time.perf_counter() - started
            print(f"{name:16s} {executed.verdict:5s} wall {wall:5.1f}s, asked for {asked_for(name):5.1f}s, "
                  f"toolkit overhead {wall - asked_for(name):4.1f}s (target < 5 s)")
    finally:
        launcher.stop(state, handle=handle)


def gameday(work: Path) -> None:
    started = time.perf_counter()
    result = run_gameday(plan_path(None), work / "gd-sandbox", work / "gd-results")
    wall = time.perf_counter() - started
    verdicts = ", ".join(f"{r} {v}" for r, v, _ in result.runs)
    print(f"default game day: {wall:.1f}s end to end (target < 360 s): {verdicts}")


def fidelity(work: Path, trials: int) -> None:
    delay = round(random.uniform(0.5, 3.0), 3)
    state = work / "fidelity"
    handle = launcher.start(SandboxConfig(model_load_delay_s=delay, tokens_per_second=200), state)
    measured, truth = [], []
    try:
        for index in range(trials):
            result = run_experiment("cold-start", sandbox_configuration(state), work / f"cold-{index}",
                                    {"idle_s": 0.2, "max_cold_start_s": 60.0})
            trial = result.measurements["cold_start"][0]
            events = SandboxTarget(state).events()
            ready = next(e["t"] for e in events if e["kind"] == "replica_ready" and e["service"] == "model"
                         and e["t"] >= trial["sent"])
            measured.append(trial["first_token_s"])
            truth.append(ready - trial["sent"])
    finally:
        launcher.stop(state, handle=handle)
    m50, t50 = statistics.median(measured), statistics.median(truth)
    allowed = max(0.02 * t50, 0.025)
    print(f"cold-start fidelity, model-load delay {delay}s drawn at random, {trials} trials: measured P50 "
          f"{m50:.3f}s, supervisor truth P50 {t50:.3f}s, difference {1000 * (m50 - t50):+.1f} ms "
          f"(target within {1000 * allowed:.0f} ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--skip-gameday", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="drillbook-bench-") as tmp:
        work = Path(tmp)
        overhead(work)
        if not args.skip_gameday:
            gameday(work)
        fidelity(work, args.trials)


if __name__ == "__main__":
    main()
