"""Chaos Toolkit actions that drillbook's experiments name. Each acts through the run's target (any
kind: the Target protocol hides which), and writes the fault to the ledger, with how to undo it,
before applying it, so that rollbacks and `drillbook rollback` can always put the target back;
each kind of undo is registered by the `op` it is written with (UNDO, @undoes).

A fault must be seen to land: after the call that makes it, each action reads the target again
(readiness and replica identities after a kill; readiness after a scale down; the shared tier's
queue after an aggressor starts; store health and read-back after a disaster) until the effect
is observed or its bound passes. The readings are kept as measurements; a fault not seen to land
raises FaultNotLanded, and the run is ERROR.
"""

from __future__ import annotations

import time
from typing import Any, Callable, TypeVar

from drillbook.chaos.context import RunContext
from drillbook.chaos.ledger import Fault
from drillbook.errors import FaultNotLanded
from drillbook.measure import Landing, flood_landing, kill_landing, scale_down_landing, store_loss_landing
from drillbook.polling import wait_until
from drillbook.observation import ReplicaObservation, StoreObservation, TierObservation, observe_tier
from drillbook.targets.capabilities import OwnPlatform, ReplicaAddresses, TenantMetrics

LANDING_TIMEOUT_S = 10.0  # how long a fault may take to be seen before the run is ERROR
LANDING_INTERVAL_S = 0.1
R = TypeVar("R", ReplicaObservation, StoreObservation, TierObservation)
SCALE_LANDING_TIMEOUT_S = 120.0  # every replica gone: a pod's termination grace (30 s by default) and its node's slow confirm
FLOOD_LANDING_TIMEOUT_S = 120.0  # an aggressor's pods scheduled, pulled, started and flooding
FLOOD_INTERVAL_S = 0.25  # between readings of the shared tier: enough chunks in each change to judge

__all__ = ["kill_replicas", "scale_service", "start_aggressor", "backup_store", "destroy_store", "restore_store",
           "undo_faults"]


def kill_replicas(service: str, count: int = 1, signal: str = "SIGKILL",
                  configuration: dict[str, Any] | None = None) -> list[str]:
    """Kill `count` replicas of a service with a signal (on kubernetes: delete pods, grace 0 for SIGKILL).

    The platform is expected to replace them; the rollback waits until it has.
    """
    run = RunContext.of(configuration or {})
    read, before, watched = _replica_reader(run.target, service)
    fault = run.ledger.record(run.run_id, run.target.name, "kill", {"op": "await_ready", "service": service},
                              service=service, count=count, signal=signal)
    killed = run.target.kill(service, count, signal)
    done_at = time.time()
    landing, readings = _until_landed(read, lambda seen: kill_landing(before, seen, fault.at))
    run.record_measurement("fault_injected", {"kind": "kill", "at": fault.at, "done_at": done_at,
                                              "service": service, "replicas": killed, "landed": landing.to_json(),
                                              "before": before.to_json(), "watched": watched,
                                              "observations": [o.to_json() for o in readings]})
    if not landing.landed:
        raise FaultNotLanded(f"{signal} sent to {count} {service} replica(s) (answered: {', '.join(killed) or 'none'})",
                             landing.seen, LANDING_TIMEOUT_S)
    return killed


def _replica_reader(target: Any, service: str
                    ) -> tuple[Callable[[], ReplicaObservation], ReplicaObservation, dict[str, str]]:
    """How to read a role's replicas across a kill, the reading before it, and the replicas
    watched at their own addresses (identity -> host:port). Where the target says where its
    replicas serve (ReplicaAddresses) and they answer from here just before the kill, every
    reading also probes those addresses: a platform's API can drop a replica that its node never
    stopped (a force-deleted pod). Where they do not answer from here, the API's word is all."""
    def addresses() -> dict[str, str] | None:
        try:
            return target.replica_addresses(service)
        except Exception:  # noqa: BLE001 - where the replicas serve is unknown: nothing is probed
            return None

    if not isinstance(target, ReplicaAddresses):
        return (lambda: target.observe(service)), target.observe(service), {}
    before = target.observe(service)
    serving = addresses() or {}
    before = before.probed(serving, serving)
    watched = {identity: address for identity, address in serving.items() if identity in (before.answering or ())}
    if not watched:
        return (lambda: target.observe(service)), before, {}

    def read() -> ReplicaObservation:
        seen = target.observe(service)
        held = addresses()
        return seen if held is None else seen.probed(watched, held)

    return read, before, watched


