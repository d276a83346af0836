"""The delivery audit: "completion is not delivery".

After a load run, every acknowledged turn (a receipt the client kept) is looked up in what the
workload stored, read back through its own API. A turn is delivered when it is there exactly
once, at the seq it was acknowledged with, with the same hash, and the session's chain is
unbroken. Any lost or duplicated acknowledged turn fails delivery whatever the latency was.

How a workload is read back is a verifier, found by name in the ``drillbook.verifiers`` entry
point group (the contract: docs/delivery-contract.md). drillbook ships ``reference`` (the
reference platform, hash chain recomputed: `drillbook.sandbox.verifier`) and ``readback`` (any workload serving the read-back
contract). A workload with neither is "not verifiable": the audit says so and its delivery
checks cannot pass.
"""

from __future__ import annotations

import json
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Protocol, Sequence, runtime_checkable

import httpx

from drillbook.errors import ConfigError, DeliveryError

if TYPE_CHECKING:
    from drillbook.profile import LoadedProfile

VERIFIER_GROUP = "drillbook.verifiers"
NOT_VERIFIABLE = "none"


@dataclass(frozen=True)
class StoredTurn:
    """One turn as a workload reports it stored: position, digest, and what else it offers."""

    seq: int
    hash: str
    idempotency_key: str | None = None
    prev_hash: str | None = None


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
    """How the audit reads a workload's sessions back and checks their chains.

    Turns are anything with ``seq``, ``hash`` and ``idempotency_key`` attributes (StoredTurn).
    """

    def read(self, tenant: str, session_id: str) -> Sequence[Any] | None:
        """The stored turns of a session in order, or None when the session does not exist."""

    def chain_ok(self, session_id: str, turns: Sequence[Any]) -> bool: ...


class ReadBackVerifier:
    """Any workload that serves the read-back contract: GET the profile's readback path for a
    session, answered with ``{"turns": [{"seq", "hash", "idempotency_key"?, "prev_hash"?}]}``
    in order. Chains are checked where turns carry prev_hash (each links to its predecessor)."""

    def __init__(self, gateway_url: str, tenant_keys: dict[str, str], profile: "LoadedProfile",
                 timeout: float = 30.0) -> None:
        self._http = httpx.Client(base_url=gateway_url, timeout=timeout)
        self._keys = tenant_keys
        self._api = profile.spec.api
        self._path = profile.spec.delivery.readback_path

    def close(self) -> None:
        self._http.close()

    def read(self, tenant: str, session_id: str) -> list[StoredTurn] | None:
        response = self._http.get(self._path.replace("{session}", session_id), headers=self._api.auth(self._keys[tenant]))
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise DeliveryError(f"reading session {session_id} back failed: HTTP {response.status_code}")
        try:
            return [StoredTurn(int(t["seq"]), str(t["hash"]), t.get("idempotency_key"), t.get("prev_hash"))
                    for t in response.json()["turns"]]
        except (ValueError, KeyError, TypeError):
            raise DeliveryError(f"reading session {session_id} back: the answer does not follow the read-back "
                                "contract (turns with seq and hash)") from None

    def chain_ok(self, session_id: str, turns: Sequence[Any]) -> bool:
        return all(later.prev_hash is None or later.prev_hash == earlier.hash
                   for earlier, later in zip(turns, turns[1:]))


def readback_verifier(gateway_url: str, tenant_keys: dict[str, str], profile: "LoadedProfile") -> ReadBackVerifier:
    """Entry point ``readback``: any workload serving the read-back contract."""
    return ReadBackVerifier(gateway_url, tenant_keys, profile)


def available_verifiers() -> list[str]:
    from importlib.metadata import entry_points

    return sorted({entry.name for entry in entry_points(group=VERIFIER_GROUP)})


def verifier_for(profile: "LoadedProfile", gateway_url: str, tenant_keys: dict[str, str]) -> Verifier | None:
    """The profile's verifier from the entry point group, or None when it declares none."""
    from importlib.metadata import entry_points

    name = profile.spec.delivery.verifier
    if name == NOT_VERIFIABLE:
        return None
    found = [entry for entry in entry_points(group=VERIFIER_GROUP) if entry.name == name]
    if not found:
        raise ConfigError(f"{profile.path.name}: invalid delivery.verifier: no {VERIFIER_GROUP} entry point named "
                          f"{name!r}; installed: {', '.join(available_verifiers()) or 'none'}")
    try:
        factory = found[0].load()
    except Exception as error:  # noqa: BLE001 - a broken plug-in is the user's to fix: say which
        raise ConfigError(f"delivery verifier {name!r} ({found[0].value}) cannot be loaded: {error}") from None
    return factory(gateway_url, tenant_keys, profile)


@runtime_checkable
class Closing(Protocol):
    """A verifier holding connections (an HTTP client, a database) that it lets go of on close()."""

    def close(self) -> None: ...


@contextmanager
def open_verifier(profile: "LoadedProfile", gateway_url: str, tenant_keys: dict[str, str]) -> Iterator[Verifier | None]:
    """The profile's verifier for the length of a with block (None when it declares none), closed
    after it where it offers close() (the contract makes close optional)."""
    verifier = verifier_for(profile, gateway_url, tenant_keys)
    try:
        yield verifier
    finally:
        if isinstance(verifier, Closing):
            verifier.close()


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
    """Per-session findings and their totals; ``ok`` only when nothing acknowledged went astray.

    When the workload could not be read back (``verifiable`` False) every finding is None and
    ``ok`` is False: unverified delivery is never reported as delivered.
    """

    sessions: list[SessionAudit]
    verifiable: bool = True
    receipts: int = 0

    @property
    def acknowledged(self) -> int:
        return sum(s.acknowledged for s in self.sessions) if self.verifiable else self.receipts

    @property
    def lost(self) -> int | None:
        return sum(len(s.lost) for s in self.sessions) if self.verifiable else None

    @property
    def duplicated(self) -> int | None:
        return sum(s.duplicated for s in self.sessions) if self.verifiable else None

    @property
    def out_of_order(self) -> int | None:
        return sum(1 for s in self.sessions if s.out_of_order) if self.verifiable else None

    @property
    def broken_chains(self) -> int | None:
        return sum(1 for s in self.sessions if not s.chain_ok) if self.verifiable else None

    @property
    def misordered(self) -> int | None:
        """Duplicated turns, out-of-order sessions and broken chains together (None: not verifiable)."""
        if not self.verifiable:
            return None
        return int(self.duplicated or 0) + int(self.out_of_order or 0) + int(self.broken_chains or 0)

    @property
    def ok(self) -> bool:
        return self.verifiable and self.lost == 0 and self.misordered == 0

    def summary(self) -> dict[str, int | bool | None]:
        return {"verifiable": self.verifiable, "sessions": len(self.sessions), "acknowledged": self.acknowledged,
                "lost": self.lost, "duplicated": self.duplicated, "out_of_order": self.out_of_order,
                "broken_chains": self.broken_chains, "delivered": self.ok}


def audit_delivery(receipts: Iterable[Receipt], verifier: Verifier | None) -> DeliveryReport:
    """Check every receipt against the stored sessions, session by session (None: not verifiable)."""
    by_session: dict[str, list[Receipt]] = {}
    for receipt in receipts:
        by_session.setdefault(receipt.session_id, []).append(receipt)
    if verifier is None:
        return DeliveryReport([], verifiable=False, receipts=sum(len(acks) for acks in by_session.values()))
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
