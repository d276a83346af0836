"""The watchdog beside a run, for targets whose platform holds no leases (a commands target: the
team's own scripts). A fault made there is leased to a watchdog process started detached beside
the run (its own session: it outlives the runner, not the machine): the run writes each fault's
lease into the watchdog's folder, renews it with a heartbeat while it lives and releases it once
the fault is undone; when a lease runs out (the runner killed, its process hung without its
heartbeat), the watchdog undoes the fault itself through the profile's own commands, marks it
undone in the target's fault ledger where that is still there, and records the undo. It keeps
every lease it has read in memory, so a deleted folder or ledger does not lose a fault, and it
exits by itself once it has held nothing for a while.

The limit, stated in docs/commands-target.md: it dies with the machine it runs on. A fault on a
target whose runner's machine is gone is undone only by a watchdog that lives where the fault
lives (the sandbox's supervisor; on Kubernetes, one in the cluster).

Run as ``python -m drillbook.watchdog FOLDER PROFILE [STATE_DIR]``; started by WatchdogLeases.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from drillbook import jsonl

LEASES = "leases"  # in the watchdog's folder: one JSON file per leased fault, written by the run
UNDONE = "undone.jsonl"  # what the watchdog undid, with when: fault_undone_by_watchdog events
LOCK = "watchdog.lock"  # held by the live watchdog for its whole life: one per folder
LOG = "watchdog.log"
HALT = "halt.json"  # the target's halt (drillbook.halt), for targets that keep none themselves
TICK_S = 0.25
IDLE_EXIT_S = 10.0  # a watchdog that held nothing for this long exits
RETRY_S = 2.0  # an undo that failed (the target did not answer) is tried again after this ...
GIVE_UP_S = 600.0  # ... until this long after its lease ran out: then it is left to `drillbook rollback`


class LeaseHeartbeat:
    """Renews, every third of the lease, the leases on the faults this process made and has not
    undone, for as long as the process lives: a daemon thread, which dies with it (and then the
    leases run out and whoever holds them undoes the faults). It stops when no fault is held.
    renew(runs) pushes back the leases of those runs; an OSError or ControlApiError from it is a
    platform away for a moment, and the next beat tries again."""

    def __init__(self, renew: Callable[[list[str]], Any], seconds: float,
                 away: tuple[type[BaseException], ...] = (OSError,)) -> None:
        self.renew, self.seconds, self.away = renew, seconds, away
        self.held: dict[str, str] = {}  # fault id -> its run
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def hold(self, fault: str, run: str) -> None:
        with self.lock:
            self.held[fault] = run
            if self.thread is None:
                self.thread = threading.Thread(target=self._beat, name="drillbook-fault-lease-heartbeat", daemon=True)
                self.thread.start()

    def release(self, fault: str) -> None:
        with self.lock:
            self.held.pop(fault, None)

    def _beat(self) -> None:
        while True:
            time.sleep(self.seconds / 3)
            with self.lock:
                runs = sorted(set(self.held.values()))
                if not runs:
                    self.thread = None
                    return
            try:
                self.renew(runs)
            except self.away:
                continue


def watchdog_folder(profile: Any, state_dir: Path | None) -> Path:
    """Where the watchdog of a profile's target keeps its leases, lock and records: beside the
    target's fault ledger."""
    from drillbook.targets import run_paths

    return run_paths(profile, state_dir)[1].parent.parent / "watchdogs" / profile.name


def _write(path: Path, record: dict[str, Any]) -> None:
    """Replace a lease file whole (the watchdog never reads half of one)."""
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(record, sort_keys=True))
    os.chmod(temporary, 0o600)
    os.replace(temporary, path)