def _until_landed(read: Callable[[], R], judge: Callable[[list[R]], Landing],
                  bound_s: float = LANDING_TIMEOUT_S, interval_s: float = LANDING_INTERVAL_S
                  ) -> tuple[Landing, list[R]]:
    """Take readings until `judge` sees the fault in them, or bound_s passes (its last verdict
    then); returns the verdict and every reading taken."""
    deadline = time.monotonic() + bound_s
    readings: list[R] = []
    while True:
        readings.append(read())
        landing = judge(readings)
        if landing.landed or time.monotonic() >= deadline:
            return landing, readings
        time.sleep(interval_s)


def observe_store(run: RunContext) -> StoreObservation:
    """One reading of the store: its health, and how many sessions this run wrote read back."""
    written = {(r["tenant"], r["session_id"]) for rows in (run.measurement("receipts") or {}).values() for r in rows}
    started = time.time()
    try:
        healthy = bool(run.target.store_healthy())
    except Exception as error:  # noqa: BLE001 - a store that cannot answer is not healthy
        return StoreObservation(started, time.time(), False, error=f"{type(error).__name__}: {error}"[:200])
    read = None
    if healthy and written:
        with run.verifier() as verifier:
            if verifier is not None:
                read = 0
                for tenant, session_id in sorted(written):
                    try:
                        read += 1 if verifier.read(tenant, session_id) else 0
                    except Exception:  # noqa: BLE001 - a session that cannot be read is not there
                        pass
    return StoreObservation(started, time.time(), healthy, read, len(written) if read is not None else None)


def scale_service(service: str, replicas: int, if_present: bool = False,
                  configuration: dict[str, Any] | None = None) -> dict[str, Any]:
    """Scale a service (to zero too); the ledger remembers the previous count for the rollback.
    A scale down returns once it is seen in the target's readings begun after it (no more than
    `replicas` ready, none still stopping); a scale up returns at once (replicas that are ready
    are not yet what they do: start_aggressor sees a flood where it lands).

    if_present: a workload without this tier (no separate inference tier, say) is left alone,
    and the answer says so.
    """
    run = RunContext.of(configuration or {})
    if if_present and not run.target.has(service):
        return {"service": service, "absent": True}
    fault, previous = _scale(run, service, replicas)
    if replicas >= previous:
        return {"service": service, "from": previous, "to": replicas}
    landing, readings = _until_landed(lambda: run.target.observe(service),
                                      lambda seen: scale_down_landing(seen, fault.at, replicas),
                                      SCALE_LANDING_TIMEOUT_S)
    run.append_measurement("scaled", {"service": service, "at": fault.at, "from": previous, "to": replicas,
                                      "landed": landing.to_json(), "observations": [o.to_json() for o in readings]})
    if not landing.landed:
        raise FaultNotLanded(f"{service} scaled from {previous} to {replicas}", landing.seen, SCALE_LANDING_TIMEOUT_S)
    return {"service": service, "from": previous, "to": replicas, "seen": landing.seen}


def _scale(run: RunContext, service: str, replicas: int) -> tuple[Fault, int]:
    """Write the scale to the ledger with the count to go back to, then ask for it."""
    previous = run.target.desired(service)
    fault = run.ledger.record(run.run_id, run.target.name, "scale",
                              {"op": "scale", "service": service, "replicas": previous}, service=service, to=replicas)
    run.target.scale(service, replicas)
    return fault, previous


