"""How often control crosses drillbook's layers along one `drillbook run ha-replica-loss` on the sandbox.

The eight layers a run goes through, by the first part of a module's name under drillbook (LAYERS
below): the CLI, the run's orchestration, the runbook (kernel side: runbook, drills, scenarios,
measure, plots), chaos, targets, the sandbox, evidence and load. Modules outside them (errors,
config, jsonl, timeline, polling, processes, ...) are shared helpers, not layers: a call into one is
not a crossing. A profiler hook in every process of the run (the CLI, the
runbook's kernel and whatever they start with this Python) records each call from a function of
one layer into a function of another: the distinct caller -> callee pairs (what a code read counts)
and the calls in all (loops and polls included). Give `--lib` more than once to compare trees side
by side in one run, e.g. an older commit checked out with `git worktree add`:

    python bench/layer_crossings.py --lib lib --lib /tmp/before/lib

The sandbox is started and stopped outside the count; the run is the runbook's defaults.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HOOK = '''
import atexit, collections, json, os, sys, threading

_folder = os.environ["DRILLBOOK_CROSSINGS_DIR"]
_pairs = collections.Counter()


_LAYERS = LAYERS_HERE


def _layer(frame):
    name = frame.f_globals.get("__name__") or ""
    if not name.startswith("drillbook."):
        return None
    return _LAYERS.get(name.split(".")[1])


def _hook(frame, event, arg):
    if event != "call":
        return
    callee = _layer(frame)
    if callee is None or frame.f_back is None:
        return
    caller = _layer(frame.f_back)
    if caller is not None and caller != callee:
        _pairs[(f"{frame.f_back.f_globals['__name__']}.{frame.f_back.f_code.co_qualname}",
                f"{frame.f_globals['__name__']}.{frame.f_code.co_qualname}", caller, callee)] += 1


sys.setprofile(_hook)
threading.setprofile(_hook)


@atexit.register
def _write():
    sys.setprofile(None)
    with open(os.path.join(_folder, f"{os.getpid()}.json"), "w") as out:
        json.dump({"argv": sys.argv, "pairs": [[*key, count] for key, count in _pairs.items()]}, out)
'''


LAYERS = {
    **dict.fromkeys(["cli", "__main__"], "cli"),
    **dict.fromkeys(["execute", "runspec", "gameday", "project", "parameters", "kernel", "blast", "runlock"], "run"),
    **dict.fromkeys(["runbook", "drills", "scenarios", "measure", "plots", "observation"], "runbook"),
    "chaos": "chaos",
    **dict.fromkeys(["targets", "target_kinds", "profile", "access", "agentapi", "promql"], "targets"),
    "sandbox": "sandbox",
    "evidence": "evidence",
    **dict.fromkeys(["load", "loadkit", "delivery"], "load"),
}


def count(lib: Path, work: Path) -> dict[str, object]:
    """Run HA once with the hook on the path before `lib`; what every process recorded."""
    hook, found, state = work / "hook", work / "found", work / "state"
    for folder in (hook, found):
        folder.mkdir(parents=True)
    (hook / "sitecustomize.py").write_text(HOOK.replace("LAYERS_HERE", repr(LAYERS)))
    env = {**os.environ, "DRILLBOOK_STATE_DIR": str(state), "PYTHONPATH": str(lib.resolve()), "COLUMNS": "200"}
    drillbook = [sys.executable, "-m", "drillbook"]
    subprocess.run([*drillbook, "sandbox", "up"], env=env, check=True, capture_output=True, cwd=work, timeout=300)
    try:
        counted = {**env, "PYTHONPATH": os.pathsep.join([str(hook), str(lib.resolve())]),
                   "DRILLBOOK_CROSSINGS_DIR": str(found)}
        ran = subprocess.run([*drillbook, "run", "ha-replica-loss", "--results", str(work / "results")],
                             env=counted, capture_output=True, text=True, cwd=work, timeout=600)
    finally:
        subprocess.run([*drillbook, "sandbox", "down"], env=env, capture_output=True, cwd=work, timeout=300)
    pairs: collections.Counter[tuple[str, str, str, str]] = collections.Counter()
    processes = 0
    for written in found.glob("*.json"):
        processes += 1
        for caller, callee, caller_layer, callee_layer, calls in json.loads(written.read_text())["pairs"]:
            pairs[(caller, callee, caller_layer, callee_layer)] += calls
    by_layers: collections.Counter[tuple[str, str]] = collections.Counter()
    for (_, _, caller_layer, callee_layer) in pairs:
        by_layers[(caller_layer, callee_layer)] += 1
    return {"pairs": pairs, "exit": ran.returncode, "verdict_line": (ran.stdout.strip().splitlines() or ["(no output)"])[-1],
            "processes": processes, "distinct": len(pairs), "calls": sum(pairs.values()),
            "layers": len({layer for pair in by_layers for layer in pair}), "by_layers": by_layers}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lib", action="append", type=Path, help="a tree's lib folder (default: this checkout's)")
    parser.add_argument("--top", type=int, default=12, help="layer pairs to show per tree")
    parser.add_argument("--show", action="append", default=[], metavar="CALLER->CALLEE",
                        help="also list the function pairs between these two layers, e.g. chaos->runbook")
    args = parser.parse_args()
    libs = args.lib or [Path(__file__).resolve().parents[1] / "lib"]
    results = {}
    with tempfile.TemporaryDirectory(prefix="drillbook-crossings-") as scratch:
        for index, lib in enumerate(libs):
            print(f"counting {lib} ...", flush=True)
            results[lib] = count(lib, Path(scratch) / str(index))
    for lib, found in results.items():
        print(f"\n{lib}: exit {found['exit']} ({found['verdict_line']})")
        print(f"  processes counted {found['processes']}, layers crossed between {found['layers']}")
        print(f"  distinct cross-layer caller->callee pairs {found['distinct']}, cross-layer calls {found['calls']}")
        for (caller, callee), pairs in found["by_layers"].most_common(args.top):
            print(f"    {pairs:4d}  {caller} -> {callee}")
        for shown in args.show:
            caller_layer, callee_layer = shown.split("->")
            for (caller, callee, one, other), calls in sorted(found["pairs"].items()):
                if (one, other) == (caller_layer, callee_layer):
                    print(f"      {calls:5d}x {caller} -> {callee}")
    if len(results) > 1:
        first, *others = results.values()
        for lib, found in zip(list(results)[1:], others):
            print(f"\nratio {libs[0]} / {lib}: distinct pairs {first['distinct'] / max(found['distinct'], 1):.2f}, "
                  f"calls {first['calls'] / max(found['calls'], 1):.2f}")


if __name__ == "__main__":
    main()
