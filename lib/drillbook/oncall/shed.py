"""Shed a noisy tenant: lower its limit so the others get inference back, measure before and
after, and keep the undo.

The target offers the limit (drillbook.targets.capabilities.TenantLimits): on the sandbox the
gateway's per-tenant rate limit (requests per second and burst), on kubernetes the tenant
namespace's ResourceQuota (the profile names each tenant's namespace and quota). The change is written to the target's mitigation ledger before it is applied; it stays
in place after the run (it is an incident mitigation, not a drill fault, so `drillbook
rollback` leaves it alone) until the runbook runs again with ``undo=True``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from drillbook.chaos.ledger import FaultLedger
from drillbook.errors import ConfigError, FaultNotLanded
from drillbook.oncall import require_confirmation
from drillbook.oncall.triage import collect
from drillbook.targets import Target
from drillbook.targets.capabilities import TenantLimits


def mitigation_ledger(state_dir: Path) -> FaultLedger:
    return FaultLedger(Path(state_dir) / "mitigations.jsonl")


class Shedding:
    """A tenant's limit lowered and restored on a target that offers tenant limits."""

    def __init__(self, target: Target, state_dir: Path) -> None:
        if not isinstance(target, TenantLimits):
            raise ConfigError(f"target {target.name} offers no tenant limits to lower (the sandbox's gateway "
                              "limits, or tenant namespace quotas on kubernetes)")
        self.target: TenantLimits = target
        self.ledger = mitigation_ledger(state_dir)

    def limits(self) -> dict[str, dict[str, Any]]:
        return self.target.tenant_limits()

    def measure(self, window_s: float) -> dict[str, dict[str, Any]]:
        """Per tenant over window_s: requests, throttled, p95 latency, slot share and queue wait
        (read-only; empty where the target exposes no such metrics)."""
        return collect(self.target, window_s).tenants

    def read_back(self, tenant: str, expected: dict[str, Any], what: str) -> None:
        """A limit must be seen to land: read the tenant's limit back and compare each value set
        (the mitigation stays open in the ledger when it did not take)."""
        seen = self.limits().get(tenant) or {}
        differ = {name: seen.get(name) for name, value in expected.items() if not same_amount(value, seen.get(name))}
        if differ:
            raise FaultNotLanded(f"tenant {tenant}'s limit {what} to {expected}", f"{differ} read back")

    def open_mitigations(self, tenant: str) -> list[Any]:
        return [m for m in self.ledger.open_faults() if m.kind == "tenant-limit" and m.detail.get("tenant") == tenant]

    def shed(self, tenant: str, rps: float, burst: int, dry_run: bool, confirm: str, operator: str,
             incident: str, quota: str = "") -> dict[str, Any]:
        current = self.limits()
        if tenant not in current:
            raise ConfigError(f"no tenant {tenant!r} on target {self.target.name}; tenants: {', '.join(current)}")
        new = self.target.lowered_limit(current[tenant], rps, burst, quota)
        plan = f"change tenant {tenant}'s limit from {current[tenant]} to {new} on target {self.target.name}"
        if dry_run:
            return {"dry_run": True, "changed": False, "plan": plan, "previous": current[tenant]}
        require_confirmation(self.target.name, dry_run, confirm)
        mitigation = self.ledger.record(incident or "no-incident", self.target.name, "tenant-limit",
                                        {"op": "limit", "tenant": tenant, "limit": current[tenant]}, tenant=tenant,
                                        limit=new, operator=operator, incident=incident)
        self.target.set_tenant_limit(tenant, new)
        self.read_back(tenant, new, "lowered")
        return {"dry_run": False, "changed": True, "plan": plan, "previous": current[tenant], "mitigation": mitigation.id,
                "at": time.time(), "undo": f"drillbook run shed-noisy-tenant -p tenant={tenant} -p undo=True "
                                           f"-p dry_run=False -p confirm={self.target.name}"}

    def undo(self, tenant: str, dry_run: bool, confirm: str) -> dict[str, Any]:
        """Put back the limit the oldest open mitigation for this tenant replaced (the original)."""
        open_ones = self.open_mitigations(tenant)
        if not open_ones:
            return {"dry_run": dry_run, "changed": False, "plan": f"nothing to undo for tenant {tenant}"}
        original = open_ones[-1].undo["limit"]
        plan = f"restore tenant {tenant}'s limit to {original}"
        if dry_run:
            return {"dry_run": True, "changed": False, "plan": plan}
        require_confirmation(self.target.name, dry_run, confirm)
        self.target.set_tenant_limit(tenant, original)
        self.read_back(tenant, original, "restored")
        for mitigation in open_ones:
            self.ledger.resolve(mitigation, f"undone: {plan}")
        return {"dry_run": False, "changed": True, "plan": plan, "restored": original, "undid": open_ones[0].id}


def same_amount(expected: Any, seen: Any) -> bool:
    """A limit value read back: the same text, or the same number."""
    if str(expected) == str(seen):
        return True
    try:
        return float(expected) == float(seen)
    except (TypeError, ValueError):
        return False


def _others_wait(figures: dict[str, dict[str, Any]], tenant: str) -> float | None:
    waits = [v["queue_wait_ms"] for t, v in figures.items() if t != tenant and v.get("queue_wait_ms") is not None]
    return sum(waits) / len(waits) if waits else None


def judge(run: Any, shedding: Shedding, tenant: str, before: dict[str, Any], after: dict[str, Any],
          outcome: dict[str, Any], limits_before: dict[str, Any]) -> None:
    """Record the change and the others' queue wait and latency before and after, and check that
    the target now has the limit the run meant it to have."""
    limits_after = shedding.limits()
    run.record("plan", outcome["plan"])
    run.record("dry_run", outcome["dry_run"])
    run.record("limits_before", limits_before)
    run.record("limits_after", limits_after)
    run.record("others_queue_wait_ms_before", _others_wait(before, tenant), "ms")
    run.record("others_queue_wait_ms_after", _others_wait(after, tenant), "ms")
    run.record("tenants_before", before)
    run.record("tenants_after", after)
    if outcome.get("undo"):
        run.record("undo_command", outcome["undo"])
    if not outcome["changed"]:
        run.check("limits unchanged", int(limits_after == limits_before), ">=", 1)
    elif "restored" in outcome:
        run.check("original limit restored", int(limits_after[tenant] == outcome["restored"]), ">=", 1)
    else:
        run.check("new limit in place", int(limits_after[tenant] != limits_before[tenant]), ">=", 1)
