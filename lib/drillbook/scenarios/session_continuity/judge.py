"""Judging session continuity from what the clients received: pure functions a test can feed traps.

Every figure comes from the recorded turns (drillbook.streamclient.TurnRecord: each connection,
each event with its id and when it arrived), the turns the workload stored (read back after the
drill) and the moments replica kills were seen to land. A turn is:

- acknowledged when an ``ack`` event reached a client, failed when a ``failed`` one did, and
  orphaned when neither did by the drill's bound;
- lost or duplicated in its tokens when what the clients received, in order across every
  resume, differs from the reply the workload stored (an acknowledged turn must be stored once);
- cancelled by a dropped client when a client dropped it and it then failed or never ended,
  with no replica kill landing while it ran (a turn running when a kill landed may fail for it).

Resume latency is from the first reconnect after the last event a client saw to the next event
it got. A kill is counted for a turn only when it landed after the turn began and before its
ending arrived: a turn that started after the kill, or ended before it, owes nothing to it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Sequence

from drillbook.measure import Judgement, check, percentile
from drillbook.streamclient import ACK, BROKEN, DROPPED, FAILURE, STALL_S, TOKEN, TurnRecord


@dataclass(frozen=True)
class TurnAudit:
    """One turn, judged."""

    turn_key: str
    outcome: str  # acknowledged, failed, orphaned
    acks_received: int
    stored: int  # how many times the workload stored it
    tokens_checked: int
    tokens_lost: int
    tokens_duplicated: int
    repeated_event_ids: int  # token events whose id came before: a repeat, or an id the workload reused
    dropped: bool
    live_at_kill: bool
    resume_latencies_s: tuple[float, ...]
    reason: str | None  # the platform's word for a failure


ACKNOWLEDGED, FAILED, ORPHANED = "acknowledged", "failed", "orphaned"
NO_REPLIES = "the read-back offers no reply to hold the tokens to (api.streams.stored_reply is null)"


def tokens_of(reply: str | None, separator: str) -> list[str]:
    if not reply:
        return []
    return reply.split(separator) if separator else list(reply)


def compare_tokens(received: Sequence[str], stored: Sequence[str]) -> tuple[int, int]:
    """(lost, duplicated): stored tokens the clients never got, and tokens they got beyond the
    stored reply (a repeat, or anything the reply does not hold), by longest matching blocks."""
    matched = sum(block.size for block in SequenceMatcher(None, list(received), list(stored), autojunk=False)
                  .get_matching_blocks())
    return len(stored) - matched, len(received) - matched


def resume_latencies(record: TurnRecord) -> list[float]:
    """Seconds from each first reconnect after a break to the next event received."""
    latencies: list[float] = []
    waiting_since: float | None = None
    for index, connection in enumerate(record.connections):
        if index == 0:
            continue
        if waiting_since is None:
            waiting_since = connection.opened_at
        if connection.events:
            latencies.append(connection.events[0].at - waiting_since)
            waiting_since = None
    return latencies


def audit_turn(record: TurnRecord, stored_replies: Sequence[str | None], kills: Sequence[tuple[float, float]],
               separator: str = " ") -> TurnAudit:
    """One turn from what its clients received, the replies stored for it, and the kills that were
    seen to land, each as (sent, seen landed)."""
    events = [event for connection in record.connections for event in connection.events]
    acks = [event for event in events if event.kind == ACK]
    failures = [event for event in events if event.kind == FAILURE]
    ending = next((event for event in events if event.kind in (ACK, FAILURE)), None)
    outcome = ACKNOWLEDGED if acks else FAILED if failures else ORPHANED
    tokens = [event for event in events if event.kind == TOKEN]
    seen: set[str] = set()
    repeated = 0
    for event in tokens:
        if event.id is not None and event.id in seen:
            repeated += 1
        elif event.id is not None:
            seen.add(event.id)
    checked = lost = duplicated = 0
    if outcome == ACKNOWLEDGED and stored_replies and stored_replies[0] is not None:
        # (stored more than once: held to the first, and counted as not once; None: no reply offered)
        stored = tokens_of(stored_replies[0], separator)
        checked = len(stored)
        lost, duplicated = compare_tokens([event.text or "" for event in tokens], stored)
    end = ending.at if ending is not None else math.inf
    live = any(record.started_at <= landed and end >= sent for sent, landed in kills)
    return TurnAudit(record.turn_key, outcome, len(acks), len(stored_replies), checked, lost, duplicated, repeated, any(connection.how == DROPPED for connection in record.connections), live,
                     tuple(resume_latencies(record)), str(failures[0].detail) if failures else None)


def hit_by_kills(records: Sequence[TurnRecord], kills: Sequence[tuple[float, float]],
                 grace_s: float = STALL_S + 2.0) -> int:
    """Connections the kills touched, as the clients saw it, apart from the platform's word: one
    that broke or stalled (not dropped by its client), or that was told its turn failed, between a
    kill and grace_s after it was seen to land (a stall is noticed STALL_S after the last byte; a
    replica stopped gracefully fails its turns before it goes)."""
    def in_window(at: float) -> bool:
        return any(sent <= at <= landed + grace_s for sent, landed in kills)

    return sum(1 for record in records for connection in record.connections
               if (connection.how == BROKEN and connection.events and in_window(connection.closed_at))
               or any(event.kind == FAILURE and in_window(event.at) for event in connection.events))


@dataclass(frozen=True)
class ContinuityFigures:
    """The drill's figures over every turn."""

    turns: int
    acknowledged: int
    failed: int
    orphaned: int
    failed_at_kill: int  # failed while a kill landed: the platform's allowed answer to losing a replica
    cancelled_by_client: int
    failed_unprovoked: int  # failed with no drop and no kill
    not_once: int  # acknowledged, but not received once and stored once; or failed, yet stored
    tokens_checked: int
    tokens_lost: int
    tokens_duplicated: int
    repeated_event_ids: int
    dropped: int
    resumes: int
    resume_p50_ms: float | None
    resume_p95_ms: float | None
    resume_p99_ms: float | None
    reasons: dict[str, int] = field(default_factory=dict)


    def records(self) -> list[tuple[str, object, str]]:
        """(name, value, unit) of every figure, as the run records them."""
        return [("turns", self.turns, ""), ("acknowledged_turns", self.acknowledged, ""),
                ("failed_turns", self.failed, ""), ("failed_turns_at_kill", self.failed_at_kill, ""),
                ("failure_reasons", self.reasons, ""), ("orphaned_turns", self.orphaned, ""),
                ("turns_cancelled_by_client", self.cancelled_by_client, ""), ("tokens_checked", self.tokens_checked, ""),
                ("tokens_lost", self.tokens_lost, ""), ("tokens_duplicated", self.tokens_duplicated, ""),
                ("repeated_event_ids", self.repeated_event_ids, ""), ("streams_dropped", self.dropped, ""),
                ("resumes", self.resumes, ""), ("resume_p50_ms", self.resume_p50_ms, "ms"),
                ("resume_p95_ms", self.resume_p95_ms, "ms"), ("resume_p99_ms", self.resume_p99_ms, "ms")]


