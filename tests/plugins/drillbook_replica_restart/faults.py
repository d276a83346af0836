"""A fault drillbook does not ship, brought by this package alone: squeeze a tier to one replica.

What a new fault needs, all in this module: the action (it writes the fault to the run's ledger
with how to undo it before it acts, then reads the target until the squeeze is seen), the undo
registered by the op its ledger entry names (drillbook's rollbacks and `drillbook rollback` find it
there), and the Kubernetes rights the action takes (`drillbook target check` asks for them).
"""

from __future__ import annotations

from typing import Any

from drillbook.chaos.actions import undoes
from drillbook.chaos.context import RunContext
from drillbook.errors import FaultNotLanded
from drillbook.polling import wait_until
from drillbook.targets.kubernetes import register_kubernetes_rights

SQUEEZE_OP = "unsqueeze"
SEEN_WITHIN_S = 30.0
register_kubernetes_rights("squeeze", [("get", "apps", "deployments"), ("patch", "apps", "deployments"),
                                       ("list", "", "pods")])


def squeeze_to_one(service: str, configuration: dict[str, Any] | None = None) -> dict[str, Any]:
    """Scale a tier down to one replica; returns once a reading begun after the call sees one."""
    run = RunContext.of(configuration or {})
    before = run.target.desired(service)
    fault = run.ledger.record(run.run_id, run.target.name, "squeeze", {"op": SQUEEZE_OP, "service": service,
                                                                      "replicas": before}, service=service)
    run.target.scale(service, 1)

    def squeezed() -> bool:  # each reading begins after the call
        seen = run.target.observe(service)
        return not seen.error and seen.desired == 1 and seen.ready <= 1 and not seen.stopping

    if not wait_until(squeezed, SEEN_WITHIN_S, 0.1):
        raise FaultNotLanded(f"{service} scaled to 1 replica (from {before})", "still more than one replica",
                             SEEN_WITHIN_S)
    run.record_measurement("squeezed", {"service": service, "from": before, "at": fault.at})
    return {"service": service, "from": before, "to": 1}


@undoes(SQUEEZE_OP)
def _unsqueeze(run: RunContext, fault: Any) -> tuple[str, bool]:
    service, replicas = fault.undo["service"], int(fault.undo["replicas"])
    run.target.scale(service, replicas)
    settled = wait_until(lambda: run.target.settled(service), 60.0)
    return f"{service} back to {replicas}" + ("" if settled else " (NOT settled after 60s)"), settled