class WatchdogLeases:
    """The run's side (FaultLeases for a commands target): each scale or store destruction is
    leased to the watchdog, started if none runs for this folder, and renewed by a heartbeat."""

    def __init__(self, folder: Path, profile_path: Path, ledger: Path, state_dir: Path | None, seconds: float) -> None:
        self.folder, self.profile_path, self.ledger, self.state_dir = folder, profile_path, ledger, state_dir
        self.heartbeat = LeaseHeartbeat(self._renew, seconds)

    def lease(self, fault: Any, undo: dict[str, Any]) -> None:
        (self.folder / LEASES).mkdir(parents=True, exist_ok=True, mode=0o700)
        now = time.time()
        _write(self.folder / LEASES / f"{fault.id}.json", {
            "fault": fault.__dict__ | {"undo": undo}, "seconds": self.heartbeat.seconds, "granted_at": now,
            "expires_at": now + self.heartbeat.seconds, "ledger": str(self.ledger), "released": False})
        ensure_running(self.folder, self.profile_path, self.state_dir)
        self.heartbeat.hold(fault.id, fault.run_id)

    def release(self, fault: Any) -> None:
        self.heartbeat.release(fault.id)
        path = self.folder / LEASES / f"{fault.id}.json"
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            return  # never leased here, or the watchdog has it already in hand
        _write(path, record | {"released": True})

    def _renew(self, runs: list[str]) -> None:
        now = time.time()
        for path in sorted((self.folder / LEASES).glob("*.json")):
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if record.get("fault", {}).get("run_id") in runs and not record.get("released"):
                _write(path, record | {"expires_at": now + record["seconds"]})


