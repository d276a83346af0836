"""The fault ledger: every fault is written down (and fsynced) before it is applied.

Rollbacks, the runner's last-resort cleanup and `drillbook rollback` all read it to undo what
is still in place, newest first. It is append-only JSONL; a fault is open until a line marks it
undone. Undoing twice is harmless: an undone fault is not undone again.

On a target whose platform holds fault leases (targets.capabilities.FaultLeases: the sandbox's
supervisor), a fault written here is leased there before it is applied, and released when it is
marked undone: the ledger lives with the runner, the lease where the fault lives.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drillbook import jsonl


@dataclass(frozen=True)
class Fault:
    """One injected fault and how to put the target back."""

    id: str
    run_id: str
    target: str
    kind: str
    undo: dict[str, Any]
    detail: dict[str, Any] = field(default_factory=dict)
    at: float = 0.0


class FaultLedger:
    def __init__(self, path: Path, leases: Any = None) -> None:
        """leases: the target's FaultLeases, where it offers them."""
        self.path = Path(path)
        self.leases = leases

    def _append(self, record: dict[str, Any]) -> None:
        jsonl.append(self.path, record, durable=True)

    def record(self, run_id: str, target: str, kind: str, undo: dict[str, Any], **detail: Any) -> Fault:
        fault = Fault(uuid.uuid4().hex[:12], run_id, target, kind, undo, detail, time.time())
        self._append({"fault": fault.__dict__})
        if self.leases is not None:
            self.leases.lease_fault(fault)
        return fault

    def resolve(self, fault: Fault, how: str) -> None:
        self._append({"undone": fault.id, "how": how, "at": time.time()})
        if self.leases is not None:
            self.leases.release_fault(fault)

    def open_faults(self, run_id: str | None = None) -> list[Fault]:
        """Faults not yet undone, newest first (optionally only one run's)."""
        faults: dict[str, Fault] = {}
        for record in jsonl.read(self.path):
            if "fault" in record:
                fault = Fault(**record["fault"])
                faults[fault.id] = fault
            elif "undone" in record:
                faults.pop(record["undone"], None)
        chosen = [f for f in faults.values() if run_id is None or f.run_id == run_id]
        return sorted(chosen, key=lambda f: f.at, reverse=True)
