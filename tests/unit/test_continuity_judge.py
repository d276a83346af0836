"""The session-continuity judge fed traps: what clients received, what was stored, when kills landed."""

from __future__ import annotations

import pytest

from drillbook.scenarios.session_continuity.judge import (ACKNOWLEDGED, FAILED, ORPHANED, audit_turn,
                                                          hit_by_kills, compare_tokens, continuity_figures,
                                                          judge_continuity, resume_latencies)
from drillbook.streamclient import ACK, BROKEN, DROPPED, ENDED, FAILURE, REFUSED, TOKEN, Connection, Received, TurnRecord

REPLY = "a b c d e f"


def tokens(first_id: int, words: str, at: float) -> list[Received]:
    return [Received(str(first_id + n), TOKEN, word, at + n * 0.01) for n, word in enumerate(words.split())]


def turn(*connections: Connection, started: float = 100.0) -> TurnRecord:
    return TurnRecord("s1", "tenant-a", "k1", "turn 1", started, list(connections))


def ack(event_id: int, at: float) -> Received:
    return Received(str(event_id), ACK, None, at, {"seq": 1})


def failed(event_id: int, at: float) -> Received:
    return Received(str(event_id), FAILURE, None, at, "the replica streaming this turn was lost")


def dropped_then_resumed() -> TurnRecord:
    return turn(Connection(None, 100.0, events=tokens(1, "a b c", 100.1), closed_at=100.2, how=DROPPED),
                Connection("3", 100.3, events=[*tokens(4, "d e f", 100.35), ack(7, 100.5)], closed_at=100.5, how=ENDED))


def test_a_resumed_turn_that_got_every_token_once_is_whole():
    audit = audit_turn(dropped_then_resumed(), [REPLY], [])
    assert (audit.outcome, audit.tokens_checked, audit.tokens_lost, audit.tokens_duplicated) == (ACKNOWLEDGED, 6, 0, 0)
    assert audit.dropped and audit.resume_latencies_s == pytest.approx((0.05,))


def test_a_reconnect_that_starts_the_turn_again_repeats_tokens_and_ids():
    record = turn(Connection(None, 100.0, events=tokens(1, "a b c", 100.1), closed_at=100.2, how=DROPPED),
                  Connection("3", 100.3, events=[*tokens(1, REPLY, 100.35), ack(7, 100.5)], how=ENDED))
    audit = audit_turn(record, [REPLY, REPLY], [])
    assert audit.repeated_event_ids == 3 and audit.tokens_duplicated == 3 and audit.stored == 2
    figures = continuity_figures([audit])
    assert figures.not_once == 1 and figures.tokens_duplicated == 3


def test_a_resume_that_skips_events_loses_tokens():
    record = turn(Connection(None, 100.0, events=tokens(1, "a b c", 100.1), how=DROPPED),
                  Connection("3", 100.3, events=[*tokens(6, "f", 100.35), ack(7, 100.5)], how=ENDED))
    assert audit_turn(record, [REPLY], []).tokens_lost == 2
    assert compare_tokens(["a", "x", "c"], ["a", "b", "c"]) == (1, 1)  # a token that is not the reply's: both


def test_resume_latency_runs_from_the_first_reconnect_not_the_last():
    record = turn(Connection(None, 100.0, events=tokens(1, "a", 100.1), how=BROKEN),
                  Connection("1", 101.0, how=REFUSED),
                  Connection("1", 101.5, how=REFUSED),
                  Connection("1", 102.0, events=[failed(2, 102.25)], how=ENDED))
    assert resume_latencies(record) == [pytest.approx(1.25)]


def test_a_failure_counts_for_a_kill_only_when_the_turn_ran_while_it_landed():
    kill = (200.0, 200.4)
    during = turn(Connection(None, 199.0, events=tokens(1, "a", 199.1), how=BROKEN),
                  Connection("1", 200.5, events=[failed(2, 200.6)], how=ENDED), started=199.0)
    assert audit_turn(during, [], [kill]).live_at_kill
    # Began after the kill was seen to land: the kill cannot have failed it.
    after = turn(Connection(None, 201.0, events=[*tokens(1, "a", 201.1), failed(2, 201.2)], how=ENDED), started=201.0)
    assert not audit_turn(after, [], [kill]).live_at_kill
    # Ended before the kill was sent.
    before = turn(Connection(None, 190.0, events=[*tokens(1, "a", 190.1), failed(2, 190.2)], how=ENDED), started=190.0)
    assert not audit_turn(before, [], [kill]).live_at_kill
    figures = continuity_figures([audit_turn(r, [], [kill]) for r in (during, after, before)])
    assert (figures.failed, figures.failed_at_kill, figures.failed_unprovoked) == (3, 1, 2)


