"""Chaos Toolkit actions that drillbook's experiments name. Each dispatches on the target
(sandbox or kubernetes) given in the configuration, and writes the fault to the ledger before
applying it, so that rollbacks and `drillbook rollback` can always put the target back.
"""

from __future__ import annotations

import time
from typing import Any

from drillbook.chaos.context import RunContext, wait_until
from drillbook.chaos.ledger import Fault

__all__ = ["kill_replicas", "scale_service", "backup_store", "destroy_store", "restore_store", "undo_faults"]


def kill_replicas(service: str, count: int = 1, signal: str = "SIGKILL",
                  configuration: dict[str, Any] | None = None) -> list[str]:
    """Kill `count` replicas of a service with a signal (on kubernetes: delete pods, grace 0 for SIGKILL).

    The platform is expected to replace them; the rollback waits until it has.
    """
    run = RunContext.of(configuration or {})
    fault = run.ledger.record(run.run_id, run.target.name, "kill", {"op": "await_ready", "service": service},
                              service=service, count=count, signal=signal)
    killed = run.target.kill(service, count, signal)
    run.record_measurement("fault_injected", {"kind": "kill", "at": fault.at, "done_at": time.time(),
                                              "service": service, "replicas": killed})
    return killed


def scale_service(service: str, replicas: int, if_present: bool = False,
                  configuration: dict[str, Any] | None = None) -> dict[str, Any]:
    """Scale a service (to zero too); the ledger remembers the previous count for the rollback.

    if_present: a workload without this tier (no separate inference tier, say) is left alone,
    and the answer says so.
    """
    run = RunContext.of(configuration or {})
    if if_present and not run.target.has(service):
        return {"service": service, "absent": True}
    previous = run.target.desired(service)
    run.ledger.record(run.run_id, run.target.name, "scale", {"op": "scale", "service": service, "replicas": previous},
                      service=service, to=replicas)
    run.target.scale(service, replicas)
    return {"service": service, "from": previous, "to": replicas}


def backup_store(configuration: dict[str, Any] | None = None) -> dict[str, Any]:
    """Take a backup of the state store (no fault; the restore drill's starting point)."""
    run = RunContext.of(configuration or {})
    answer = run.target.backup_store()
    run.record_measurement("backup", {"at": time.time(), **answer})
    return answer


def destroy_store(configuration: dict[str, Any] | None = None) -> dict[str, Any]:
    """Destroy the state store, as a disaster would. Undo: restore the latest backup."""
    run = RunContext.of(configuration or {})
    fault = run.ledger.record(run.run_id, run.target.name, "store-destroyed", {"op": "restore_store"})
    run.target.destroy_store()
    run.record_measurement("disaster", {"at": fault.at})
    return {"destroyed_at": fault.at}


def restore_store(backup: str = "latest", timeout_s: float = 60.0,
                  configuration: dict[str, Any] | None = None) -> dict[str, Any]:
    """Restore the state store from a backup with the on-call procedure itself (so the drill
    rehearses exactly what on-call runs), then its post-checks, which wait at most timeout_s for
    the store to serve again; resolves this run's store-destroyed faults."""
    from drillbook.oncall.restore import RestoreProcedure

    run = RunContext.of(configuration or {})
    procedure = RestoreProcedure(run.target)
    restored = procedure.restore(backup, dry_run=False, confirm=run.target.name)
    for fault in run.ledger.open_faults(run.run_id):
        if fault.kind == "store-destroyed":
            run.ledger.resolve(fault, "restored by the experiment")
    checked = procedure.postcheck(timeout_s=float(timeout_s))
    run.record_measurement("restored", {"at": restored["at"], **restored["answer"], "postcheck": checked})
    return {**restored["answer"], "postcheck": checked}


SETTLE_TIMEOUT_S = 60.0


def undo(run: RunContext, fault: Fault) -> str:
    """Put back what one fault changed; returns what was done."""
    op = fault.undo.get("op")
    if op == "scale":
        service = fault.undo["service"]
        run.target.scale(service, int(fault.undo["replicas"]))
        settled = wait_until(lambda: run.target.settled(service), SETTLE_TIMEOUT_S)
        return f"scaled {service} back to {fault.undo['replicas']}" + ("" if settled else " (NOT settled after 60s)")
    if op == "await_ready":
        service = fault.undo["service"]
        ready = wait_until(lambda: run.target.ready(service) >= run.target.desired(service), SETTLE_TIMEOUT_S)
        return f"{service} {'ready again' if ready else 'NOT ready after 60s'}"
    if op == "restore_store":
        if run.target.store_healthy():
            return "store already healthy"
        try:
            run.target.restore_store("latest")
            return "store restored from the latest backup"
        except Exception as error:  # noqa: BLE001 - no backup: an empty store beats no store
            run.target.recreate_store()
            return f"no usable backup ({error}); store re-created empty"
    return f"nothing to undo for {fault.kind}"


def undo_open_faults(run: RunContext, run_id: str | None) -> list[tuple[Fault, str]]:
    """Undo the faults still open (one run's, or with run_id None every run's), newest first,
    marking each undone in the ledger; returns each fault with what was done."""
    done = []
    for fault in run.ledger.open_faults(run_id):
        how = undo(run, fault)
        run.ledger.resolve(fault, how)
        done.append((fault, how))
    return done


def undo_faults(configuration: dict[str, Any] | None = None) -> list[str]:
    """Rollback: undo every fault this run left open, newest first."""
    run = RunContext.of(configuration or {})
    return [f"{fault.kind}: {how}" for fault, how in undo_open_faults(run, run.run_id)]
