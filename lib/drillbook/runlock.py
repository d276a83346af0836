"""One fault-injecting run per target at a time.

`drillbook run`, `drillbook gameday` and `drillbook chaos run` take the lock of the target they
act on before anything is touched, and hold it until the run is rolled back and sealed; a second
one on the same target is refused with one line naming the holder (exit 2). Two drills that kill
replicas of one platform at once would each measure the other's fault and could both pass.

The lock is keyed on what the target is, not what it is called: a sandbox by its state folder, a
Kubernetes target by its context and namespace, any other kind by its profile file. Its file is
the sandbox's own `run.lock`, or `locks/<digest>.lock` beside the fault ledgers for the others
(drillbook.targets.run_lock_path); `flock` holds it, so a holder that dies (even by SIGKILL) lets go. It locks runs on one
machine: runs from different machines on one cluster are not seen here.

Read-only runbooks (triage, dry runs) take no lock. A process may take a lock it holds already
(a game day's runs).
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drillbook.errors import TargetInUse
from drillbook.targets import run_lock_path, target_identity

if TYPE_CHECKING:
    from drillbook.profile import LoadedProfile

# What a scenario declares (Scenario.needs) that changes the target; status and pods only read it.
CHANGES = frozenset({"kill", "scale", "destroy", "restore", "limit"})
_HELD: dict[str, list[int]] = {}  # lock path -> [fd, depth], for the locks this process holds


def changes_target(runbook: str, parameters: dict[str, Any]) -> bool:
    """Whether a run of this runbook may change its target (and so takes the lock): a declared
    scenario that kills, scales, destroys, restores or limits, unless it is an on-call dry run;
    a runbook of the user's own, which declares nothing, is taken to change it."""
    from drillbook.scenarios import scenario

    declared = scenario(runbook)
    if declared is None:
        return True
    if declared.oncall and parameters.get("dry_run") is not False:
        return False
    return any(action in CHANGES for _, action in declared.needs)


class TargetLock:
    """The run lock of one target, held by `with`; refused (TargetInUse) when another process holds it."""

    def __init__(self, profile: "LoadedProfile", holder: str, state_dir: Path | None = None) -> None:
        self.identity = target_identity(profile, state_dir)
        self.name = profile.name
        self.path = run_lock_path(profile, state_dir)
        self.holder = holder

    def __enter__(self) -> "TargetLock":
        key = str(self.path)
        if key in _HELD:
            _HELD[key][1] += 1
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held = _read_holder(fd)
            os.close(fd)
            raise TargetInUse(f"target {self.name} ({self.identity}) is in use by {held}: one run that changes a "
                              f"target at a time; wait for it to end or stop it (lock {self.path})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"holder": self.holder, "pid": os.getpid(), "since": time.time(),
                                  "identity": self.identity}).encode(), 0)
        _HELD[key] = [fd, 1]
        return self

    def __exit__(self, *exc: object) -> None:
        key = str(self.path)
        held = _HELD[key]
        held[1] -= 1
        if held[1] == 0:
            del _HELD[key]
            fcntl.flock(held[0], fcntl.LOCK_UN)
            os.close(held[0])


def run_lock(profile: "LoadedProfile", runbook: str, parameters: dict[str, Any],
             state_dir: Path | None = None) -> AbstractContextManager[Any]:
    """The lock a run of this runbook holds on its target: none when it only reads it."""
    if not changes_target(runbook, parameters):
        return nullcontext()
    return TargetLock(profile, f"drillbook run {runbook}", state_dir)


def _read_holder(fd: int) -> str:
    """Who holds a lock, as its holder wrote it; what can be said when it wrote nothing readable."""
    try:
        found = json.loads(os.pread(fd, 4096, 0) or b"{}")
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(found["since"])))
        return f"{found['holder']} (pid {int(found['pid'])}, since {since})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another drillbook process"
