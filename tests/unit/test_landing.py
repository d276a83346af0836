"""A fault must be seen to land, and a figure must come from what was seen: the pure functions
over recorded readings, fed the traps that gave false PASSes (a reading that spans the kill,
readiness that flaps, a fault that never lands, readings out of order, none, one; a flood whose
counters are an earlier run's, or that the tier absorbs without a queue)."""

from __future__ import annotations

from drillbook.evidence.summary import RunSummary, SloCheck
from drillbook.measure import (contention, flood_held_through, flood_landing, kill_landing, load_needed_after_fault,
                               recovered_at, scale_down_landing, still_down_at, store_loss_landing)
from drillbook.observation import ReplicaObservation as R
from drillbook.observation import StoreObservation as S
from drillbook.observation import TierObservation as T

KILL = 100.0


def full(started: float, ids: tuple[str, ...] = ("a@1", "b@2"), took: float = 0.05) -> R:
    return R(started, started + took, desired=2, ready=2, ids=ids)


def short(started: float, took: float = 0.05) -> R:
    return R(started, started + took, desired=2, ready=1, ids=("b@2",))


def test_a_reading_that_began_before_the_kill_is_no_evidence_that_it_landed():
    before = full(99.0)
    # began before the kill, answered after it: it describes the world before
    assert not kill_landing(before, [short(99.9, took=0.5)], KILL).landed
    landing = kill_landing(before, [short(99.9, took=0.5), short(100.2)], KILL)
    assert landing.landed and landing.at == 100.25


def test_a_kill_that_changes_nothing_never_lands():
    before = full(99.0)
    readings = [full(100.0 + i * 0.1) for i in range(20)]
    landing = kill_landing(before, readings, KILL)
    assert not landing.landed and landing.at is None
    assert "20 readings after the kill all showed 2 of 2 ready with the same replicas" == landing.seen
    assert not kill_landing(before, [], KILL).landed


def test_a_replica_back_at_once_is_seen_by_its_new_identity():
    before = full(99.0)
    landing = kill_landing(before, [full(100.1), full(100.4, ids=("a@7", "b@2"))], KILL)
    assert landing.landed and landing.at == 100.45 and "a@1" in landing.seen


def test_unanswered_readings_prove_nothing():
    failed = R(100.1, 100.2, error="TargetUnreachable: status timed out")
    assert not kill_landing(full(99.0), [failed], KILL).landed


def watched(reading: R, answering: tuple[str, ...] | None) -> R:
    """The reading with the watched replicas' addresses probed (the pod uids here stand for pods)."""
    return R(reading.started, reading.ended, reading.desired, reading.ready, reading.ids, answering=answering)


def test_a_force_deleted_pod_whose_process_serves_on_was_not_killed():
    # The API lists a new replica in place of a@1 at once, but a@1's address answers throughout.
    before = watched(full(99.0), ("a@1", "b@2"))
    readings = [watched(full(100.0 + i * 0.1, ids=("a@7", "b@2")), ("a@1", "b@2")) for i in range(10)]
    landing = kill_landing(before, readings, KILL)
    assert not landing.landed and landing.at is None
    assert landing.seen == ("replica a@1 no longer among the ready, but all 2 replica addresses watched across "
                            "the kill still answered in all 10 probed readings after it: no process was seen to stop")
    # Readings whose probe could not run (the addresses unknown) are not said to have answered.
    unprobed = [full(100.0 + i * 0.1, ids=("a@7", "b@2")) for i in range(3)]
    assert kill_landing(before, unprobed, KILL).seen.endswith(
        "none of the 2 replica addresses watched across the kill could be probed after it: no process was seen to stop")


def test_a_kill_lands_when_the_platform_and_the_address_both_say_so_at_the_later_reading():
    before = watched(full(99.0), ("a@1", "b@2"))
    readings = [watched(short(100.1), ("a@1", "b@2")),  # the API saw it first; the process still served
                watched(short(100.3), ("b@2",))]
    landing = kill_landing(before, readings, KILL)
    assert landing.landed and landing.at == 100.35
    assert landing.seen == "1 of 2 ready; replica a@1 stopped answering at its address"
    # and the other way round: the address went quiet before the platform's own readings showed it
    quiet_first = [watched(full(100.1), ("b@2",)), watched(short(100.3), ("b@2",))]
    assert kill_landing(before, quiet_first, KILL).at == 100.35


