"""The HA drill's recovery judgement, from recorded observations: no sandbox, traps included.

The kill is at t=100, seen to land at t=101; the limit is 10 s held for 2 s (HOLD), so a run
needs load until t=113 after the landing to judge a recovery it did not see.
"""

from drillbook.observation import ReplicaObservation
from drillbook.scenarios.ha_replica_loss.judge import judge_recovery

FAULT, LANDED, LIMIT, HOLD, DURATION = 100.0, 101.0, 10.0, 2.0, 16.0


def reading(started: float, ready: int, desired: int = 2, error: str = "") -> ReplicaObservation:
    return ReplicaObservation(started, started + 0.05, desired, ready, error=error)


def judge(measured=None, fault_at=FAULT, landed_at=LANDED, ready_at=None, load_end=None, readings=()):
    return judge_recovery(measured, fault_at, landed_at, ready_at, load_end, list(readings), LIMIT, HOLD, DURATION)


def test_a_measured_recovery_is_stated_as_measured():
    recovery = judge(measured=4.2, ready_at=103.0, load_end=130.0)
    assert (recovery.seconds, recovery.lower_bound, recovery.too_short) == (4.2, False, None)


def test_a_fault_never_injected_has_no_figure_and_says_so():
    recovery = judge(fault_at=None, landed_at=None, load_end=130.0)
    assert recovery.seconds is None and not recovery.lower_bound and recovery.too_short is None
    assert "never injected" in recovery.missing


def test_a_kill_not_seen_to_land_is_not_judged_here():
    recovery = judge(landed_at=None, load_end=130.0)  # the run is ERROR already (FaultNotLanded)
    assert recovery.seconds is None and recovery.too_short is None and "not seen ready" in recovery.missing


def test_replicas_back_only_after_the_limit_are_a_lower_bound_that_fails():
    recovery = judge(ready_at=FAULT + 14.0, load_end=FAULT + 30.0)
    assert recovery.seconds == 14.0 and recovery.lower_bound and recovery.seconds > LIMIT


def test_a_short_run_that_saw_replicas_still_down_after_the_limit_fails_with_a_lower_bound():
    readings = [reading(FAULT + 5.0, 1), reading(FAULT + 10.5, 1), reading(FAULT + 11.0, 1, error="timeout")]
    recovery = judge(load_end=FAULT + 8.0, readings=readings)
    assert recovery.seconds == 10.5 and recovery.lower_bound and recovery.too_short is None


def test_a_reading_that_began_before_the_limit_is_no_evidence_of_a_miss():
    # The trap: a reading that began before fault + limit and ended after it says nothing about the limit.
    readings = [ReplicaObservation(FAULT + 9.0, FAULT + 11.0, 2, 1)]
    recovery = judge(load_end=FAULT + 8.0, readings=readings)
    assert recovery.seconds is None and recovery.too_short is not None


def test_a_short_run_with_nothing_seen_after_the_limit_cannot_judge_and_names_the_duration():
    recovery = judge(load_end=FAULT + 8.0, readings=[reading(FAULT + 3.0, 1)])
    assert recovery.seconds is None and not recovery.lower_bound
    assert recovery.too_short.startswith("run too short to judge recovery: load ran 7.0s after the kill")
    assert recovery.too_short.endswith("use duration_s >= 21")  # 16 + (10 + 2 - 7)


def test_replicas_never_back_through_a_long_enough_load_are_a_lower_bound_of_the_whole_load():
    recovery = judge(ready_at=None, load_end=FAULT + 20.0)
    assert recovery.seconds == 20.0 and recovery.lower_bound


def test_replicas_back_in_time_but_latency_never_settled_has_no_figure():
    recovery = judge(ready_at=FAULT + 3.0, load_end=FAULT + 20.0)
    assert recovery.seconds is None and recovery.too_short is None
    assert "not seen back at its baseline latency" in recovery.missing and "20.0s after the kill" in recovery.missing
