"""Processes drillbook starts die with it, and those a killed drillbook left behind can be found.

A child is started in its own process group (so the group can be stopped whole) with a parent-
death signal (so it goes when the process that started it dies, even by SIGKILL). Long-running
children are written to a small ledger (`<state dir>/processes.jsonl`) with their owner's pid
and both processes' start times, so `drillbook rollback` can stop what a dead owner left, and
never a process that only reuses a pid.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Collection

from drillbook import jsonl
from drillbook.polling import wait_until

PR_SET_PDEATHSIG = 1

# Entries for the evidence of a process, not for a child to stop: a runbook's run and a game
# day's summary, sealed by `drillbook rollback` when their process died (drillbook.execute).
SEALED_KINDS = ("run", "gameday")


def die_with_parent(signum: int = signal.SIGKILL) -> Callable[[], None]:
    """A preexec_fn: the child gets signum when the thread that started it ends."""

    def preexec() -> None:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signum)

    return preexec


def start_ticks(pid: int) -> int | None:
    """When a process started (clock ticks since boot, from /proc), or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":  # a zombie has finished: nothing left to stop
        return None
    return int(fields[19])


def same_process(pid: int, ticks: int | None) -> bool:
    """True while pid is still the process that started at ticks (not a reused pid)."""
    return ticks is not None and start_ticks(pid) == ticks


PROCESSES = "processes.jsonl"  # in the state dir: children a dead run may have left

# How long a recorded child of each kind gets after SIGTERM before SIGKILL: a sandbox's supervisor
# stops its services first (their own grace), Locust stops its users at once.
STOP_GRACE_S = {"sandbox": 30.0}


def stop_group(pgid: int, grace_s: float = 3.0) -> bool:
    """SIGTERM a process group, then SIGKILL what is left after grace_s; True if anything was there."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    def gone() -> bool:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        return False

    if wait_until(gone, grace_s, 0.05):
        return True
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True


@dataclass(frozen=True)
class Started:
    """One child drillbook started and must not outlive: its group, and who owns it."""

    kind: str
    pid: int
    ticks: int | None
    owner_pid: int
    owner_ticks: int | None
    detail: str
    at: float


class ProcessLedger:
    """Append-only JSONL of children started and stopped; open entries of dead owners are leftovers."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def _append(self, record: dict[str, object]) -> None:
        jsonl.append(self.path, record, durable=True)

    def started(self, kind: str, pid: int, detail: str) -> Started:
        owner = os.getpid()
        entry = Started(kind, pid, start_ticks(pid), owner, start_ticks(owner), detail, time.time())
        self._append({"started": asdict(entry)})
        return entry

    def stopped(self, entry: Started, how: str) -> None:
        self._append({"stopped": entry.pid, "ticks": entry.ticks, "kind": entry.kind, "how": how, "at": time.time()})

    def open_entries(self) -> list[Started]:
        """Entries started and not stopped. One process may hold entries of several kinds at once
        (a game day's summary and the run it is in), so an entry is its kind, pid and start time; a
        stopped record that names no kind (an older ledger's) closes every kind of that process."""
        entries: dict[tuple[str, int, int | None], Started] = {}
        for record in jsonl.read(self.path):  # a line cut by a kill is left out: nothing to act on
            if "started" in record:
                entry = Started(**record["started"])
                entries[(entry.kind, entry.pid, entry.ticks)] = entry
            elif "stopped" in record:
                process, kind = (record["stopped"], record.get("ticks")), record.get("kind")
                for key in [key for key in entries if key[1:] == process and kind in (None, key[0])]:
                    del entries[key]
        return list(entries.values())

    def stop_orphans(self, kinds: Collection[str] | None = None, besides: Collection[str] = ()) -> list[str]:
        """Stop every recorded child whose owner is gone (of the given kinds, or of every kind but
        those besides); close entries of children already gone."""
        done = []
        for entry in self.open_entries():
            if entry.kind in SEALED_KINDS or entry.kind in besides or (kinds is not None and entry.kind not in kinds):
                continue  # a run is not stopped but sealed (drillbook.execute.recover_killed_runs)
            if same_process(entry.owner_pid, entry.owner_ticks):
                continue  # its owner still runs it
            if same_process(entry.pid, entry.ticks):
                stop_group(entry.pid, STOP_GRACE_S.get(entry.kind, 3.0))
                self.stopped(entry, "stopped: its owner is gone")
                done.append(f"{entry.kind} pid {entry.pid} ({entry.detail}) stopped: owner {entry.owner_pid} is gone")
            else:
                self.stopped(entry, "already gone")
        return done