def test_an_address_that_went_quiet_before_the_kill_or_was_never_probed_is_no_evidence():
    before = watched(full(99.0), ("a@1", "b@2"))
    began_before = [watched(short(99.9, took=0.5), ("b@2",))]
    assert not kill_landing(before, began_before, KILL).landed
    unprobed = [short(100.2)]  # answering None: nothing was asked, so nothing stopped answering
    assert not kill_landing(before, unprobed, KILL).landed
    # Replicas that never answered from here (drillbook outside the pod network): the platform's word.
    unreachable = watched(full(99.0), ())
    assert kill_landing(unreachable, [watched(short(100.2), ())], KILL).landed
    # Readings kept before addresses were probed (answering None throughout) judge as they did.
    assert kill_landing(full(99.0), [short(100.2)], KILL).at == 100.25


def test_a_probed_reading_says_which_watched_replicas_answer_and_an_address_given_again_is_not_theirs():
    import socket

    with socket.socket() as listening, socket.socket() as closed:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        serving = "127.0.0.1:%d" % listening.getsockname()[1]
        gone = "127.0.0.1:%d" % closed.getsockname()[1]
        reading = full(100.0)
        probed = reading.probed({"a@1": serving, "b@2": gone}, held={"b@2": gone})
        assert probed.answering == ("a@1",) and probed.started == 100.0 and probed.ended > reading.ended
        # a@1's address now belongs to a new pod (a@7): it answers for a@7, not for a@1
        assert reading.probed({"a@1": serving}, held={"a@7": serving}).answering == ()
        assert R.from_json(probed.to_json()) == probed and R.from_json(reading.to_json()).answering is None


def test_recovery_counts_only_readings_that_began_after_the_landing():
    # The trap of the false PASS: a reading that began before the kill landed says "ready".
    landed_at = 100.3
    readings = [full(100.0, took=0.4), short(100.35), short(101.0), full(104.0), full(104.25), full(104.5)]
    assert recovered_at(readings, landed_at, sustain=3) == 104.05
    assert recovered_at(readings, None, sustain=3) is None


def test_replicas_still_down_after_the_limit_are_seen_only_in_answered_readings_begun_after_it():
    limit = KILL + 5.0
    # a reading that began before the limit and answered after it describes the world before it
    assert still_down_at([short(104.9, took=0.4)], limit) is None
    # a reading that got no answer says nothing about readiness, whatever it counts as elsewhere
    assert still_down_at([R(105.5, 105.6, error="ReadTimeout")], limit) is None
    assert still_down_at([full(105.5), full(106.0)], limit) is None
    # the latest one that saw a replica missing, by when it began, in any order
    assert still_down_at([short(106.5), short(105.0), full(107.0), short(105.5)], limit) == 106.5
    assert still_down_at([], limit) is None


def test_recovery_must_hold_for_the_sustained_readings_flapping_does_not_count():
    readings = [short(100.5), full(101.0), short(101.25), full(101.5), full(101.75), short(102.0),
                full(103.0), full(103.25), full(103.5)]
    assert recovered_at(readings, 100.4, sustain=3) == 103.05


def test_recovery_is_never_early_whatever_the_order_readings_arrive_in():
    readings = [full(104.5), short(100.35), full(104.0), full(104.25)]
    assert recovered_at(readings, 100.3, sustain=3) == 104.05
    assert recovered_at([], 100.3) is None
    assert recovered_at([full(104.0)], 100.3, sustain=3) is None
    assert recovered_at([full(104.0)], 100.3, sustain=1) == 104.05


def test_a_recovery_is_late_by_at_most_one_interval_never_early():
    """Replicas truly back at 103.6; readings every 0.25 s: the figure is within one interval after."""
    truth, interval = 103.6, 0.25
    readings = [(short if 100.0 + i * interval + 0.05 <= truth else full)(100.0 + i * interval) for i in range(40)]
    seen = recovered_at(readings, 100.3, sustain=1)
    assert seen is not None and truth <= seen <= truth + interval + 0.05


def test_a_destroyed_store_is_seen_unhealthy_or_missing_sessions():
    assert store_loss_landing([S(100.1, 100.2, healthy=False, error="gone")], KILL).landed
    assert store_loss_landing([S(100.1, 100.2, True, sessions_read=1, sessions_known=3)], KILL).landed
    still = [S(100.0 + i * 0.1, 100.05 + i * 0.1, True, sessions_read=3, sessions_known=3) for i in range(10)]
    nothing = store_loss_landing(still, KILL)
    assert not nothing.landed and "all found the store healthy with 3 of 3 known sessions read back" in nothing.seen
    # a reading that began before the disaster never counts
    assert not store_loss_landing([S(99.9, 100.2, healthy=False)], KILL).landed


