"""Fault leases, held where the fault lives: the sandbox's supervisor keeps a lease on each fault a
run made through its control API, with what puts the fault back. The run renews its leases with a
heartbeat while it lives and releases each one it undid itself; a lease nobody renewed in time
has lost its runner (killed, its machine gone), and the supervisor's watchdog undoes the fault
from the lease alone — no ledger, no run folder, no `drillbook rollback` needed.

The book is plain data with the time passed in, so that expiry can be tested without a clock.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

MAX_LEASE_S = 3600.0
# What a lease may ask the supervisor to do, with the fields each undo carries (a FaultLedger undo).
UNDO_FIELDS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "scale": {"service": str, "replicas": int},
    "restore_store": {},
}


class LeaseError(ValueError):
    """A lease request the supervisor refuses (the control API answers 400)."""


@dataclass
class Lease:
    """One fault's lease: the run that holds it, what it did, what undoes it and when it expires."""

    fault: str
    run: str
    what: str
    undo: dict[str, Any]
    seconds: float
    granted_at: float
    expires_at: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def checked_undo(undo: Any) -> dict[str, Any]:
    """An undo the supervisor knows how to do, with fields of the right types; else LeaseError."""
    if not isinstance(undo, dict) or undo.get("op") not in UNDO_FIELDS:
        raise LeaseError(f"undo must be an object whose op is one of {', '.join(UNDO_FIELDS)}")
    for name, kind in UNDO_FIELDS[undo["op"]].items():
        value = undo.get(name)
        if isinstance(value, bool) or not isinstance(value, kind):
            raise LeaseError(f"undo {undo['op']} needs {name} ({getattr(kind, '__name__', kind)})")
    return dict(undo)


def _text(value: Any, name: str, limit: int = 200) -> str:
    if not isinstance(value, str) or not value or len(value) > limit:
        raise LeaseError(f"{name} must be a string of 1 to {limit} characters")
    return value


class LeaseBook:
    """The leases a supervisor holds, by fault id."""

    def __init__(self) -> None:
        self.leases: dict[str, Lease] = {}

    def grant(self, request: Any, now: float) -> Lease:
        """A lease from a control request {fault, run, what, undo, seconds}; a fault leased again
        keeps its first undo (the state before it) and gets the new expiry."""
        if not isinstance(request, dict):
            raise LeaseError("a lease is a JSON object")
        fault, run = _text(request.get("fault"), "fault"), _text(request.get("run"), "run")
        seconds = request.get("seconds")
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds <= MAX_LEASE_S:
            raise LeaseError(f"seconds must be a number above 0 and at most {MAX_LEASE_S:g}")
        undo = checked_undo(request.get("undo"))
        what = _text(request.get("what", fault), "what", 500)
        held = self.leases.get(fault)
        if held is not None:
            held.expires_at = now + float(seconds)
            return held
        lease = Lease(fault, run, what, undo, float(seconds), now, now + float(seconds))
        self.leases[fault] = lease
        return lease

    def renew(self, runs: Any, now: float) -> int:
        """Push back the expiry of every lease these runs hold; how many were renewed."""
        if not isinstance(runs, list) or not all(isinstance(r, str) for r in runs):
            raise LeaseError("runs must be a list of run ids")
        renewed = 0
        for lease in self.leases.values():
            if lease.run in runs:
                lease.expires_at = now + lease.seconds
                renewed += 1
        return renewed

    def release(self, fault: str) -> Lease | None:
        """The run undid this fault itself: its lease ends."""
        return self.leases.pop(fault, None)

    def expired(self, now: float) -> list[Lease]:
        """The leases whose runner stopped renewing them in time, oldest grant first; taken out of
        the book (the watchdog undoes each once)."""
        due = sorted((lease for lease in self.leases.values() if lease.expires_at <= now),
                     key=lambda lease: lease.granted_at)
        for lease in due:
            del self.leases[lease.fault]
        return due


__all__ = ["MAX_LEASE_S", "Lease", "LeaseBook", "LeaseError", "checked_undo"]
