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

from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Protocol, Sequence, runtime_checkable

import httpx

from drillbook import jsonl
from drillbook.errors import ConfigError, DeliveryError
from drillbook.plugins import VERIFIERS

if TYPE_CHECKING:
    from drillbook.agentapi import ReadBack
    from drillbook.profile import LoadedProfile

VERIFIER_GROUP = VERIFIERS
NOT_VERIFIABLE = "none"


@dataclass(frozen=True)
class StoredTurn:
    """One turn as a workload reports it stored: what it offers of position, digest, idempotency
    key, link to its predecessor and the input it was sent (None: not offered)."""

    seq: int | None = None
    hash: str | None = None
    idempotency_key: str | None = None
    prev_hash: str | None = None
    content: str | None = None


@dataclass(frozen=True)
class Receipt:
    """drillbook's own record of an acknowledged turn: what it sent (``sent``, the input text, and
    its idempotency key), when it was acknowledged (which orders a session's receipts), and the
    position and digest the acknowledgement carried where the API gives them (else None)."""

    session_id: str
    tenant: str
    seq: int | None
    hash: str | None
    idempotency_key: str | None = None
    attempts: int = 1
    acked_at: float = 0.0
    sent: str | None = None


def read_receipts(paths: Iterable[Path]) -> list[Receipt]:
    receipts = []
    for path in paths:
        receipts.extend(Receipt(**record) for record in jsonl.read(path))
    return receipts


class Verifier(Protocol):
    """How the audit reads a workload's sessions back and checks their chains.

    Turns are anything with ``seq``, ``hash`` and ``idempotency_key`` attributes (StoredTurn).
    """

    def read(self, tenant: str, session_id: str) -> Sequence[Any] | None:
        """The stored turns of a session in order, or None when the session does not exist."""

    def chain_ok(self, session_id: str, turns: Sequence[Any]) -> bool: ...


class ReadBackVerifier:
    """Any workload with a read-back: GET the profile's ``delivery.readback_path`` for a session and
    find its stored turns through ``delivery.mapping`` (JMESPath; the defaults are the read-back
    contract's ``{"turns": [{"seq", "hash", "idempotency_key"?, "prev_hash"?}]}``). A chain is
    checked only where the turns carry one (prev_hash links each to its predecessor's hash)."""

    def __init__(self, gateway_url: str, tenant_keys: dict[str, str], profile: "LoadedProfile",
                 timeout: float = 30.0) -> None:
        self._http = httpx.Client(base_url=gateway_url, timeout=timeout)
        self._keys = tenant_keys
        self._api = profile.spec.api
        self._path = profile.spec.delivery.readback_path
        self._mapping = profile.spec.delivery.mapping

    def close(self) -> None:
        self._http.close()

    def answer(self, tenant: str, session_id: str) -> httpx.Response:
        return self._http.get(self._path.replace("{session}", session_id), headers=self._api.auth(self._keys[tenant]))

    def read(self, tenant: str, session_id: str) -> list[StoredTurn] | None:
        response = self.answer(tenant, session_id)
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise DeliveryError(f"reading session {session_id} back failed: HTTP {response.status_code}")
        try:
            return stored_turns(response.json(), self._mapping)
        except ValueError as error:
            raise DeliveryError(f"reading session {session_id} back: {error}") from None

    def chain_ok(self, session_id: str, turns: Sequence[Any]) -> bool:
        return linked(turns)


def linked(turns: Sequence[Any]) -> bool:
    """Each turn that names its predecessor's digest names the right one (no link: nothing to check)."""
    return all(getattr(later, "prev_hash", None) is None or later.prev_hash == getattr(earlier, "hash", None)
               for earlier, later in zip(turns, turns[1:]))


