"""What the watchdog beside a run holds and when a lease is due: pure functions over the lease
records it read (drillbook.watchdog.merge and due)."""

from __future__ import annotations

from drillbook.watchdog import due, merge


def lease(fault: str, expires_at: float, granted_at: float = 0.0, released: bool = False) -> dict:
    return {"fault": {"id": fault, "run_id": "r1"}, "expires_at": expires_at, "granted_at": granted_at,
            "seconds": 3.0, "released": released}


def test_a_lease_whose_file_is_gone_is_kept_and_a_released_one_is_dropped():
    held = merge({}, [lease("a", 10), lease("b", 10)])
    assert set(held) == {"a", "b"}
    held = merge(held, [])  # the runner's folder deleted: no release, the faults stay held
    assert set(held) == {"a", "b"}
    held = merge(held, [lease("a", 20, released=True), lease("b", 30)])
    assert set(held) == {"b"} and held["b"]["expires_at"] == 30  # a renewal is taken


def test_due_leases_are_those_past_their_expiry_oldest_grant_first():
    held = merge({}, [lease("late", 5, granted_at=2), lease("early", 4, granted_at=1), lease("alive", 50)])
    assert [item["fault"]["id"] for item in due(held, now=6)] == ["early", "late"]
    assert due(held, now=4.5)[0]["fault"]["id"] == "early" and len(due(held, now=4.5)) == 1
    assert due(held, now=3.9) == []  # not yet: a lease is due only once its expiry has passed


def test_an_undo_tried_again_keeps_its_schedule_until_released():
    in_hand = {"a": lease("a", 12) | {"first_due": 4}}
    assert merge(in_hand, [lease("a", 4)])["a"]["expires_at"] == 12  # the stale file does not reset it
    assert merge(in_hand, [lease("a", 4, released=True)]) == {}