def running(folder: Path) -> bool:
    """Whether a watchdog holds this folder's lock now."""
    try:
        with open(folder / LOCK, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return False
    except BlockingIOError:
        return True
    except FileNotFoundError:
        return False


def ensure_running(folder: Path, profile_path: Path, state_dir: Path | None) -> None:
    """Start the folder's watchdog, detached in a session of its own, unless one runs."""
    if running(folder):
        return
    with open(folder / LOG, "ab") as log:
        subprocess.Popen([sys.executable, "-m", "drillbook.watchdog", str(folder), str(profile_path),
                          str(state_dir or "")], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                         start_new_session=True, close_fds=True)


def read_leases(folder: Path) -> list[dict[str, Any]]:
    records = []
    for path in sorted((folder / LEASES).glob("*.json")):
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue  # being replaced right now: read at the next tick
    return records


def due(held: dict[str, dict[str, Any]], now: float) -> list[dict[str, Any]]:
    """The leases whose expiry has passed, oldest grant first (a pure function over what was read)."""
    return sorted((lease for lease in held.values() if lease["expires_at"] <= now), key=lambda lease: lease["granted_at"])


def merge(held: dict[str, dict[str, Any]], records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """What the watchdog holds after reading the lease files: new leases added, renewals taken,
    released ones dropped; a lease whose file is gone is kept (its runner's folder deleted is no
    release), and one the watchdog has in hand already (an undo it tries again) keeps its own
    schedule. A pure function."""
    merged = dict(held)
    for record in records:
        fault = record.get("fault", {}).get("id")
        if not fault:
            continue
        if record.get("released"):
            merged.pop(fault, None)
        elif "first_due" not in merged.get(fault, {}):
            merged[fault] = record
    return merged


def undo_lease(lease: dict[str, Any], profile_path: Path, state_dir: Path | None) -> tuple[str, bool]:
    """Undo one lease's fault through the target, and mark it undone in its ledger when the ledger
    is still there."""
    from drillbook.chaos.actions import undo
    from drillbook.chaos.context import RunContext
    from drillbook.chaos.ledger import Fault, FaultLedger
    from drillbook.profile import load_profile
    from drillbook.targets import target_for

    fault = Fault(**lease["fault"])
    target = target_for(load_profile(str(profile_path)), state_dir)
    ledger = FaultLedger(Path(lease["ledger"]))
    how, restored = undo(RunContext(fault.run_id, Path(lease["ledger"]).parent, ledger, target), fault)
    if restored and ledger.path.exists() and any(f.id == fault.id for f in ledger.open_faults()):
        ledger.resolve(fault, f"undone by the watchdog: {how}")
    return how, restored


def watch(folder: Path, profile_path: Path, state_dir: Path | None) -> int:
    """The watchdog's life: hold the folder's lock, read the lease files every tick, undo what ran
    out, and exit once nothing was held for IDLE_EXIT_S."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    lock = open(folder / LOCK, "a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another watchdog holds this folder
    held: dict[str, dict[str, Any]] = {}
    idle_since = time.monotonic()
    while True:
        held = merge(held, read_leases(folder))
        now = time.time()
        for lease in due(held, now):
            began_at = time.time()
            try:
                how, restored = undo_lease(lease, profile_path, state_dir)
            except Exception as error:  # noqa: BLE001 - the target did not answer: tried again soon
                how, restored = f"undo failed: {type(error).__name__}: {error}"[:500], False
            fault = lease["fault"]
            jsonl.append(folder / UNDONE, {
                "kind": "fault_undone_by_watchdog", "t": time.time(), "began_at": began_at, "run": fault["run_id"],
                "fault": fault["id"],
                "undone": how, "restored": restored, "lease_expired_at": lease["expires_at"]})
            print(f"{datetime.now(timezone.utc).isoformat(timespec='seconds')} {fault['id']} of run "
                  f"{fault['run_id']}: lease ran out; {how}", flush=True)
            first_due = lease.get("first_due", lease["expires_at"])
            if restored or now - first_due > GIVE_UP_S:
                held.pop(fault["id"], None)
                (folder / LEASES / f"{fault['id']}.json").unlink(missing_ok=True)
                if not restored:
                    print(f"gave up on {fault['id']} after {GIVE_UP_S:g} s: left open for `drillbook rollback`",
                          flush=True)
            else:  # tried again shortly
                held[fault["id"]] = lease | {"expires_at": now + RETRY_S, "first_due": first_due}
        for path in (folder / LEASES).glob("*.json"):  # released leases: their files go
            try:
                if json.loads(path.read_text()).get("released"):
                    path.unlink(missing_ok=True)
            except (OSError, ValueError):
                pass
        if held:
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since > IDLE_EXIT_S:
            return 0
        time.sleep(TICK_S)


def halt_state(folder: Path) -> dict[str, Any]:
    """{"halted": false}, or who halted the target, why and when (kept in the watchdog's folder)."""
    try:
        return {"halted": True, **json.loads((folder / HALT).read_text())}
    except (OSError, ValueError):
        return {"halted": False}


def halt(folder: Path, operator: str, reason: str, undo: Callable[[dict[str, Any]], tuple[str, bool]]
         ) -> dict[str, Any]:
    """Halt the target: the halt is written where every run on it looks, then every lease still
    held is undone now (undo(lease)) and released, so the watchdog does not undo it again."""
    now = time.time()
    state = {"operator": operator[:120], "reason": reason[:300], "at": now,
             "at_utc": datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="seconds")}
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    _write(folder / HALT, state)
    undone = []
    for lease in read_leases(folder):
        if lease.get("released"):
            continue
        try:
            how, restored = undo(lease)
        except Exception as error:  # noqa: BLE001 - one failed undo must not stop the others
            how, restored = f"NOT undone: {type(error).__name__}: {error}"[:300], False
        if restored:
            _write(folder / LEASES / f"{lease['fault']['id']}.json", lease | {"released": True})
        undone.append(how)
    return {"halted": True, **state, "undone": undone}


def lift_halt(folder: Path) -> dict[str, Any]:
    was = halt_state(folder)
    (folder / HALT).unlink(missing_ok=True)
    return {"halted": False, "was": was}


def watchdog_events(folder: Path) -> list[dict[str, Any]]:
    """What the watchdog of this folder undid (fault_undone_by_watchdog events)."""
    return list(jsonl.read(folder / UNDONE))


if __name__ == "__main__":
    arguments = sys.argv[1:]
    sys.exit(watch(Path(arguments[0]), Path(arguments[1]),
                   Path(arguments[2]) if len(arguments) > 2 and arguments[2] else None))