def stored_turns(answer: Any, mapping: "ReadBack") -> list[StoredTurn]:
    """The stored turns a read-back answer carries, through the profile's mapping."""
    from drillbook.agentapi import pick

    found = pick(mapping.turns, answer)
    if not isinstance(found, list):
        raise ValueError(f"delivery.mapping.turns {mapping.turns!r} selects no list of turns in the answer")
    turns = []
    for turn in found:
        seq = pick(mapping.seq, turn)
        try:
            seq = None if seq is None else int(seq)
        except (TypeError, ValueError):
            raise ValueError(f"delivery.mapping.seq {mapping.seq!r} selects {seq!r}, not a number") from None
        turns.append(StoredTurn(seq, *(None if (v := pick(getattr(mapping, name), turn)) is None else str(v)
                                       for name in ("hash", "idempotency_key", "prev_hash", "content"))))
    return turns


def readback_verifier(gateway_url: str, tenant_keys: dict[str, str], profile: "LoadedProfile") -> ReadBackVerifier:
    """Entry point ``readback``: any workload serving the read-back contract."""
    return ReadBackVerifier(gateway_url, tenant_keys, profile)


def available_verifiers() -> list[str]:
    from drillbook.plugins import installed

    return sorted({entry.name for entry in installed(VERIFIER_GROUP)})


def verifier_for(profile: "LoadedProfile", gateway_url: str, tenant_keys: dict[str, str]) -> Verifier | None:
    """The profile's verifier from the entry point group, or None when it declares none."""
    from drillbook.plugins import installed

    name = profile.spec.delivery.verifier
    if name == NOT_VERIFIABLE:
        return None
    found = [entry for entry in installed(VERIFIER_GROUP) if entry.name == name]
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


MATCH_BASES = ("idempotency_key", "content", "seq")  # how receipts find their stored turns, first offered wins


def match_basis(acks: Sequence[Receipt], stored: Sequence[Any]) -> str | None:
    """What a session's receipts and its stored turns both carry: the idempotency key drillbook
    sent, else the input it sent (content), else the position the acknowledgement gave."""
    mine = {"idempotency_key": lambda a: a.idempotency_key, "content": lambda a: a.sent, "seq": lambda a: a.seq}
    for basis in MATCH_BASES:
        if any(mine[basis](a) is not None for a in acks) and any(getattr(t, basis, None) is not None for t in stored):
            return basis
    return None


def audit_session(session_id: str, acks: Sequence[Receipt], stored: Sequence[Any], chain_ok: bool) -> SessionAudit:
    """One session's receipts, in the order they were acknowledged, against its stored turns."""
    acks = sorted(acks, key=lambda a: a.acked_at)
    audit = SessionAudit(session_id, acks[0].tenant, len(acks), len(stored), chain_ok=chain_ok)
    basis = match_basis(acks, stored)
    sent_value = {"idempotency_key": lambda a: a.idempotency_key, "content": lambda a: a.sent,
                  "seq": lambda a: a.seq}.get(basis or "", lambda a: None)
    positions: dict[Any, list[int]] = {}
    for index, turn in enumerate(stored):
        value = getattr(turn, basis, None) if basis else None
        if value is not None:
            positions.setdefault(value, []).append(index)
    matched = []
    for order, ack in enumerate(acks, start=1):
        found = positions.get(sent_value(ack)) if basis else None
        turn = stored[found[0]] if found else None
        if turn is None or (ack.hash is not None and getattr(turn, "hash", None) not in (None, ack.hash)):
            audit.lost.append(ack.seq if ack.seq is not None else order)
        else:
            matched.append(found[0])
    sent = Counter(sent_value(a) for a in acks if sent_value(a) is not None)
    audit.duplicated = (sum(len(positions.get(value, [])) - 1 for value in sent if len(positions.get(value, [])) > 1)
                        + sum(n - 1 for n in Counter(a.idempotency_key for a in acks
                                                     if a.idempotency_key is not None).values() if n > 1))
    seqs = [getattr(turn, "seq", None) for turn in stored]
    acked_seqs = [a.seq for a in acks if a.seq is not None]
    audit.out_of_order = ((all(seq is not None for seq in seqs) and seqs != list(range(1, len(seqs) + 1)))
                          or matched != sorted(matched) or acked_seqs != sorted(acked_seqs))
    return audit


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
        audits.append(audit_session(session_id, acks, stored, verifier.chain_ok(session_id, stored)))
    return DeliveryReport(audits)