def test_a_dropped_turn_that_never_ends_is_orphaned_and_cancelled_by_its_client():
    record = turn(Connection(None, 100.0, events=tokens(1, "a b", 100.1), how=DROPPED))
    audit = audit_turn(record, [], [])
    assert audit.outcome == ORPHANED
    figures = continuity_figures([audit])
    assert (figures.orphaned, figures.cancelled_by_client) == (1, 1)
    # A turn failed but stored all the same was acknowledged in part: not once.
    failed_but_stored = turn(Connection(None, 100.0, events=[*tokens(1, "a", 100.1), failed(2, 100.2)], how=ENDED))
    assert continuity_figures([audit_turn(failed_but_stored, [REPLY], [])]).not_once == 1
    assert audit_turn(failed_but_stored, [REPLY], []).outcome == FAILED


def test_only_streams_broken_stalled_or_failed_around_a_landed_kill_show_the_kill():
    kill = (200.0, 200.4)
    records = [turn(Connection(None, 199.0, events=tokens(1, "a", 199.1), closed_at=200.3, how=BROKEN)),
               turn(Connection(None, 150.0, events=tokens(1, "a", 150.1), closed_at=150.2, how=BROKEN)),
               turn(Connection(None, 199.0, events=tokens(1, "a", 199.1), closed_at=200.3, how=DROPPED))]
    assert hit_by_kills(records, [kill]) == 1
    assert hit_by_kills(records, []) == 0
    # A replica stopped gracefully tells its clients their turns failed: that is the kill seen too,
    # but not a failure that came before the kill was sent.
    told = turn(Connection(None, 199.0, events=[*tokens(1, "a", 199.1), failed(2, 201.0)], how=ENDED))
    told_before = turn(Connection(None, 150.0, events=[*tokens(1, "a", 150.1), failed(2, 150.2)], how=ENDED))
    assert hit_by_kills([told, told_before], [kill]) == 1


def judge(figures, **overrides):
    options = dict(resumable=True, drops_planned=True, kills_planned=1, kills_landed=1, streams_hit_by_kill=1,
                   max_resume_p95_ms=2000.0, max_failed_rate=0.2)
    return judge_continuity(figures, **{**options, **overrides})


def test_no_threshold_passes_total_failure_and_a_fault_that_did_not_land_cannot_be_judged():
    every_turn_failed = continuity_figures([
        audit_turn(turn(Connection(None, 100.0, events=[failed(1, 100.1)], how=ENDED)), [], [(99.0, 99.5)])])
    judged = judge(every_turn_failed)
    assert judged.cannot_judge is None
    assert {"turns acknowledged", "failed turns / turns", "resume latency p95"} <= set(judged.failed())
    whole = continuity_figures([audit_turn(dropped_then_resumed(), [REPLY], [])])
    assert judge(whole).failed() == [] and judge(whole).cannot_judge is None
    assert "not seen to land" in judge(whole, kills_landed=0).cannot_judge
    assert "touched no client's stream" in judge(whole, streams_hit_by_kill=0).cannot_judge
    assert judge(continuity_figures([]), kills_planned=0).cannot_judge.startswith("no streamed turn")
    undropped = continuity_figures([audit_turn(turn(Connection(None, 100.0, events=[ack(1, 100.1)], how=ENDED)),
                                               [""], [])])
    assert "no client dropped" in judge(undropped, kills_planned=0).cannot_judge
    no_resume = judge(continuity_figures([audit_turn(turn(Connection(None, 100.0, events=tokens(1, "a", 100.1),
                                                                     how=DROPPED)), [], [])]), resumable=False,
                      kills_planned=0)
    note = next(c.note for c in no_resume.checks if c.name == "resume latency p95")
    assert "cannot resume" in note
