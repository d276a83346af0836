"""The measurements behind the verdicts, each a small function whose docstring is its definition.

Inputs are plain series (pandas) and timestamps (epoch seconds), so every measure can be checked
on hand-built data whose answer is known.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import pandas as pd

from drillbook.evidence.summary import SloCheck
from drillbook.observation import ReplicaObservation, StoreObservation, TierObservation


SUSTAIN_READINGS = 3  # readings in a row at full readiness before replicas count as back (HA)
READY_FROM_EVENTS = "target events"  # the HA drill's replicas_ready_from when the target's own events said
PERCENTILE = "nearest rank: the smallest measured value with at least the quantile of all values at or below it"


def percentile(values: Iterable[float], quantile: float) -> float:
    """Nearest-rank percentile: the smallest value with at least `quantile` of the values at or below it."""
    ordered = sorted(v for v in values if v is not None and not math.isnan(v))
    if not ordered:
        return math.nan
    rank = max(1, math.ceil(quantile * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class RecoveryTimes:
    """Seconds from the fault to recovery: replicas alone, and the service as clients see it."""

    replicas_recovered_s: float | None
    service_recovered_s: float | None


def recovery_time(requests: pd.DataFrame, fault_at: float, replicas_ready_at: float | None, baseline_p95_ms: float,
                  *, tolerance: float = 1.5, max_error_rate: float = 0.0, window_s: float = 1.0,
                  hold_s: float = 3.0) -> RecoveryTimes:
    """Recovery time after a fault injected at `fault_at`.

    - replicas recovered: `replicas_ready_at - fault_at` (the desired replicas are ready again).
    - service recovered: the first instant t >= replicas_ready_at such that every window of
      `window_s` seconds between t and t + hold_s has a rolling p95 within `tolerance` x the
      baseline p95 and an error rate within `max_error_rate`; reported as t - fault_at.
      None when the service never held within tolerance for `hold_s` in the data.

    `requests` has one row per request: t (start, epoch s), ms (latency), ok (bool).
    """
    if replicas_ready_at is None:
        return RecoveryTimes(None, None)
    replicas = replicas_ready_at - fault_at
    after = requests[requests["t"] >= replicas_ready_at]
    if after.empty:
        return RecoveryTimes(replicas, None)
    end = float(after["t"].max())
    windows = []
    start = replicas_ready_at
    while start < end:
        chunk = after[(after["t"] >= start) & (after["t"] < start + window_s)]
        healthy = bool(len(chunk)) and percentile(chunk["ms"], 0.95) <= tolerance * baseline_p95_ms and \
            (1 - chunk["ok"].mean()) <= max_error_rate
        windows.append((start, healthy))
        start += window_s
    needed = max(1, math.ceil(hold_s / window_s))
    for index in range(len(windows) - needed + 1):
        if all(healthy for _, healthy in windows[index:index + needed]):
            return RecoveryTimes(replicas, windows[index][0] - fault_at)
    return RecoveryTimes(replicas, None)


@dataclass(frozen=True)
class Landing:
    """Whether a fault was seen to take effect, when (the end of the first reading that showed
    it: late by at most one reading, never early) and what was seen, in words."""

    landed: bool
    at: float | None
    seen: str

    def to_json(self) -> dict[str, object]:
        return {"landed": self.landed, "at": self.at, "seen": self.seen}


def _in_order(observations: Iterable[ReplicaObservation]) -> list[ReplicaObservation]:
    return sorted(observations, key=lambda o: (o.started, o.ended))


def kill_landing(before: ReplicaObservation | None, after: Sequence[ReplicaObservation],
                 issued_at: float) -> Landing:
    """A kill is seen to land in the first reading that started at or after the kill was issued
    and shows fewer replicas ready than desired, or lacks one of the ready identities read before
    the kill (a replica that came back at once under a new pid or pod uid). A reading that
    started before the kill, or got no answer, is no evidence either way.

    Where the replicas' own addresses answered just before the kill (`before.answering`), the
    platform's word is not enough: a kill lands only once one of them is also seen to stop
    answering (a reading whose `answering` lacks it), at the later of the two readings. A pod
    force-deleted from the API whose process serves on was never killed."""
    known = set(before.ids) if before is not None and not before.error else set()
    witnesses = set(before.answering or ()) if before is not None and not before.error else set()
    listed: tuple[float, str] | None = None  # when, and what, the platform's own readings showed
    silent: tuple[float, str] | None = None  # when a watched replica's address stopped answering
    readings = [o for o in _in_order(after) if o.started >= issued_at and not o.error]
    for seen in readings:
        if listed is None:
            if seen.ready < seen.desired:
                listed = (seen.ended, f"{seen.ready} of {seen.desired} ready")
            elif known and seen.ids and not known <= set(seen.ids):
                listed = (seen.ended, f"replica {', '.join(sorted(known - set(seen.ids)))} no longer among the ready")
        if witnesses and silent is None and seen.answering is not None and not witnesses <= set(seen.answering):
            silent = (seen.ended, f"replica {', '.join(sorted(witnesses - set(seen.answering)))} stopped answering "
                                  "at its address")
        if listed is not None and (not witnesses or silent is not None):
            if silent is None:
                return Landing(True, listed[0], listed[1])
            return Landing(True, max(listed[0], silent[0]), f"{listed[1]}; {silent[1]}")
    last = readings[-1] if readings else None
    if last is None:
        return Landing(False, None, "no reading after the kill")
    probed = [o for o in readings if o.answering is not None]
    if listed is not None and not probed:
        return Landing(False, None, f"{listed[1]}, but none of the {len(witnesses)} replica addresses watched across "
                                    "the kill could be probed after it: no process was seen to stop")
    if listed is not None:
        return Landing(False, None, f"{listed[1]}, but all {len(witnesses)} replica addresses watched across the "
                                    f"kill still answered in all {len(probed)} probed readings after it: no process "
                                    "was seen to stop")
    return Landing(False, None, f"{len(readings)} readings after the kill all showed {last.ready} of {last.desired} "
                                "ready" + (" with the same replicas" if known else ""))


def scale_down_landing(after: Sequence[ReplicaObservation], issued_at: float, replicas: int) -> Landing:
    """A scale down is seen in the first reading that started at or after it was issued and shows
    no more than `replicas` ready (0 for a scale to zero) and none still stopping: a replica
    that is shutting down still holds its node's CPU and GPU, so a start measured beside it would
    measure a wait for those, not a start from zero."""
    for seen in _in_order(after):
        if seen.started >= issued_at and not seen.error and seen.ready <= replicas and not seen.stopping:
            return Landing(True, seen.ended, f"{seen.ready} ready (desired {seen.desired})")
    readings = [o for o in after if o.started >= issued_at and not o.error]
    if not readings:
        return Landing(False, None, "no reading after the scale")
    last = readings[-1]
    return Landing(False, None, f"{len(readings)} readings after the scale, the last with {last.ready} ready"
                   + (f" and {last.stopping} still stopping" if last.stopping else ""))


# A flood's chunks wait at least one of their own slot holds each: the tier asked for twice what it has.
FLOOD_OVERSUBSCRIPTION = 1.0


@dataclass(frozen=True)
class Contention:
    """What the tenants other than a victim did at a shared tier between two readings: the
    slot-seconds they held, the seconds their chunks of generation waited for a slot, and how
    many chunks began. `oversubscription` is waited over held: how many of their own slot holds
    each chunk waited on average (0: a slot was always free; 1: the tier was asked for about
    twice the slots it has; None: they held no slot)."""

    since: float
    until: float
    held_s: float
    waited_s: float
    chunks: float

    @property
    def oversubscription(self) -> float | None:
        return self.waited_s / self.held_s if self.held_s > 0 else None

    def describe(self) -> str:
        if self.oversubscription is None:
            return f"the other tenants held no slot in {self.until - self.since:.1f}s"
        return (f"the other tenants held {self.held_s:.2f} slot-seconds in {self.until - self.since:.1f}s and their "
                f"{self.chunks:.0f} chunks waited {self.oversubscription:.2f} of their own slot holds each")

    def to_json(self) -> dict[str, object]:
        return {"since": self.since, "until": self.until, "held_s": self.held_s, "waited_s": self.waited_s,
                "chunks": self.chunks, "oversubscription": self.oversubscription}


def contention(earlier: TierObservation, later: TierObservation, victim: str) -> Contention | None:
    """The other tenants' use of the tier between two readings: from the end of the earlier
    (nothing after it was in it) to the start of the later. None when either reading failed or a
    counter went back (a replica restarted, or one answered in one reading and not the other):
    then the change is not what happened between them."""
    if earlier.error or later.error or later.started < earlier.ended:
        return None
    totals = {"gpu_seconds": 0.0, "queue_wait_sum": 0.0, "queue_wait_count": 0.0}
    for tenant in set(earlier.usage) | set(later.usage):
        if tenant == victim:
            continue
        for name in totals:
            change = later.usage.get(tenant, {}).get(name, 0.0) - earlier.usage.get(tenant, {}).get(name, 0.0)
            if change < 0:
                return None
            totals[name] += change
    return Contention(earlier.ended, later.started, totals["gpu_seconds"], totals["queue_wait_sum"],
                      totals["queue_wait_count"])


def flood_landing(readings: Sequence[TierObservation], issued_at: float, victim: str,
                  needed: float = FLOOD_OVERSUBSCRIPTION) -> Landing:
    """An aggressor's flood is seen at the shared tier between two consecutive readings, both
    begun at or after the call that started it, in which the tenants other than the victim held
    slots and their chunks waited at least `needed` of their own slot holds: the tier was asked
    for more than it has. Replicas that are ready, or an aggressor that sends, are not that:
    a flood the tier absorbs without a queue leaves nothing for isolation to protect."""
    after = sorted((r for r in readings if r.started >= issued_at and not r.error), key=lambda r: r.started)
    best: Contention | None = None
    for earlier, later in zip(after, after[1:]):
        seen = contention(earlier, later, victim)
        if seen is None or seen.oversubscription is None:
            continue
        if seen.oversubscription >= needed:
            return Landing(True, later.ended, seen.describe())
        if best is None or seen.oversubscription > (best.oversubscription or 0.0):
            best = seen
    failed = [r for r in readings if r.started >= issued_at and r.error]
    if len(after) < 2:
        why = f"; the last failed: {failed[-1].error}" if failed else ""
        return Landing(False, None, f"{len(after)} answered readings of the shared tier after the call{why}")
    if best is None and not any(r.usage for r in after):
        return Landing(False, None, f"{len(after)} readings of the shared tier after the call, none with a tenant in "
                                    "it (a tier that shows its tenants only to its own services needs its token: "
                                    "the profile's workload.inference.metrics_token_env)")
    if best is None:
        return Landing(False, None, f"{len(after)} readings of the shared tier after the call; the tenants other than "
                                    f"{victim} held no slot between any two")
    return Landing(False, None, f"{len(after)} readings of the shared tier after the call; at most {best.describe()} "
                                f"({needed:g} needed)")


def flood_held_through(landed: TierObservation, after: Sequence[TierObservation], victim: str,
                       needed: float = FLOOD_OVERSUBSCRIPTION) -> tuple[Landing, Contention | None]:
    """A flood seen to land (`landed`: the reading that saw it) held through the window that
    followed when, over the whole window (from that reading to the first of `after`, taken when
    the window ended), the other tenants' chunks waited at least `needed` of their own holds,
    and the tier still queued for them between the first two readings of `after`: a flood that
    stopped in the window is not there at its end, whatever its average says. Returned with the
    contention seen over the whole window (None when there was no change to see)."""
    if len(after) < 2:
        return Landing(False, None, f"{len(after)} readings of the shared tier after the window (2 needed)"), None
    whole, still = contention(landed, after[0], victim), contention(after[0], after[1], victim)
    for part, seen in (("over the window", whole), ("at its end", still)):
        if seen is None:
            failed = next((r.error for r in after[:2] if r.error), "")
            return Landing(False, None, f"no change {part}: " + (failed or "the tier's counters went back (a replica "
                                                                           "restarted or did not answer)")), whole
        if seen.oversubscription is None or seen.oversubscription < needed:
            return Landing(False, None, f"{part}, {seen.describe()} ({needed:g} needed)"), whole
    assert whole is not None
    return Landing(True, after[1].ended, whole.describe()), whole


def recovered_at(observations: Sequence[ReplicaObservation], landed_at: float | None, sustain: int = 3) -> float | None:
    """When the replicas were back: the end of the first reading that started after the fault
    was seen to land (`landed_at`) and showed full readiness, followed without a gap by
    sustain - 1 more readings that also did. Readings that started before `landed_at` never
    count (they may describe the world before the fault). None when never seen sustained."""
    if landed_at is None:
        return None
    run: list[ReplicaObservation] = []
    for seen in _in_order(observations):
        if seen.started < landed_at:
            continue
        if not seen.full:
            run = []
            continue
        run.append(seen)
        if len(run) >= max(1, sustain):
            return run[0].ended
    return None


def still_down_at(observations: Sequence[ReplicaObservation], since: float) -> float | None:
    """The start of the latest reading that began at or after `since` and answered that the role
    had fewer replicas ready than it wants: the replicas were not back at that moment, so they
    came back later than it, if at all. A reading that began earlier, or got no answer, is no
    evidence of it. None when no such reading was taken."""
    down = [seen.started for seen in observations
            if seen.started >= since and not seen.error and seen.ready < seen.desired]
    return max(down) if down else None


def store_loss_landing(observations: Sequence[StoreObservation], issued_at: float) -> Landing:
    """A destroyed store is seen in the first reading that started at or after the disaster was
    issued and found the store unhealthy, or could not read back a session known to exist."""
    for seen in sorted(observations, key=lambda o: o.started):
        if seen.started < issued_at:
            continue
        if not seen.healthy:
            return Landing(True, seen.ended, f"store unhealthy{': ' + seen.error if seen.error else ''}")
        if seen.sessions_known and seen.sessions_read is not None and seen.sessions_read < seen.sessions_known:
            return Landing(True, seen.ended, f"{seen.sessions_read} of {seen.sessions_known} known sessions read back")
    later = [o for o in observations if o.started >= issued_at]
    last = later[-1] if later else None
    return Landing(False, None, "no reading after the disaster" if last is None else
                   f"{len(later)} readings after the disaster all found the store healthy"
                   + (f" with {last.sessions_read} of {last.sessions_known} known sessions read back"
                      if last.sessions_known else ""))


def load_needed_after_fault(load_end: float | None, landed_at: float | None, max_recovery_s: float,
                            hold_s: float) -> float | None:
    """Seconds of load missing after the fault's observed landing to judge a recovery within
    max_recovery_s held for hold_s (0 when the load covered it; None without a landing)."""
    if landed_at is None:
        return None
    covered = (load_end - landed_at) if load_end is not None else 0.0
    return max(0.0, max_recovery_s + hold_s - covered)


def replicas_ready_at(events: Sequence[dict], killed: Sequence[str], fault_at: float) -> float | None:
    """From a target's own lifecycle events: when the last killed replica was ready again (its
    first replica_ready at or after the fault); None unless every killed replica has one."""
    times = [next((e["t"] for e in events if e.get("kind") == "replica_ready" and e.get("replica") == replica
                   and e["t"] >= fault_at), None) for replica in killed]
    return max(t for t in times if t is not None) if killed and all(t is not None for t in times) else None


@dataclass(frozen=True)
class HaFigures:
    """The HA drill's figures from its recorded turns (rows: t, ms, ok), the fault and the moment
    the replicas were seen back."""

    baseline_p95_ms: float
    p95_ms: float
    replicas_recovered_s: float | None
    recovery_time_s: float | None
    error_rate_fault: float | None
    load_end: float | None

    def to_json(self) -> dict[str, float | None]:
        return {"baseline_p95_ms": self.baseline_p95_ms, "p95_ms": self.p95_ms,
                "replicas_recovered_s": self.replicas_recovered_s, "recovery_time_s": self.recovery_time_s,
                "error_rate_fault": self.error_rate_fault}


def ha_figures(turns: pd.DataFrame, fault_at: float | None, ready_at: float | None, *, tolerance: float,
               hold_s: float) -> HaFigures:
    """Baseline p95 (turns started before the fault), p95 over the run, recovery (recovery_time),
    and the error rate in the fault window: every turn in flight from the fault until hold_s
    after the replicas were back (a request a kill breaks was sent before the kill)."""
    baseline = turns[turns["t"] < fault_at] if fault_at else turns
    baseline_p95 = percentile(baseline["ms"], 0.95)
    recovery = recovery_time(turns, fault_at, ready_at, baseline_p95, tolerance=tolerance, hold_s=hold_s) \
        if fault_at else None
    finished = turns["t"] + turns["ms"] / 1000.0
    window_end = (ready_at or fault_at or 0.0) + hold_s
    in_fault = turns[(finished >= (fault_at or 0.0)) & (turns["t"] < window_end)] if fault_at else turns.iloc[0:0]
    return HaFigures(
        baseline_p95_ms=baseline_p95, p95_ms=percentile(turns["ms"], 0.95),
        replicas_recovered_s=recovery.replicas_recovered_s if recovery else None,
        recovery_time_s=recovery.service_recovered_s if recovery else None,
        error_rate_fault=float((~in_fault["ok"]).mean()) if len(in_fault) else None,
        load_end=float(finished.max()) if len(turns) else None)


@dataclass(frozen=True)
class ColdStartTrial:
    """One request sent with the service at zero replicas, split into phases by the target's events."""

    sent: float
    scheduled: float
    started: float
    ready: float
    first_token: float

    @property
    def total_s(self) -> float:
        return self.first_token - self.sent

    def phases(self) -> dict[str, float]:
        """schedule (sent -> scheduled), start (-> process started), model load (-> ready),
        first token (-> first token at the client); they add up to the total."""
        return {"schedule": self.scheduled - self.sent, "start": self.started - self.scheduled,
                "model_load": self.ready - self.started, "first_token": self.first_token - self.ready}


