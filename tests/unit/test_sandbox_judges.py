"""The code-sandbox drills' judges, fed traps: samples that began before the event they would
measure, kills that did not land, targets that do not answer from outside, total failure."""

from __future__ import annotations

from drillbook.scenarios.sandbox_claim_burst.judge import burst_figures, judge_burst, refill_seconds
from drillbook.scenarios.sandbox_isolation.judge import isolation_figures, judge_isolation
from drillbook.scenarios.sandbox_loss.judge import Kill, files_lost, judge_loss, loss_figures, recovery_seconds


def call(session: str, started: float, ended: float, ok: bool = True, op: str = "run", **more: object) -> dict:
    return {"op": op, "session": session, "started": started, "ended": ended, "ok": ok,
            "seconds": ended - started, **more}


def verdict(judgement) -> str:
    if judgement.cannot_judge:
        return "ERROR"
    return "PASS" if all(c.passed for c in judgement.checks) else "FAIL"


# -- sandbox loss ---------------------------------------------------------------------------------

def test_a_run_that_began_before_the_kill_landed_is_no_recovery_however_it_ended():
    kill = Kill("sandbox", asked=10.0, landed=10.5, sessions=("s",))
    calls = [call("s", 10.4, 10.6),  # began before the landing (ended after it): not a recovery
             call("s", 10.7, 11.0, ok=False, status=410),
             call("s", 11.2, 12.0)]
    assert recovery_seconds(kill, calls, "s") == 12.0 - 10.5


def test_a_kill_not_seen_to_land_has_no_recovery_and_makes_the_drill_an_error():
    kill = Kill("sandbox", asked=10.0, landed=None, sessions=())
    assert recovery_seconds(kill, [call("s", 11.0, 11.1)], "s") is None
    figures = loss_figures([kill], [call("s", 11.0, 11.1)], {"s": {"a": "1"}}, {"s": {"a": "1"}}, 0)
    judged = judge_loss(figures, 10.0)
    assert verdict(judged) == "ERROR" and "not seen to land" in judged.cannot_judge


def test_files_missing_or_changed_are_lost_and_fail_the_drill():
    expected = {"s": {"a": "1", "b": "2", "c": "3"}, "t": {"a": "9"}}
    assert files_lost(expected, {"s": {"a": "1", "b": "changed"}, "t": None}) == 3
    kill = Kill("sandbox", 1.0, 1.1, ("s",))
    figures = loss_figures([kill], [call("s", 1.2, 1.3)], expected, {"s": {"a": "1", "b": "changed"}, "t": None}, 0)
    assert verdict(judge_loss(figures, 10.0)) == "FAIL"
    assert [c.name for c in judge_loss(figures, 10.0).checks if not c.passed] == ["files lost with their sandbox"]


def test_a_session_that_never_works_again_fails_and_total_failure_cannot_pass():
    kill = Kill("service", 1.0, 1.1, ("s", "t"))
    nothing_worked = [call("s", 1.2, 1.3, ok=False, status=502), call("t", 1.2, 1.3, ok=False, status=502)]
    figures = loss_figures([kill], nothing_worked, {"s": {"a": "1"}}, {"s": None}, 0)
    judged = judge_loss(figures, 10.0)
    assert verdict(judged) == "FAIL" and figures.not_recovered == 2 and figures.recreate_p95_s is None
    assert figures.files_lost == 1


def test_a_drill_that_wrote_nothing_cannot_be_judged():
    figures = loss_figures([Kill("sandbox", 1.0, 1.1, ("s",))], [call("s", 1.2, 1.3)], {}, {}, 0)
    assert verdict(judge_loss(figures, 10.0)) == "ERROR"


def test_recovered_sessions_with_their_files_pass():
    kills = [Kill("sandbox", 1.0, 1.1, ("s",)), Kill("service", 5.0, 5.2, ("s", "t"))]
    calls = [call("s", 1.2, 1.4), call("s", 5.3, 6.0), call("t", 5.3, 7.2)]
    expected = {"s": {"a": "1"}, "t": {"b": "2"}}
    figures = loss_figures(kills, calls, expected, {"s": {"a": "1"}, "t": {"b": "2", "extra": "3"}}, 0)
    assert verdict(judge_loss(figures, 10.0)) == "PASS"
    assert figures.recoveries == [1.4 - 1.1, 6.0 - 5.2, 7.2 - 5.2]
    stuck = loss_figures(kills, calls, expected, {"s": {"a": "1"}, "t": {"b": "2"}}, stuck_claims=1)
    assert verdict(judge_loss(stuck, 10.0)) == "FAIL"


# -- claim burst ----------------------------------------------------------------------------------

def test_a_pool_reading_taken_before_the_burst_ended_is_not_its_refill():
    readings = [{"at": 9.0, "warm": 10}, {"at": 10.4, "warm": 10},  # before the burst's last answer
                {"at": 10.6, "warm": 3}, {"at": 12.5, "warm": 10}]
    assert refill_seconds(readings, burst_ended=10.5, size=10) == 2.0
    assert refill_seconds(readings[:3], burst_ended=10.5, size=10) is None


