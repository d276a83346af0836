"""The delivery audit's rules on hand-built sessions whose answer is known."""

from __future__ import annotations

from dataclasses import replace

import pytest

from drillbook.delivery import Receipt, StoredTurn, audit_delivery, linked
from drillbook.load import histogram_percentile
from drillbook.sandbox.chain import GENESIS_HASH, turn_hash
from drillbook.sandbox.store import Turn
from drillbook.sandbox.verifier import StoredSessionsVerifier


def session(session_id: str, keys: list[str]) -> list[Turn]:
    turns, prev = [], GENESIS_HASH
    for seq, key in enumerate(keys, start=1):
        digest = turn_hash(prev, session_id, seq, key, "in", "out")
        turns.append(Turn(session_id, seq, key, "in", "out", prev, digest, "t"))
        prev = digest
    return turns


def receipts_for(turns: list[Turn]) -> list[Receipt]:
    return [Receipt(t.session_id, "a", t.seq, t.hash, t.idempotency_key, acked_at=float(t.seq)) for t in turns]


def test_everything_delivered():
    stored = session("s1", ["k1", "k2", "k3"])
    report = audit_delivery(receipts_for(stored), StoredSessionsVerifier({"s1": stored}))
    assert report.ok and report.acknowledged == 3 and report.lost == 0


def test_a_deleted_acknowledged_turn_is_lost():
    stored = session("s1", ["k1", "k2", "k3"])
    report = audit_delivery(receipts_for(stored), StoredSessionsVerifier({"s1": stored[:2]}))
    assert not report.ok and report.lost == 1 and report.sessions[0].lost == [3]


def test_a_missing_session_loses_every_turn():
    stored = session("s1", ["k1", "k2"])
    report = audit_delivery(receipts_for(stored), StoredSessionsVerifier({}))
    assert report.lost == 2


def test_a_turn_applied_twice_is_duplicated():
    stored = session("s1", ["k1", "k2", "k2", "k3"])
    acked = [r for r in receipts_for(stored) if r.seq != 3]
    report = audit_delivery(acked, StoredSessionsVerifier({"s1": stored}))
    assert not report.ok and report.duplicated == 1
    assert report.lost == 0  # every acknowledgement is there; the extra copy is the failure


def test_altered_content_breaks_the_chain():
    stored = session("s1", ["k1", "k2"])
    altered = [stored[0], replace(stored[1], output="changed")]
    report = audit_delivery(receipts_for(stored), StoredSessionsVerifier({"s1": altered}))
    assert report.broken_chains == 1 and not report.ok


def test_a_gap_in_seq_is_out_of_order():
    stored = session("s1", ["k1", "k2", "k3"])
    gap = [stored[0], stored[2]]
    report = audit_delivery(receipts_for(gap), StoredSessionsVerifier({"s1": gap}))
    assert report.out_of_order == 1 and not report.ok


@pytest.mark.parametrize(("quantile", "expected"), [(0.5, 2.0), (0.9, 3.0), (0.99, 3.0), (0.995, 100.0), (1.0, 100.0)])
def test_histogram_percentile(quantile, expected):
    histogram = {"1": 30, "2": 30, "3": 39, "100": 1}
    assert histogram_percentile(histogram, quantile) == expected


def by_content(session_id: str, contents: list[str]) -> list[StoredTurn]:
    return [StoredTurn(content=text) for text in contents]


def sent(session_id: str, texts: list[str]) -> list[Receipt]:
    """drillbook's own receipts on an API that neither numbers nor hashes turns."""
    return [Receipt(session_id, "a", None, None, f"k{i}", acked_at=float(i), sent=text) for i, text in enumerate(texts)]


class Stored:
    def __init__(self, sessions: dict[str, list[StoredTurn]]) -> None:
        self.sessions = sessions

    def read(self, tenant: str, session_id: str) -> list[StoredTurn] | None:
        return self.sessions.get(session_id)

    def chain_ok(self, session_id: str, turns: list[StoredTurn]) -> bool:
        return linked(turns)


def test_without_seq_or_hash_receipts_match_stored_turns_by_what_was_sent():
    report = audit_delivery(sent("s", ["a", "b", "c"]), Stored({"s": by_content("s", ["a", "b", "c"])}))
    assert report.ok and report.lost == 0 and report.acknowledged == 3


def test_without_seq_a_missing_turn_is_lost_and_the_receipts_order_names_it():
    report = audit_delivery(sent("s", ["a", "b", "c"]), Stored({"s": by_content("s", ["a", "c"])}))
    assert report.lost == 1 and report.sessions[0].lost == [2]


def test_without_seq_a_turn_stored_twice_is_duplicated_and_a_swap_is_out_of_order():
    twice = audit_delivery(sent("s", ["a", "b"]), Stored({"s": by_content("s", ["a", "b", "b"])}))
    assert twice.duplicated == 1 and not twice.ok
    swapped = audit_delivery(sent("s", ["a", "b"]), Stored({"s": by_content("s", ["b", "a"])}))
    assert swapped.out_of_order == 1 and swapped.lost == 0 and not swapped.ok


def test_the_idempotency_key_wins_over_content_where_the_service_stores_it():
    receipts = sent("s", ["same", "same"])
    stored = [StoredTurn(idempotency_key="k0", content="same"), StoredTurn(idempotency_key="k1", content="same")]
    assert audit_delivery(receipts, Stored({"s": stored})).ok  # equal texts, told apart by their keys


def test_a_chain_is_checked_only_where_the_service_has_one():
    unlinked = [StoredTurn(seq=1, hash="h1"), StoredTurn(seq=2, hash="h2")]
    broken = [StoredTurn(seq=1, hash="h1"), StoredTurn(seq=2, hash="h2", prev_hash="other")]
    receipts = [Receipt("s", "a", 1, "h1", acked_at=1.0), Receipt("s", "a", 2, "h2", acked_at=2.0)]
    assert audit_delivery(receipts, Stored({"s": unlinked})).ok
    assert audit_delivery(receipts, Stored({"s": broken})).broken_chains == 1


def test_nothing_in_common_to_match_by_loses_every_receipt():
    receipts = [Receipt("s", "a", None, None, None, acked_at=1.0, sent=None)]
    assert audit_delivery(receipts, Stored({"s": [StoredTurn(content="x")]})).lost == 1
