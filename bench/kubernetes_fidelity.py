"""The kubernetes target on the test control plane (tests/k8s), side by side in one run.

1. Recovery after a pod kill: the HA runbook's "replicas recovered" (drillbook samples the
   Deployment's readiness every 0.25 s) against the replacement pod's own times from the API:
   its Ready condition (one-second resolution) and the kubelet's ready-at annotation (µs).
   Target: within the readiness probe interval (1 s).
2. Cold start: P95 time to first token over N trials on kubernetes against the sandbox with the
   same model-load delay; prints the ratio.

Needs the control plane built (tests/k8s/cluster/build.sh). Run from the repository root:
    python bench/kubernetes_fidelity.py [--trials 5] [--delay 0.5]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
FOLDER = Path(tempfile.mkdtemp(prefix="drillbook-bench-k8s-"))
os.environ["KUBECONFIG"] = str(FOLDER / "cluster" / "kubeconfig")  # before the kubernetes package is imported
os.environ["DRILLBOOK_STATE_DIR"] = str(FOLDER / "state")

from kubernetes import client, config  # noqa: E402

from drillbook.config import SandboxConfig  # noqa: E402
from drillbook.execute import execute  # noqa: E402
from drillbook.runbook import recorded  # noqa: E402
from drillbook.sandbox import launcher  # noqa: E402
from tests.k8s.cluster import controlplane  # noqa: E402
from tests.k8s.kubelet import ProcessKubelet  # noqa: E402
from tests.k8s.platform import reference_platform_runner, start_platform  # noqa: E402


def recovery(plane, api, results: Path) -> None:
    platform = start_platform(plane, api, FOLDER, tokens_per_second=200)
    os.environ.update(platform.key_env)
    core = client.CoreV1Api(api)
    before = {p.metadata.name for p in core.list_namespaced_pod(platform.namespace, label_selector="app=agent").items}
    executed = execute("ha-replica-loss", str(platform.profile), {"users": "6", "duration_s": "14.0",
                                                                  "kill_after_s": "3.0", "max_recovery_s": "30.0"},
                       results=results)
    values = recorded(executed.bundle / "runbook.ipynb")["values"]
    measurements = json.loads(next((executed.bundle / "chaos").glob("*/measurements.json")).read_text())
    fault_at = measurements["fault_injected"]["at"]
    replacement = next(p for p in core.list_namespaced_pod(platform.namespace, label_selector="app=agent").items
                       if p.metadata.name not in before)
    condition = next(c for c in replacement.status.conditions if c.type == "Ready").last_transition_time.timestamp()
    annotated = float(replacement.metadata.annotations["drillbook.dev/ready-at"])
    measured = values["replicas_recovered_s"]
    print(f"HA on kubernetes ({executed.verdict}): drillbook replicas recovered {measured:.3f}s after the kill; "
          f"pod Ready condition {condition - fault_at:.3f}s (1 s resolution), kubelet ready-at "
          f"{annotated - fault_at:.3f}s; difference {measured - (annotated - fault_at):+.3f}s "
          f"(target within the 1 s probe interval)")
    print(f"  service recovered {values['recovery_time_s']}s, error rate in the fault window "
          f"{values['error_rate_fault']}, lost {values['lost_turns']} of {values['acknowledged_turns']} turns")


def cold_start(plane, api, results: Path, trials: int, delay: float) -> None:
    platform = start_platform(plane, api, FOLDER, tokens_per_second=200, model_load_delay_s=delay)
    os.environ.update(platform.key_env)
    overrides = {"trials": str(trials), "idle_s": "0.2", "slo_p95_s": "60.0"}
    on_k8s = execute("cold-start", str(platform.profile), overrides, results=results)
    state = FOLDER / "sandbox"
    handle = launcher.start(SandboxConfig(tokens_per_second=200, model_load_delay_s=delay), state)
    try:
        on_sandbox = execute("cold-start", "sandbox", overrides, results=results, sandbox_state=state)
    finally:
        launcher.stop(state, handle=handle)
    k8s = recorded(on_k8s.bundle / "runbook.ipynb")["values"]
    sandbox = recorded(on_sandbox.bundle / "runbook.ipynb")["values"]
    print(f"cold start, model-load delay {delay}s, {trials} trials each: P95 kubernetes {k8s['cold_start_p95_s']:.3f}s "
          f"({on_k8s.verdict}), sandbox {sandbox['cold_start_p95_s']:.3f}s ({on_sandbox.verdict}); "
          f"ratio {k8s['cold_start_p95_s'] / sandbox['cold_start_p95_s']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--delay", type=float, default=0.5)
    args = parser.parse_args()
    if not controlplane.binaries_present():
        sys.exit(f"no control plane in {controlplane.cache_bin()}: run tests/k8s/cluster/build.sh")
    plane = controlplane.start(FOLDER / "cluster")
    api = config.new_client_from_config(str(plane.kubeconfig), context=controlplane.CONTEXT)
    kubelet = ProcessKubelet(api, runners={"drillbook/reference-platform": reference_platform_runner}).start()
    try:
        recovery(plane, api, FOLDER / "results")
        cold_start(plane, api, FOLDER / "results", args.trials, args.delay)
    finally:
        kubelet.stop()
        controlplane.stop(FOLDER / "cluster")
        import shutil

        shutil.rmtree(FOLDER, ignore_errors=True)


if __name__ == "__main__":
    main()