def test_a_burst_within_the_warm_pool_cannot_be_judged():
    claims = [call(f"s{i}", 1.0, 1.01, op="claim", warm=True) for i in range(4)]
    figures = burst_figures(claims, [{"at": 2.0, "warm": 4}], warm_before=4, pool_size=4, working=[])
    assert verdict(judge_burst(figures, 1.0, 1.0, 5.0, 0, 30.0)) == "ERROR"


def test_claims_beyond_the_pool_pass_when_one_is_cold_and_fail_when_all_are():
    warm = [call(f"s{i}", 1.0, 1.02, op="claim", warm=True) for i in range(10)]
    one_cold = [*warm, call("cold", 1.0, 3.0, op="claim", warm=False)]
    figures = burst_figures(one_cold, [{"at": 6.0, "warm": 10}], warm_before=10, pool_size=10, working=[])
    assert verdict(judge_burst(figures, 1.0, 1.0, 5.0, 0, 30.0)) == "PASS" and figures.cold == 1
    all_cold = [call(f"s{i}", 1.0, 1.0 + (i // 2 + 1), op="claim", warm=False) for i in range(11)]
    figures = burst_figures(all_cold, [], warm_before=0, pool_size=10, working=[])
    failed = [c.name for c in judge_burst(figures, 1.0, 1.0, 5.0, 0, 30.0).checks if not c.passed]
    assert failed == ["claim latency p50", "claim latency p90", "claim latency p99", "pool refill"]


def test_no_claim_answered_is_a_failure_not_a_pass():
    claims = [call(f"s{i}", 1.0, 1.5, ok=False, op="claim", status=503) for i in range(5)]
    figures = burst_figures(claims, [{"at": 2.0, "warm": 4}], warm_before=4, pool_size=4, working=[])
    judged = judge_burst(figures, 1.0, 1.0, 5.0, 0, 30.0)
    assert verdict(judged) == "FAIL" and figures.failed == 5 and figures.p(0.5) is None


# -- isolation ------------------------------------------------------------------------------------

def attempt(name: str, outcome: str, kind: str = "tcp") -> dict:
    return {"probe": name, "kind": kind, "outcome": outcome, "started": 1.0, "ended": 1.1}


def test_each_escape_that_worked_is_named_in_the_failures():
    attempts = [attempt("gateway", "escaped"), attempt("store", "refused"), attempt("memory", "escaped", "exhaust")]
    figures = isolation_figures(attempts, set(), True, [0.02] * 5, [0.03] * 5, None, None)
    judged = judge_isolation(figures, planned=3, max_neighbour_slowdown=5.0, claimed=True)
    assert verdict(judged) == "FAIL"
    assert [c.name for c in judged.checks if not c.passed] == ["escape: gateway", "escape: memory", "escapes that worked"]


def test_a_refusal_by_a_target_that_answers_nobody_proves_nothing():
    attempts = [attempt("gateway", "refused"), attempt("model", "refused")]
    figures = isolation_figures(attempts, {"model"}, True, [0.02], [0.02], None, None)
    judged = judge_isolation(figures, planned=2, max_neighbour_slowdown=5.0, claimed=True)
    assert verdict(judged) == "ERROR" and "model" in judged.cannot_judge


def test_probes_that_did_not_all_report_cannot_pass():
    figures = isolation_figures([attempt("gateway", "refused")], set(), True, [0.02], [0.02], None, None)
    assert verdict(judge_isolation(figures, planned=19, max_neighbour_slowdown=5.0, claimed=True)) == "ERROR"
    nothing = isolation_figures([], set(), True, [], [], None, None)
    assert verdict(judge_isolation(nothing, planned=19, max_neighbour_slowdown=5.0, claimed=True)) == "ERROR"


def test_limits_the_platform_cannot_enforce_are_said_so_not_hidden():
    attempts = [attempt("gateway", "refused"), attempt("memory", "escaped", "exhaust")]
    figures = isolation_figures(attempts, set(), limits_enforced=False, neighbour_before_s=[0.02],
                                neighbour_during_s=[0.03], hog_started=None, hog_ended=None)
    judged = judge_isolation(figures, planned=2, max_neighbour_slowdown=5.0, claimed=True)
    assert figures.not_enforced == ["memory"] and figures.escaped == []
    summary = next(c for c in judged.checks if c.name == "escapes that worked")
    assert "not enforced on this platform: memory" in summary.note


def test_a_neighbour_run_that_began_before_the_hog_is_not_counted_as_during_it():
    before = [0.020] * 8
    during = [0.500, 0.030, 0.030, 0.030]
    spans = [(9.5, 10.0), (10.1, 10.13), (10.2, 10.23), (10.3, 10.33)]  # the slow one began before the hog
    figures = isolation_figures([attempt("CPU", "refused", "exhaust")], set(), True, before, during,
                                hog_started=10.0, hog_ended=14.0, neighbour_runs=spans)
    assert round(figures.neighbour_slowdown, 2) == 1.5
    starved = isolation_figures([attempt("CPU", "refused", "exhaust")], set(), True, before, [], 10.0, 14.0, [])
    judged = judge_isolation(starved, planned=1, max_neighbour_slowdown=5.0, claimed=True)
    assert verdict(judged) == "FAIL"  # a neighbour that never ran during the hog is not within budget
