"""Judging the HA drill's recovery, from what the run saw: a pure function a test can feed traps.

The service recovery time is stated one of three ways: measured (the service was seen back at
its baseline), as a lower bound (it was seen still down, or not back, at a moment after the kill),
or not at all: the run was too short to tell, and the reason names the duration that would.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from drillbook.measure import load_needed_after_fault, still_down_at
from drillbook.observation import ReplicaObservation


@dataclass(frozen=True)
class Recovery:
    """The recovery figure the run can state, and why there is none when it cannot."""

    seconds: float | None
    lower_bound: bool = False  # the service cannot have been back sooner; the true figure may be larger
    too_short: str | None = None  # the run could not judge recovery: what it saw, and the duration it needs
    missing: str = ""  # why there is no figure, in words an on-call engineer can act on


def recovery_missing(ready_at: float | None, after_kill: float | None) -> str:
    """Why no recovery time could be measured, in words an on-call engineer can act on."""
    seen = f"the load ended {after_kill:.1f}s after the kill" if after_kill is not None else "no turn completed"
    if ready_at is None:
        return f"the killed replicas were not seen ready again: {seen}"
    return f"the service was not seen back at its baseline latency before the end: {seen}"


def judge_recovery(measured_s: float | None, fault_at: float | None, landed_at: float | None,
                   ready_at: float | None, load_end: float | None, readings: Sequence[ReplicaObservation],
                   max_recovery_s: float, hold_s: float, duration_s: float) -> Recovery:
    """The service recovery time from the run's figures (measured_s: back at baseline latency,
    from the kill), the kill (fault_at) and when it was seen to land (landed_at, None: not seen),
    when the killed replicas were ready again (ready_at), when the load ended, and the replica
    readings (each stamped with when it began)."""
    after_kill = load_end - fault_at if fault_at and load_end is not None else None
    missing = ("the fault was never injected (see the experiment's journal)" if not fault_at
               else recovery_missing(ready_at, after_kill))
    if measured_s is not None or not fault_at or landed_at is None:
        return Recovery(measured_s, missing=missing)
    short = load_needed_after_fault(load_end, landed_at, max_recovery_s, hold_s) or 0.0
    if ready_at is not None and ready_at - fault_at > max_recovery_s:
        return Recovery(ready_at - fault_at, lower_bound=True)  # the service cannot be back before its replicas
    if short > 0 and (down := still_down_at(readings, fault_at + max_recovery_s)) is not None:
        return Recovery(down - fault_at, lower_bound=True)  # a reading after the limit saw replicas missing
    if short > 0:
        seen = (load_end - landed_at) if load_end is not None else 0.0
        return Recovery(None, too_short=f"run too short to judge recovery: load ran {seen:.1f}s after the kill; "
                                        f"use duration_s >= {math.ceil(duration_s + short)}", missing=missing)
    if ready_at is None and load_end is not None:
        return Recovery(load_end - fault_at, lower_bound=True)  # not back in all the load after the kill
    return Recovery(None, missing=missing)


__all__ = ["Recovery", "judge_recovery", "recovery_missing"]
