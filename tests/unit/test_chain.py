from dataclasses import replace

from drillbook.sandbox.chain import GENESIS_HASH, turn_hash, verify_chain
from drillbook.sandbox.store import Turn


def make_chain(session_id: str, count: int) -> list[Turn]:
    turns, prev = [], GENESIS_HASH
    for seq in range(1, count + 1):
        digest = turn_hash(prev, session_id, seq, f"key-{seq}", f"in {seq}", f"out {seq}")
        turns.append(Turn(session_id, seq, f"key-{seq}", f"in {seq}", f"out {seq}", prev, digest, "t"))
        prev = digest
    return turns


def test_intact_chain_verifies():
    check = verify_chain("s1", make_chain("s1", 5))
    assert check.ok and check.turns == 5


def test_empty_chain_verifies():
    assert verify_chain("s1", []).ok


def test_altered_content_is_found_at_its_seq():
    turns = make_chain("s1", 5)
    turns[2] = replace(turns[2], output="tampered")
    check = verify_chain("s1", turns)
    assert not check.ok and check.broken_at == 3 and "content" in check.reason


def test_missing_turn_breaks_the_chain():
    turns = make_chain("s1", 5)
    del turns[1]
    check = verify_chain("s1", turns)
    assert not check.ok and check.broken_at == 3


def test_duplicated_turn_breaks_the_chain():
    turns = make_chain("s1", 3)
    check = verify_chain("s1", [turns[0], turns[1], turns[1], turns[2]])
    assert not check.ok and check.broken_at == 2


def test_chain_is_bound_to_its_session():
    assert not verify_chain("other-session", make_chain("s1", 2)).ok


def test_hash_depends_on_every_field():
    base = ("p" * 64, "s", 1, "k", "in", "out")
    digests = {turn_hash(*base)}
    for index in range(len(base)):
        changed = list(base)
        changed[index] = changed[index] + 1 if isinstance(changed[index], int) else str(changed[index]) + "x"
        digests.add(turn_hash(*changed))
    assert len(digests) == len(base) + 1