def _ms(values: Sequence[float], quantile: float) -> float | None:
    return percentile(values, quantile) * 1000 if values else None


def continuity_figures(audits: Sequence[TurnAudit]) -> ContinuityFigures:
    latencies = [latency for audit in audits for latency in audit.resume_latencies_s]
    unended = [a for a in audits if a.outcome != ACKNOWLEDGED]
    reasons: dict[str, int] = {}
    for audit in audits:
        if audit.reason:
            reasons[audit.reason] = reasons.get(audit.reason, 0) + 1
    return ContinuityFigures(
        turns=len(audits),
        acknowledged=sum(a.outcome == ACKNOWLEDGED for a in audits),
        failed=sum(a.outcome == FAILED for a in audits),
        orphaned=sum(a.outcome == ORPHANED for a in audits),
        failed_at_kill=sum(a.outcome == FAILED and a.live_at_kill for a in audits),
        cancelled_by_client=sum(a.dropped and not a.live_at_kill for a in unended),
        failed_unprovoked=sum(a.outcome == FAILED and not a.dropped and not a.live_at_kill for a in audits),
        not_once=sum((a.outcome == ACKNOWLEDGED and (a.acks_received != 1 or a.stored != 1))
                     or (a.outcome != ACKNOWLEDGED and a.stored > 0) for a in audits),
        tokens_checked=sum(a.tokens_checked for a in audits),
        tokens_lost=sum(a.tokens_lost for a in audits),
        tokens_duplicated=sum(a.tokens_duplicated for a in audits),
        repeated_event_ids=sum(a.repeated_event_ids for a in audits),
        dropped=sum(a.dropped for a in audits),
        resumes=len(latencies),
        resume_p50_ms=_ms(latencies, 0.50), resume_p95_ms=_ms(latencies, 0.95), resume_p99_ms=_ms(latencies, 0.99),
        reasons=reasons)