def start_aggressor(victim_tenant: str, service: str = "aggressor", replicas: int = 1,
                    timeout_s: float = FLOOD_LANDING_TIMEOUT_S,
                    configuration: dict[str, Any] | None = None) -> dict[str, Any]:
    """Scale up a tenant that floods shared inference (the rollback scales it back), and return
    once the flood is seen where the victim would feel it: in the shared tier's per-tenant
    counters (TenantMetrics), read every FLOOD_INTERVAL_S from the call on, the tenants other
    than the victim hold slots and their chunks queue for them (measure.flood_landing). Ready
    aggressor replicas are not that: a flood still starting, or one the tier absorbs, would let
    the victim's window measure an idle tier and pass. Not seen within timeout_s:
    FaultNotLanded, the run is ERROR. The readings are kept (measurement "flood")."""
    run = RunContext.of(configuration or {})
    target = run.target
    if not isinstance(target, TenantMetrics):
        raise FaultNotLanded(f"{service} scaled to {replicas}", f"nothing: target {target.name} offers no "
                             "per-tenant counters of its shared tier (TenantMetrics), so no flood can be seen there")
    fault, previous = _scale(run, service, replicas)
    landing, readings = _until_landed(lambda: observe_tier(target.tenant_metrics),
                                      lambda seen: flood_landing(seen, fault.at, victim_tenant),
                                      float(timeout_s), FLOOD_INTERVAL_S)
    run.record_measurement("flood", {"service": service, "at": fault.at, "from": previous, "to": replicas,
                                     "victim": victim_tenant, "landed": landing.to_json(),
                                     "observations": [o.to_json() for o in readings]})
    if not landing.landed:
        raise FaultNotLanded(f"{service} scaled from {previous} to {replicas} to flood the shared tier",
                             landing.seen, float(timeout_s))
    return {"service": service, "from": previous, "to": replicas, "seen": landing.seen}


def backup_store(configuration: dict[str, Any] | None = None) -> dict[str, Any]:
    """Take a backup of the state store (no fault; the restore drill's starting point)."""
    run = RunContext.of(configuration or {})
    held = observe_store(run)  # what the store held when the backup was taken, read back
    answer = run.target.backup_store()
    run.record_measurement("backup", {"at": time.time(), **answer, "store_before": held.to_json()})
    return answer


def destroy_store(configuration: dict[str, Any] | None = None) -> dict[str, Any]:
    """Destroy the state store, as a disaster would. Undo: restore the latest backup."""
    run = RunContext.of(configuration or {})
    fault = run.ledger.record(run.run_id, run.target.name, "store-destroyed", {"op": "restore_store"})
    run.target.destroy_store()
    landing, readings = _until_landed(lambda: observe_store(run), lambda seen: store_loss_landing(seen, fault.at))
    run.record_measurement("disaster", {"at": fault.at, "landed": landing.to_json(),
                                        "observations": [o.to_json() for o in readings]})
    if not landing.landed:
        raise FaultNotLanded("the store destroy was called", landing.seen, LANDING_TIMEOUT_S)
    return {"destroyed_at": fault.at, "seen": landing.seen}


def restore_store(backup: str = "latest", timeout_s: float = 60.0,
                  configuration: dict[str, Any] | None = None) -> dict[str, Any]:
    """Restore the state store from a backup with the on-call procedure itself (so the drill
    rehearses exactly what on-call runs), then its post-checks, which wait at most timeout_s for
    the store to serve again; resolves this run's store-destroyed faults once the store is seen
    healthy (a restore that answered and restored nothing leaves them to the rollback)."""
    from drillbook.oncall.restore import RestoreProcedure

    run = RunContext.of(configuration or {})
    procedure = RestoreProcedure(run.target)
    restored = procedure.restore(backup, dry_run=False, confirm=run.target.name)
    checked = procedure.postcheck(timeout_s=float(timeout_s))
    if checked.get("healthy"):  # seen serving again; else the rollback still owes the store
        for fault in run.ledger.open_faults(run.run_id):
            if fault.kind == "store-destroyed":
                run.ledger.resolve(fault, "restored by the experiment")
    run.record_measurement("restored", {"at": restored["at"], **restored["answer"], "postcheck": checked})
    return {**restored["answer"], "postcheck": checked}


SETTLE_TIMEOUT_S = 60.0
PLATFORM_STOPPED = "closed: its platform is no longer running, and starts clean"


Undo = Callable[[RunContext, Fault], tuple[str, bool]]
# How each kind of fault is put back, by the `op` its ledger entry names: an action that makes a
# new kind of fault registers its undo here beside it (@undoes), so the rollback, `drillbook
# rollback` and the watchdogs find it without an edit to this dispatch.
UNDO: dict[str, Undo] = {}


