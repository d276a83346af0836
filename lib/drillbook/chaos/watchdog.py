"""The watchdog process beside a run on a commands target (see drillbook.watchdog for the leases
it reads): it undoes through drillbook's own undo (drillbook.chaos.actions) each fault whose lease
ran out, and, when the target is halted, every fault it holds at once.

Run as ``python -m drillbook.chaos.watchdog FOLDER PROFILE [STATE_DIR]``; started by
drillbook.watchdog.ensure_running.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from drillbook import jsonl
from drillbook.watchdog import (GIVE_UP_S, IDLE_EXIT_S, LEASES, LOCK, RETRY_S, TICK_S, UNDONE, due, halt_state,
                                held_leases, merge, read_leases)


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


def undo_and_record(folder: Path, lease: dict[str, Any], profile_path: Path, state_dir: Path | None,
                    kind: str, record: bool = True) -> bool:
    """Undo one lease's fault, write what was done to the records (record), say it in the log, and
    say whether it was restored."""
    began_at = time.time()
    try:
        how, restored = undo_lease(lease, profile_path, state_dir)
    except Exception as error:  # noqa: BLE001 - the target did not answer: tried again soon
        how, restored = f"undo failed: {type(error).__name__}: {error}"[:500], False
    fault = lease["fault"]
    if record:
        try:
            jsonl.append(folder / UNDONE, {
                "kind": kind, "t": time.time(), "began_at": began_at, "run": fault["run_id"], "fault": fault["id"],
                "undone": how, "restored": restored, "lease_expired_at": lease["expires_at"]})
        except OSError as error:  # a full disk: said in the log below, and the undo stands
            how += f" (not recorded: {error.strerror or error})"
    why = "the target was halted" if kind == HALTED else "lease ran out"
    print(f"{datetime.now(timezone.utc).isoformat(timespec='seconds')} {fault['id']} of run {fault['run_id']}: "
          f"{why}; {how}", flush=True)
    return restored


def _still_ours(folder: Path, locked: int) -> bool:
    """Whether the folder's lock file is still the one this watchdog locked."""
    try:
        return os.stat(folder / LOCK).st_ino == locked
    except OSError:
        return False


HALTED = "fault_undone_by_halt"
EXPIRED = "fault_undone_by_watchdog"


def watch(folder: Path, profile_path: Path, state_dir: Path | None) -> int:
    """The watchdog's life: hold the folder's lock, read the lease files every tick, undo what ran
    out (everything, once the target is halted), and exit once nothing was held for IDLE_EXIT_S."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    lock = open(folder / LOCK, "a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another watchdog holds this folder
    locked = os.fstat(lock.fileno()).st_ino
    held: dict[str, dict[str, Any]] = {}
    idle_since = time.monotonic()
    orphaned = False
    while True:
        if not orphaned and not _still_ours(folder, locked):
            # The folder was removed or replaced: what is there now is not this watchdog's to read
            # (another may hold it). What it read before, it still undoes.
            orphaned = True
            print("its folder was removed: finishing the leases it holds, reading no more", flush=True)
        if not orphaned:
            held = merge(held, read_leases(folder))
        now = time.time()
        halted = not orphaned and halt_state(folder).get("halted", False)
        for lease in (sorted(held.values(), key=lambda item: item["granted_at"]) if halted else due(held, now)):
            fault = lease["fault"]
            restored = undo_and_record(folder, lease, profile_path, state_dir, HALTED if halted else EXPIRED,
                                       record=not orphaned)
            first_due = lease.get("first_due", min(lease["expires_at"], now))
            if restored or now - first_due > GIVE_UP_S:
                held.pop(fault["id"], None)
                if not orphaned:
                    (folder / LEASES / f"{fault['id']}.json").unlink(missing_ok=True)
                if not restored:
                    print(f"gave up on {fault['id']} after {GIVE_UP_S:g} s: left open for `drillbook rollback`",
                          flush=True)
            else:  # tried again shortly
                held[fault["id"]] = lease | {"expires_at": now + RETRY_S, "first_due": first_due}
        for path in [] if orphaned else (folder / LEASES).glob("*.json"):  # released leases: their files go
            try:
                if json.loads(path.read_text()).get("released"):
                    path.unlink(missing_ok=True)
            except (OSError, ValueError):
                pass
        if held:
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since > IDLE_EXIT_S and _may_exit(folder, lock, orphaned):
            return 0
        time.sleep(TICK_S)


def _may_exit(folder: Path, lock: Any, orphaned: bool) -> bool:
    """Let go of the folder, unless a lease came in meanwhile: a run that saw this watchdog's lock
    just before it let go started none of its own, so the lease files are read once more after
    the lock is released, and a lease there is taken back up (unless another watchdog has the
    folder by then)."""
    if orphaned:
        return True
    if held_leases(folder):
        return False
    fcntl.flock(lock, fcntl.LOCK_UN)
    if not held_leases(folder):
        return True
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True  # a new watchdog took the folder, and the lease with it
    return False


if __name__ == "__main__":
    arguments = sys.argv[1:]
    sys.exit(watch(Path(arguments[0]), Path(arguments[1]),
                   Path(arguments[2]) if len(arguments) > 2 and arguments[2] else None))