def judge_continuity(figures: ContinuityFigures, *, resumable: bool, drops_planned: bool, kills_planned: int,
                     replies_offered: bool = True,
                     kills_landed: int, streams_hit_by_kill: int, max_resume_p95_ms: float,
                     max_failed_rate: float) -> Judgement:
    """The checks, and whether anything can be judged: a drill whose drops or kills did not land
    proves nothing about resuming, and is ERROR, never PASS."""
    cannot = None
    if figures.turns == 0:
        cannot = "no streamed turn was started: nothing to judge"
    elif kills_planned and not kills_landed:
        cannot = "the replica kill was not seen to land"
    elif kills_planned and not streams_hit_by_kill:
        cannot = ("the replica kill touched no client's stream (none broke, stalled or was told its turn "
                  "failed): no turn was streaming from the killed replica")
    elif drops_planned and not figures.dropped and figures.acknowledged == figures.turns:
        # (turns that failed or never ended are a measured miss, whether or not a drop came first)
        cannot = "no client dropped a stream mid-turn: the turns ended before the drop offsets"
    no_resume = "" if resumable else "the workload cannot resume a stream (api.streams.resume is null): "
    failed_rate = figures.failed / figures.turns if figures.turns else None
    checks = (
        check("turns acknowledged", figures.acknowledged, ">=", 1, missing="no turn was acknowledged"),
        check("tokens lost across a resume", figures.tokens_lost if replies_offered else None, "<=", 0,
              missing=NO_REPLIES),
        check("tokens duplicated across a resume", figures.tokens_duplicated if replies_offered else None, "<=", 0,
              missing=NO_REPLIES),
        check("turns not acknowledged and stored exactly once", figures.not_once, "<=", 0),
        check("orphaned turns (neither acknowledged nor failed)", figures.orphaned, "<=", 0),
        check("turns a dropped client cancelled", figures.cancelled_by_client, "<=", 0),
        check("turns failed with no drop and no replica lost", figures.failed_unprovoked, "<=", 0),
        check("failed turns / turns", failed_rate, "<=", max_failed_rate, missing="no turn"),
        check("resume latency p95", figures.resume_p95_ms, "<=", max_resume_p95_ms, "ms",
              missing=no_resume + ("no stream was resumed" if resumable else "no stream was resumed")),
    )
    return Judgement(checks, cannot_judge=cannot)


__all__ = ["ACKNOWLEDGED", "ContinuityFigures", "FAILED", "ORPHANED", "TurnAudit", "audit_turn", "hit_by_kills", "compare_tokens",
           "continuity_figures", "judge_continuity", "resume_latencies", "tokens_of"]
