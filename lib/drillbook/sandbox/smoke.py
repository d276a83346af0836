"""A short smoke drill through a running sandbox: sessions on every tenant, a replica killed midway,
then every session read back and its hash chain and acknowledgements checked.

It is what the quick start runs until the game day exists, and it checks delivery, not just 200s.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from drillbook.delivery import DeliveryReport, Receipt, audit_delivery
from drillbook.polling import wait_until
from drillbook.sandbox.verifier import ReferenceVerifier
from drillbook.evidence.summary import RunSummary, SloCheck
from drillbook.sandbox.client import ControlClient, TenantClient
from drillbook.sandbox.launcher import SandboxHandle


@dataclass
class SmokeResult:
    sessions: int = 0
    delivery: DeliveryReport = field(default_factory=lambda: DeliveryReport([]))
    cross_tenant_refused: bool = False
    killed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    replica_recovery_s: float | None = None
    events: list[dict] = field(default_factory=list)

    @property
    def acknowledged(self) -> int:
        return self.delivery.acknowledged

    @property
    def verified(self) -> int:
        """Acknowledged turns found again at their seq with their hash."""
        return self.delivery.acknowledged - self.delivery.lost

    @property
    def passed(self) -> bool:
        return smoke_summary(self).verdict == "PASS" and self.verified == self.acknowledged > 0


def run_smoke(handle: SandboxHandle, sessions: int = 4, turns: int = 5,
              progress: Callable[[str], None] = lambda _: None) -> SmokeResult:
    result = SmokeResult()
    tenants = list(handle.tenant_keys.items())
    clients = {tenant: TenantClient(handle.gateway_url, key) for tenant, key in tenants}
    owners: dict[str, str] = {}
    receipts: list[Receipt] = []
    try:
        for index in range(sessions):
            tenant = tenants[index % len(tenants)][0]
            owners[clients[tenant].create_session()] = tenant
        result.sessions = len(owners)
        progress(f"{result.sessions} sessions opened across {len(tenants)} tenants")
        with handle.control() as control:
            for turn_index in range(turns):
                if turn_index == turns // 2:
                    killed = control.kill("agent", count=1, signal="SIGKILL")["killed"]
                    result.killed.extend(killed)
                    progress(f"killed {', '.join(killed)} with SIGKILL mid-session")
                for session_id, tenant in owners.items():
                    try:
                        ack = clients[tenant].turn(session_id, f"turn {turn_index} of {session_id}")
                    except Exception as error:  # noqa: BLE001 - counted, reported, and fails the smoke
                        result.errors.append(str(error))
                        continue
                    receipts.append(Receipt(session_id, tenant, ack["seq"], ack["hash"], ack["idempotency_key"],
                                            acked_at=time.time()))
            result.replica_recovery_s = replica_recovery(control, result.killed)
            result.events = control.events()
        progress(f"{len(receipts)} turns acknowledged; reading every session back")
        verifier = ReferenceVerifier(handle.gateway_url, handle.tenant_keys)
        try:
            result.delivery = audit_delivery(receipts, verifier)
        finally:
            verifier.close()
        if len(tenants) > 1:
            other_tenant = tenants[1][0]
            foreign_session = next(s for s, t in owners.items() if t != other_tenant)
            response = clients[other_tenant].request("GET", f"/v1/sessions/{foreign_session}")
            result.cross_tenant_refused = response.status_code == 404
        else:
            result.cross_tenant_refused = True
    finally:
        for client in clients.values():
            client.close()
    return result


def replica_recovery(control: ControlClient, killed: list[str], timeout: float = 20.0) -> float | None:
    """Seconds from the first kill to the killed replica being ready again, from the supervisor's log."""
    if not killed:
        return None

    def recovered() -> float | None:
        events = control.events()
        kill = next((e for e in events if e["kind"] == "replica_killed" and e["replica"] == killed[0]), None)
        ready = next((e for e in events if kill and e["kind"] == "replica_ready" and e["replica"] == killed[0]
                      and e["t"] > kill["t"]), None)
        return round(ready["t"] - kill["t"], 6) if kill and ready else None

    return wait_until(recovered, timeout, 0.05)


RECOVERY_SLO_S = 10.0


def smoke_summary(result: SmokeResult) -> RunSummary:
    """The smoke as a judged run of the HA control: delivery, chains, isolation and replica recovery."""
    delivery = result.delivery
    metrics = {"sessions": result.sessions, "acknowledged_turns": delivery.acknowledged,
               "lost_turns": delivery.lost, "duplicated_turns": delivery.duplicated,
               "out_of_order_sessions": delivery.out_of_order, "broken_chains": delivery.broken_chains,
               "client_errors": len(result.errors), "recovery_time_s": result.replica_recovery_s,
               "cross_tenant_refused": result.cross_tenant_refused}
    checks = [
        SloCheck(name="acknowledged turns lost", comparison="<=", threshold=0, value=delivery.lost),
        SloCheck(name="acknowledged turns duplicated", comparison="<=", threshold=0, value=delivery.duplicated),
        SloCheck(name="sessions out of order", comparison="<=", threshold=0, value=delivery.out_of_order),
        SloCheck(name="broken hash chains", comparison="<=", threshold=0, value=delivery.broken_chains),
        SloCheck(name="client errors", comparison="<=", threshold=0, value=len(result.errors)),
        SloCheck(name="cross-tenant read refused", comparison="==", threshold=1, value=int(result.cross_tenant_refused)),
        SloCheck(name="killed replica ready again", comparison="<=", threshold=RECOVERY_SLO_S,
                 value=result.replica_recovery_s, unit="s"),
    ]
    return RunSummary.judge("sandbox-smoke", "ha", metrics, checks,
                            reason="replica recovery is measured from the supervisor's event log (kill to ready)")
