"""The delivery audit: "completion is not delivery".

After a load run, every acknowledged turn (a receipt the client kept) is looked up in what the
workload stored, read back through its own API. A turn is delivered when it is there exactly
once, at the seq it was acknowledged with, with the same hash, and the session's chain is
unbroken. Any lost or duplicated acknowledged turn fails delivery whatever the latency was.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Protocol

import httpx

from drillbook.errors import DeliveryError
from drillbook.sandbox.chain import verify_chain
from drillbook.sandbox.store import Turn


@dataclass(frozen=True)
class Receipt:
    """What a client holds after a turn was acknowledged."""

    session_id: str
    tenant: str
    seq: int
    hash: str
    idempotency_key: str | None = None
    attempts: int = 1
    acked_at: float = 0.0


def read_receipts(paths: Iterable[Path]) -> list[Receipt]:
    receipts = []
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    receipts.append(Receipt(**json.loads(line)))
    return receipts


class Verifier(Protocol):
    """How the audit reads a workload's sessions back and checks their chains."""

    def read(self, tenant: str, session_id: str) -> list[Turn] | None:
        """The stored turns of a session in order, or None when the session does not exist."""

    def chain_ok(self, session_id: str, turns: list[Turn]) -> bool: ...


class ReferenceVerifier:
    """The reference platform's read-back: GET /v1/sessions/{id} through the gateway."""

    def __init__(self, gateway_url: str, tenant_keys: dict[str, str], timeout: float = 30.0) -> None:
        self._http = httpx.Client(base_url=gateway_url, timeout=timeout)
        self._keys = tenant_keys

    def close(self) -> None:
        self._http.close()

    def read(self, tenant: str, session_id: str) -> list[Turn] | None:
        response = self._http.get(f"/v1/sessions/{session_id}",
                                  headers={"Authorization": f"Bearer {self._keys[tenant]}"})
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise DeliveryError(f"reading session {session_id} back failed: HTTP {response.status_code}")
        return [Turn(**turn) for turn in response.json()["turns"]]

    def chain_ok(self, session_id: str, turns: list[Turn]) -> bool:
        return verify_chain(session_id, turns).ok


class StoredSessionsVerifier:
    """Read-back from sessions already in hand (an export, a dump, a test's own data), chains
    checked the reference platform's way."""

    def __init__(self, sessions: dict[str, list[Turn]]) -> None:
        self.sessions = sessions

    def read(self, tenant: str, session_id: str) -> list[Turn] | None:
        return self.sessions.get(session_id)

    def chain_ok(self, session_id: str, turns: list[Turn]) -> bool:
        return verify_chain(session_id, turns).ok


@dataclass
class SessionAudit:
    session_id: str
    tenant: str
    acknowledged: int
    stored: int
    lost: list[int] = field(default_factory=list)
    duplicated: int = 0
    out_of_order: bool = False
    chain_ok: bool = True


@dataclass
class DeliveryReport:
    """Per-session findings and their totals; ``ok`` only when nothing acknowledged went astray."""

    sessions: list[SessionAudit]

    @property
    def acknowledged(self) -> int:
        return sum(s.acknowledged for s in self.sessions)

    @property
    def lost(self) -> int:
        return sum(len(s.lost) for s in self.sessions)

    @property
    def duplicated(self) -> int:
        return sum(s.duplicated for s in self.sessions)

    @property
    def out_of_order(self) -> int:
        return sum(1 for s in self.sessions if s.out_of_order)

    @property
    def broken_chains(self) -> int:
        return sum(1 for s in self.sessions if not s.chain_ok)

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.duplicated == 0 and self.out_of_order == 0 and self.broken_chains == 0

    def summary(self) -> dict[str, int | bool]:
        return {"sessions": len(self.sessions), "acknowledged": self.acknowledged, "lost": self.lost,
                "duplicated": self.duplicated, "out_of_order": self.out_of_order,
                "broken_chains": self.broken_chains, "delivered": self.ok}


def audit_delivery(receipts: Iterable[Receipt], verifier: Verifier) -> DeliveryReport:
    """Check every receipt against the stored sessions, session by session."""
    by_session: dict[str, list[Receipt]] = {}
    for receipt in receipts:
        by_session.setdefault(receipt.session_id, []).append(receipt)
    audits = []
    for session_id, acks in sorted(by_session.items()):
        stored = verifier.read(acks[0].tenant, session_id) or []
        audit = SessionAudit(session_id, acks[0].tenant, len(acks), len(stored))
        stored_at = {turn.seq: turn for turn in stored}
        audit.lost = sorted(a.seq for a in acks if stored_at.get(a.seq) is None or stored_at[a.seq].hash != a.hash)
        stored_keys = Counter(t.idempotency_key for t in stored if t.idempotency_key is not None)
        acked_keys = Counter(a.idempotency_key for a in acks if a.idempotency_key is not None)
        audit.duplicated = (sum(n - 1 for n in stored_keys.values() if n > 1)
                            + sum(n - 1 for n in acked_keys.values() if n > 1))
        seqs = [turn.seq for turn in stored]
        acked_order = [a.seq for a in sorted(acks, key=lambda a: a.acked_at)]
        audit.out_of_order = seqs != list(range(1, len(seqs) + 1)) or acked_order != sorted(acked_order)
        audit.chain_ok = verifier.chain_ok(session_id, stored)
        audits.append(audit)
    return DeliveryReport(audits)
