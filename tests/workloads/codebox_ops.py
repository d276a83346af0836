"""A team's own operator script for its code sandboxes, as a `workload.sandboxes` profile names it:
here the reference platform's codebox service, reached as any outside tool would (its runtime
file, its internal routes), so that the profile path of the sandbox drills is driven for real.

    codebox_ops.py STATE fleet | kill SANDBOX | alive SANDBOX | kill-service
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx


def main(state: Path, verb: str, *args: str) -> int:
    runtime = json.loads((state / "runtime.json").read_text())
    control = json.loads((state / "sandbox.json").read_text())["control_url"]
    status = httpx.get(f"{control}/v1/status", headers={"Authorization": f"Bearer {runtime['control_token']}"},
                       timeout=10).json()
    if verb == "kill-service":
        httpx.post(f"{control}/v1/services/codebox/kill", json={"count": 1, "signal": "SIGKILL"},
                   headers={"Authorization": f"Bearer {runtime['control_token']}"}, timeout=10).raise_for_status()
        return 0
    (url,) = [r["url"] for r in status["services"]["codebox"]["replicas"] if r["ready"]]
    internal = {"X-Drillbook-Internal-Token": runtime["internal_token"]}
    if verb == "kill":
        httpx.post(f"{url}/internal/v1/sandboxes/{args[0]}/kill", json={}, headers=internal, timeout=10).raise_for_status()
        return 0
    fleet = httpx.get(f"{url}/internal/v1/sandboxes", headers=internal, timeout=10).json()
    if verb == "fleet":
        print(json.dumps({"pool": fleet["pool"], "sandboxes": fleet["sandboxes"]}))
        return 0
    if verb == "alive":  # by its process, not by the service's word
        pids = [s["pid"] for s in fleet["sandboxes"] if s["id"] == args[0] and s["pid"]]
        print("true" if pids and Path(f"/proc/{pids[0]}").exists() else "false")
        return 0
    print(f"unknown verb {verb}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1]), *sys.argv[2:]))