def test_load_after_the_landing_must_cover_a_recovery_and_its_hold():
    assert load_needed_after_fault(110.0, 100.0, max_recovery_s=10.0, hold_s=2.0) == 2.0
    assert load_needed_after_fault(115.0, 100.0, max_recovery_s=10.0, hold_s=2.0) == 0.0
    assert load_needed_after_fault(None, 100.0, max_recovery_s=10.0, hold_s=2.0) == 12.0
    assert load_needed_after_fault(115.0, None, max_recovery_s=10.0, hold_s=2.0) is None


def test_a_run_that_cannot_be_judged_is_error_whatever_its_checks_say():
    passing = [SloCheck(name="lost", comparison="<=", threshold=0, value=0)]
    failing = [SloCheck(name="recovery", comparison="<=", threshold=5, value=9.4)]
    why = "fault did not take effect: SIGKILL sent to 1 agent replica(s); observed 20 readings ..."
    for checks in (passing, failing):
        summary = RunSummary.judge("ha-replica-loss", "ha", {}, checks, unjudgeable=[why])
        assert summary.verdict == "ERROR" and summary.reason == why
    assert RunSummary.judge("ha-replica-loss", "ha", {}, failing).verdict == "FAIL"


def test_a_scale_to_zero_is_seen_only_in_a_reading_begun_after_it():
    zero = R(100.2, 100.3, desired=0, ready=0)
    assert scale_down_landing([R(99.9, 100.3, desired=0, ready=0), zero], KILL, 0).at == 100.3
    assert not scale_down_landing([R(99.9, 100.3, desired=0, ready=0)], KILL, 0).landed
    still = scale_down_landing([R(100.1 + i, 100.2 + i, desired=0, ready=1) for i in range(3)], KILL, 0)
    assert not still.landed and still.seen == "3 readings after the scale, the last with 1 ready"


def test_a_scale_to_zero_lands_only_once_no_replica_is_still_stopping():
    # A stopping pod is not ready, yet it still holds its node's CPU and GPU: a start measured
    # beside it would time a wait for those. Zero is seen when nothing is left.
    stopping = [R(100.1, 100.2, desired=0, ready=0, stopping=2), R(100.4, 100.5, desired=0, ready=0, stopping=1)]
    not_yet = scale_down_landing(stopping, KILL, 0)
    assert not not_yet.landed and not_yet.seen == "2 readings after the scale, the last with 0 ready and 1 still stopping"
    gone = R(100.8, 100.9, desired=0, ready=0)
    assert scale_down_landing([*stopping, gone], KILL, 0).at == 100.9
    # a reading kept before this field existed reads as nothing stopping
    assert R.from_json({"started": 1.0, "ended": 2.0, "desired": 0, "ready": 0, "ids": []}).stopping == 0


def tier(started: float, aggressor: tuple[float, float, float] | None = None, victim: float = 0.0,
         error: str = "") -> T:
    """A reading of the shared tier: the aggressor's (slot-seconds held, seconds waited, chunks)
    so far, and the victim's slot-seconds (its waits counted too, never the aggressor's)."""
    usage = {"tenant-a": {"gpu_seconds": victim, "queue_wait_sum": 10 * victim, "queue_wait_count": 100 * victim}}
    if aggressor is not None:
        held, waited, chunks = aggressor
        usage["tenant-b"] = {"gpu_seconds": held, "queue_wait_sum": waited, "queue_wait_count": chunks}
    return T(started, started + 0.05, {} if error else usage, error)