def undoes(op: str) -> Callable[[Undo], Undo]:
    """Register the function that undoes faults recorded with {"op": op}."""
    def register(function: Undo) -> Undo:
        UNDO[op] = function
        return function
    return register


def undo(run: RunContext, fault: Fault) -> tuple[str, bool]:
    """Put back what one fault changed, and read the target again: returns what was done and
    whether the original state was seen restored. A fault whose undo this drillbook does not know
    (written by a newer one, or by a scenario package not installed here) is NOT restored: it
    stays open in the ledger, and the answer says so."""
    op = fault.undo.get("op")
    function = UNDO.get(op) if isinstance(op, str) else None
    if function is None:
        return (f"NOT undone: no undo is known for op {op!r} of {fault.kind} (known: {', '.join(sorted(UNDO))}); "
                "it stays open for `drillbook rollback` where it is known", False)
    return function(run, fault)


@undoes("scale")
def _scale_back(run: RunContext, fault: Fault) -> tuple[str, bool]:
    service = fault.undo["service"]
    run.target.scale(service, int(fault.undo["replicas"]))
    settled = wait_until(lambda: run.target.settled(service), SETTLE_TIMEOUT_S)
    return (f"scaled {service} back to {fault.undo['replicas']}"
            + ("" if settled else f" (NOT settled after {SETTLE_TIMEOUT_S:g}s)"), settled)


@undoes("await_ready")
def _await_ready(run: RunContext, fault: Fault) -> tuple[str, bool]:
    service = fault.undo["service"]
    last: list[ReplicaObservation] = []

    def full() -> bool:
        last[:] = [run.target.observe(service)]
        return last[0].full

    if wait_until(full, SETTLE_TIMEOUT_S):
        return f"{service} ready again", True
    seen = last[0] if last else None
    left = (seen.error or f"{seen.ready} of {seen.desired} ready") if seen else "no reading"
    return f"{service} NOT ready after {SETTLE_TIMEOUT_S:g}s (left: {left})", False


@undoes("restore_store")
def _restore_store(run: RunContext, fault: Fault) -> tuple[str, bool]:
    if run.target.store_healthy():
        return "store already healthy", True
    try:
        run.target.restore_store("latest")
        if wait_until(run.target.store_healthy, SETTLE_TIMEOUT_S / 4, 0.2):
            return "store restored from the latest backup", True
        why = "the restore answered but the store is still not healthy"
    except Exception as error:  # noqa: BLE001 - no backup: an empty store beats no store
        why = f"no usable backup ({error})"
    run.target.recreate_store()
    healthy = wait_until(run.target.store_healthy, SETTLE_TIMEOUT_S / 4, 0.2)
    return f"{why}; store re-created EMPTY" + ("" if healthy else " and still NOT healthy"), healthy


def undo_open_faults(run: RunContext, run_id: str | None) -> list[tuple[Fault, str]]:
    """Undo the faults still open (one run's, or with run_id None every run's), newest first;
    each one seen restored is marked undone in the ledger, the others stay open for
    `drillbook rollback` to try again. Returns each fault with what was done."""
    done = []
    faults = run.ledger.open_faults(run_id)
    if faults and isinstance(run.target, OwnPlatform) and not run.target.platform_running():
        return close_on_stopped_platform(run.ledger, faults)  # nothing to wait for: a new platform starts clean
    for fault in faults:
        how, restored = undo(run, fault)
        if restored:
            run.ledger.resolve(fault, how)
        done.append((fault, how))
    return done


def close_on_stopped_platform(ledger: Any, faults: list[Fault]) -> list[tuple[Fault, str]]:
    """Close faults made on a platform drillbook ran that has stopped: there is nothing to undo
    (a platform starts clean), so nothing is asked of it."""
    for fault in faults:
        ledger.resolve(fault, PLATFORM_STOPPED)
    return [(fault, PLATFORM_STOPPED) for fault in faults]


def undo_faults(configuration: dict[str, Any] | None = None) -> list[str]:
    """Rollback: undo every fault this run left open, newest first."""
    run = RunContext.of(configuration or {})
    return [f"{fault.kind}: {how}" for fault, how in undo_open_faults(run, run.run_id)]
