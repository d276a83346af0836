"""Verify and report over many evidence bundles of realistic size: time for 100 versus 1,000.

Each synthetic bundle holds what a runbook run writes (~250 KB): summary, timeline, Locust JSON
and request log, two PNG plots, an executed notebook and its HTML. Bundles are written through
BundleWriter, so manifests, the ledger chain and (with --sign) signatures are real.

Run: python bench/evidence_scale.py [--bundles 1000] [--sign]
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path

from drillbook.evidence import BundleWriter, RunSummary, SloCheck, verify_path
from drillbook.evidence.report import render_report
from drillbook.evidence.signing import new_key

# runbook -> (control, the metric of its first judged figure, the check that judges it)
CONTROLS = {"ha-replica-loss": ("ha", "recovery_time_s", "service recovery time"),
            "noisy-neighbour": ("isolation", "victim_p95_ratio", "victim p95 ratio (burst over own baseline)"),
            "cold-start": ("cold-start", "cold_start_p95_s", "cold-start P95 time to first token"),
            "restore-drill": ("restore", "rto_s", "RTO")}


def write_bundles(results: Path, count: int, key: Path | None, seed: int = 7) -> None:
    rng = random.Random(seed)
    request_log = "".join(f"{1_800_000_000 + i / 50:.6f},turn,{rng.uniform(5, 80):.3f},1,\n" for i in range(2500))
    notebook = '{"cells": [' + ",".join('{"cell_type": "code", "source": "x = 1", "outputs": []}'
                                        for _ in range(400)) + "]}"
    for index in range(count):
        runbook = list(CONTROLS)[index % 4]
        control, metric, check = CONTROLS[runbook]
        value = rng.uniform(0.5, 3.0)
        summary = RunSummary.judge(runbook, control, {metric: value},
                                   [SloCheck(name=check, comparison="<=", threshold=2.5, value=value)])
        with BundleWriter(results, runbook, "sandbox", {"users": 20}, signing_key=key) as bundle:
            bundle.write_json("summary.json", summary.to_json())
            bundle.write_text("load/requests.csv", request_log)
            bundle.write_text("load/locust.json", '{"num_requests": 2500}' + " " * 20_000)
            bundle.write_bytes("plots/latency.png", os.urandom(30_000))
            bundle.write_bytes("plots/errors.png", os.urandom(20_000))
            bundle.write_text("runbook.ipynb", notebook)
            bundle.write_text("runbook.html", "<html>" + "x" * 60_000 + "</html>")
            for step in range(20):
                bundle.event("phase", step=step)


def measure(results: Path) -> tuple[float, float, int]:
    started = time.perf_counter()
    report = verify_path(results)
    verified = time.perf_counter() - started
    assert report.ok, report.errors[:3]
    started = time.perf_counter()
    html = render_report(results)
    reported = time.perf_counter() - started
    return verified, reported, len(html)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundles", type=int, default=1000)
    parser.add_argument("--sign", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="drillbook-evidence-") as tmp:
        key = Path(tmp) / "key.pem" if args.sign else None
        if key:
            new_key(key)
        small, large = Path(tmp) / "small", Path(tmp) / "large"
        started = time.perf_counter()
        write_bundles(small, args.bundles // 10, key)
        write_bundles(large, args.bundles, key)
        written = time.perf_counter() - started
        size = sum(p.stat().st_size for p in large.rglob("*") if p.is_file())
        print(f"wrote {args.bundles // 10} + {args.bundles} bundles ({size / args.bundles / 1024:.0f} KB each) "
              f"in {written:.1f}s{' signed' if key else ''}")
        results = {}
        for label, folder in (("small", small), ("large", large)):
            results[label] = measure(folder)
        (v_small, r_small, _), (v_large, r_large, html_size) = results["small"], results["large"]
        print(f"verify: {args.bundles // 10} bundles {v_small:.2f}s, {args.bundles} bundles {v_large:.2f}s "
              f"(growth x{v_large / v_small:.1f} for x10 bundles; target < 10 s)")
        print(f"report: {args.bundles // 10} bundles {r_small:.2f}s, {args.bundles} bundles {r_large:.2f}s "
              f"(growth x{r_large / r_small:.1f}; target < 10 s; page {html_size / 1024:.0f} KB)")


if __name__ == "__main__":
    main()