def cold_start_summary(trials: Sequence[ColdStartTrial]) -> dict[str, float]:
    """P50, P95, P99 and max of time to first token over the trials, in seconds."""
    totals = [trial.total_s for trial in trials]
    return {"trials": len(totals), "p50_s": percentile(totals, 0.50), "p95_s": percentile(totals, 0.95),
            "p99_s": percentile(totals, 0.99), "max_s": max(totals) if totals else math.nan}


def cold_start_phases(trials: Sequence[ColdStartTrial]) -> pd.DataFrame:
    """One row per trial, one column per phase (seconds), for the phase bar chart."""
    return pd.DataFrame([trial.phases() for trial in trials])


def degradation_ratio(during: float, baseline: float) -> float:
    """The victim's figure while the aggressor runs divided by its own baseline (nan without a baseline)."""
    if baseline is None or during is None or baseline <= 0 or math.isnan(baseline):
        return math.nan
    return during / baseline


@dataclass(frozen=True)
class RestoreFigures:
    rto_s: float | None
    rpo_turns: int
    rpo_s: float | None
    integrity: float


def restore_figures(disaster_at: float, healthy_with_data_at: float | None, last_backup_at: float | None,
                    acknowledged_before_disaster: int, acknowledged_after_restore: int,
                    sessions_checked: int, sessions_verified: int) -> RestoreFigures:
    """RTO: disaster to healthy with verified data (None if never). RPO: acknowledged turns lost,
    and the time from the last backup to the disaster. Integrity: share of restored sessions
    whose chain verifies (1.0 when there were none to check)."""
    return RestoreFigures(
        rto_s=None if healthy_with_data_at is None else healthy_with_data_at - disaster_at,
        rpo_turns=max(0, acknowledged_before_disaster - acknowledged_after_restore),
        rpo_s=None if last_backup_at is None else disaster_at - last_backup_at,
        integrity=sessions_verified / sessions_checked if sessions_checked else 1.0,
    )


NOT_MEASURED = "the run produced no value for it"


def check(name: str, value: float | None, comparison: str, threshold: float, unit: str = "",
          missing: str = "") -> SloCheck:
    """An SLO check; a value that could not be measured (None or nan) fails, and says why
    (missing: the reason, in words; a generic one when the caller has none)."""
    if value is not None and isinstance(value, float) and math.isnan(value):
        value = None
    note = (missing or NOT_MEASURED) if value is None else ""
    return SloCheck(name=name, comparison=comparison, threshold=threshold, value=value, unit=unit,  # type: ignore[arg-type]
                    note=note)


@dataclass(frozen=True)
class Judgement:
    """What a drill's judge (a pure function of what the run recorded) says: its SLO checks, in
    order, and, when nothing of the drill can be judged (a setup problem, a fault not seen to
    land), why: the verdict is then ERROR, whatever the checks say (drillbook.runbook.Run.keep)."""

    checks: tuple[SloCheck, ...]
    cannot_judge: str | None = None

    def failed(self) -> list[str]:
        return [judged.name for judged in self.checks if not judged.passed]
