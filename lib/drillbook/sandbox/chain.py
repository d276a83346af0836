"""The reference platform's turn hash chain: how a turn's digest is made and how a chain is checked.

Each turn's hash covers the previous turn's hash, so a lost, reordered, duplicated or altered
acknowledged turn breaks the chain from that point on.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Iterable, Protocol

GENESIS_HASH = "0" * 64


class ChainedTurn(Protocol):
    seq: int
    idempotency_key: str | None
    input: str
    output: str
    prev_hash: str
    hash: str


def turn_hash(prev_hash: str, session_id: str, seq: int, idempotency_key: str | None, text_in: str, text_out: str) -> str:
    """sha256 over the canonical JSON of the previous hash and the turn's content."""
    payload = json.dumps(
        [prev_hash, session_id, seq, idempotency_key, text_in, text_out],
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ChainCheck:
    """The outcome of checking one session's chain: ok, or the first seq where it breaks and why."""

    session_id: str
    turns: int
    ok: bool
    broken_at: int | None = None
    reason: str = ""


def verify_chain(session_id: str, turns: Iterable[ChainedTurn]) -> ChainCheck:
    """Check seq runs 1..n without gaps and every hash links to its predecessor and content."""
    expected_prev = GENESIS_HASH
    count = 0
    for count, turn in enumerate(turns, start=1):
        if turn.seq != count:
            return ChainCheck(session_id, count, False, turn.seq, f"expected seq {count}, found {turn.seq}")
        if turn.prev_hash != expected_prev:
            return ChainCheck(session_id, count, False, turn.seq, "prev_hash does not match the previous turn")
        recomputed = turn_hash(turn.prev_hash, session_id, turn.seq, turn.idempotency_key, turn.input, turn.output)
        if recomputed != turn.hash:
            return ChainCheck(session_id, count, False, turn.seq, "hash does not match the turn's content")
        expected_prev = turn.hash
    return ChainCheck(session_id, count, True)
