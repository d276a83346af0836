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

This module is the run's side and the records (no target, no chaos: the targets use it); the
watchdog process itself is drillbook.chaos.watchdog, started by WatchdogLeases.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from drillbook import jsonl

LEASES = "leases"  # in the watchdog's folder: one JSON file per leased fault, written by the run
UNDONE = "undone.jsonl"  # what the watchdog undid, with when: fault_undone_by_watchdog events
LOCK = "watchdog.lock"  # held by the live watchdog for its whole life: one per folder
LOG = "watchdog.log"
WATCHDOG_PROCESS = "drillbook.chaos.watchdog"  # the module the watchdog runs as (it undoes through chaos)
HALT = "halt.json"  # the target's halt (drillbook.halt), for targets that keep none themselves
TICK_S = 0.25
IDLE_EXIT_S = 10.0  # a watchdog that held nothing for this long exits
RETRY_S = 2.0  # an undo that failed (the target did not answer) is tried again after this ...
GIVE_UP_S = 600.0  # ... until this long after its lease ran out: then it is left to `drillbook rollback`


def _write(path: Path, record: dict[str, Any]) -> None:
    """Replace a lease file whole (the watchdog never reads half of one)."""
    temporary = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    temporary.write_text(json.dumps(record, sort_keys=True))
    os.chmod(temporary, 0o600)
    os.replace(temporary, path)


class WatchdogLeases:
    """The run's side (FaultLeases for a commands target): each scale or store destruction is
    leased to the watchdog, started if none runs for this folder, and renewed by a heartbeat."""

    def __init__(self, folder: Path, profile_path: Path, ledger: Path, state_dir: Path | None, seconds: float) -> None:
        from drillbook.heartbeat import LeaseHeartbeat

        self.folder, self.profile_path, self.ledger, self.state_dir = folder, profile_path, ledger, state_dir
        self.heartbeat = LeaseHeartbeat(self._renew, seconds)
        self.files = threading.Lock()  # a renewal never writes back a lease released in between

    def lease(self, fault: Any, undo: dict[str, Any]) -> None:
        (self.folder / LEASES).mkdir(parents=True, exist_ok=True, mode=0o700)
        now = time.time()
        with self.files:
            _write(self.folder / LEASES / f"{fault.id}.json", {
                "fault": fault.__dict__ | {"undo": undo}, "seconds": self.heartbeat.seconds, "granted_at": now,
                "expires_at": now + self.heartbeat.seconds, "ledger": str(self.ledger), "released": False})
        ensure_running(self.folder, self.profile_path, self.state_dir)
        self.heartbeat.hold(fault.id, fault.run_id)

    def release(self, fault: Any) -> None:
        self.heartbeat.release(fault.id)
        path = self.folder / LEASES / f"{fault.id}.json"
        with self.files:
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                return  # never leased here, or the watchdog has it already in hand
            _write(path, record | {"released": True})

    def _renew(self, runs: list[str]) -> None:
        now = time.time()
        with self.files:
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
        subprocess.Popen([sys.executable, "-m", WATCHDOG_PROCESS, str(folder), str(profile_path),
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


def halt_state(folder: Path) -> dict[str, Any]:
    """{"halted": false}, or who halted the target, why and when (kept in the watchdog's folder)."""
    try:
        return {"halted": True, **json.loads((folder / HALT).read_text())}
    except (OSError, ValueError):
        return {"halted": False}


def request_halt(folder: Path, operator: str, reason: str) -> dict[str, Any]:
    """Write the halt where every run of the target on this machine looks, and where the watchdog
    finds it: it undoes every lease it holds at once (drillbook.chaos.watchdog)."""
    now = time.time()
    state = {"operator": operator[:120], "reason": reason[:300], "at": now,
             "at_utc": datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="seconds")}
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    _write(folder / HALT, state)
    return {"halted": True, **state}


def held_leases(folder: Path) -> list[dict[str, Any]]:
    """The lease files of faults not yet released nor undone."""
    return [lease for lease in read_leases(folder) if not lease.get("released")]


def lift_halt(folder: Path) -> dict[str, Any]:
    was = halt_state(folder)
    (folder / HALT).unlink(missing_ok=True)
    return {"halted": False, "was": was}


def watchdog_events(folder: Path) -> list[dict[str, Any]]:
    """What the watchdog of this folder undid (fault_undone_by_watchdog events)."""
    return list(jsonl.read(folder / UNDONE))