def test_a_flood_lands_only_where_the_tier_queues_for_it_between_two_readings_after_the_call():
    # the counters of a flood from an earlier run, read before this call, are no evidence of this one
    assert not flood_landing([tier(99.0, (50, 150, 2000)), tier(100.1, (50, 150, 2000))], KILL, "tenant-a").landed
    # replicas ready and an aggressor that sends, on a tier with slots to spare: no queue, no flood
    idle = [tier(100.0 + i / 4, (0.5 * i, 0.01 * i, 25 * i)) for i in range(1, 6)]
    absorbed = flood_landing(idle, KILL, "tenant-a")
    assert not absorbed.landed and "waited 0.02 of their own slot holds each (1 needed)" in absorbed.seen
    # the victim queueing behind its own traffic is not the aggressor's flood
    alone = [tier(100.1 + i, victim=float(i)) for i in range(4)]
    assert "held no slot" in flood_landing(alone, KILL, "tenant-a").seen
    # a tier that shows no tenant at all (its /metrics summed for whoever lacks its token) says so
    hidden = flood_landing([T(100.1 + i, 100.15 + i, {}) for i in range(3)], KILL, "tenant-a")
    assert not hidden.landed and "none with a tenant in it" in hidden.seen and "metrics_token_env" in hidden.seen
    # the flood arrives: between the 3rd and 4th reading its chunks waited 3 holds each
    arriving = [tier(100.1, (0, 0, 0)), tier(100.4, (0.1, 0.0, 5)), tier(100.7, (0.2, 0.05, 10)),
                tier(101.0, (1.0, 2.45, 50))]
    landed = flood_landing(arriving, KILL, "tenant-a")
    assert landed.landed and landed.at == 101.05 and "waited 3.00 of their own slot holds each" in landed.seen
    # one reading after the call is not a change; a failed one is said
    assert flood_landing([tier(100.1, (1, 3, 50))], KILL, "tenant-a").seen == \
        "1 answered readings of the shared tier after the call"
    failed = flood_landing([tier(100.1, (1, 3, 50)), tier(100.4, error="ConnectError: refused")], KILL, "tenant-a")
    assert not failed.landed and failed.seen.endswith("the last failed: ConnectError: refused")


def test_counters_that_went_back_are_no_change_at_all():
    # a model replica restarted (or one answered in one reading only): its counters began again
    restarted = [tier(100.1, (40, 120, 1600)), tier(100.4, (0.2, 0.6, 8))]
    assert contention(*restarted, "tenant-a") is None
    assert not flood_landing(restarted, KILL, "tenant-a").landed
    # a reading that began before the earlier one ended spans it: no interval between them
    assert contention(tier(100.4), tier(100.42), "tenant-a") is None
    held = contention(tier(100.1, (1, 1, 40)), tier(105.1, (9, 25, 440), victim=3.0), "tenant-a")
    assert held is not None and (held.held_s, held.waited_s, held.chunks) == (8, 24, 400)
    assert held.oversubscription == 3.0 and (round(held.since, 6), held.until) == (100.15, 105.1)
    assert contention(tier(100.1, (1, 1, 40)), tier(101.1, (1, 1, 40)), "tenant-a").oversubscription is None


def test_a_flood_holds_through_a_window_only_if_it_queued_over_it_and_still_at_its_end():
    landed = tier(101.0, (1, 3, 50))
    through = [tier(106.0, (21, 63, 1050)), tier(106.3, (22.2, 66.6, 1110))]
    held, whole = flood_held_through(landed, through, "tenant-a")
    assert whole is not None and whole.oversubscription == 3.0 and whole.until == 106.0
    assert held.landed and held.at == 106.35 and "waited 3.00 of their own slot holds each" in held.seen
    # stopped a second into the window: its average over the window still says 3 holds, its end says none
    stopped = [tier(106.0, (5, 15, 250)), tier(106.3, (5, 15, 250))]
    gone, whole = flood_held_through(landed, stopped, "tenant-a")
    assert whole is not None and whole.oversubscription == 3.0
    assert not gone.landed and gone.seen.startswith("at its end, the other tenants held no slot")
    # absorbed over the window: 0.1 of a hold each is no queue for isolation to protect
    thin, _ = flood_held_through(landed, [tier(106.0, (21, 5, 1050)), tier(106.3, (22.2, 8.6, 1110))], "tenant-a")
    assert not thin.landed and thin.seen.startswith("over the window,") and "(1 needed)" in thin.seen
    # a model replica restarted in the window, or the end reading failed: no change to judge
    back, whole = flood_held_through(landed, [tier(106.0, (0.5, 1, 20)), through[1]], "tenant-a")
    assert "went back" in back.seen and whole is None
    failed, _ = flood_held_through(landed, [through[0], tier(106.3, error="ReadTimeout")], "tenant-a")
    assert not failed.landed and failed.seen == "no change at its end: ReadTimeout"
    assert flood_held_through(landed, through[:1], "tenant-a")[0].seen.endswith("(2 needed)")
