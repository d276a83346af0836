"""The drills' judges, from recorded figures: no sandbox, and traps (total failure, a setup
problem, figures that were never measured) that must never pass."""

from __future__ import annotations

import math

import pytest

from drillbook.scenarios.cold_start.judge import judge_cold_start
from drillbook.scenarios.noisy_neighbour.judge import judge_noisy_neighbour, tenant_shares
from drillbook.scenarios.restore_drill.judge import judge_restore


# -- cold start ---------------------------------------------------------------------------------
def test_cold_start_passes_when_every_trial_completes_in_time_and_every_first_turn_is_stored():
    judged = judge_cold_start(3, 3, 3, 0, [], 1.2, 5.0)
    assert judged.failed() == [] and judged.cannot_judge is None


def test_cold_start_total_failure_fails_every_check_it_can():
    judged = judge_cold_start(3, 0, 0, None, [], math.nan, 5.0)
    assert judged.failed() == ["first turns from zero lost", "cold-start P95 time to first token",
                               "cold-start trials that did not complete"]
    by_name = {c.name: c for c in judged.checks}
    assert by_name["cold-start trials that did not complete"].value == 3  # a measured miss: FAIL, not ERROR
    assert by_name["cold-start P95 time to first token"].note == "no cold-start trial completed"


def test_cold_start_trials_that_never_asked_the_target_are_a_setup_problem_not_a_fail():
    judged = judge_cold_start(2, 0, 0, None, ["cold-start failed: no kubeconfig", "cold-start failed: again"],
                              math.nan, 5.0)
    assert judged.cannot_judge == "no cold-start trial could run: cold-start failed: no kubeconfig"
    # One trial that did ask is a measured trial: the rest is judged.
    assert judge_cold_start(2, 0, 0, None, ["cold-start failed: timeout"], math.nan, 5.0).cannot_judge is None


def test_cold_start_first_turns_without_receipts_cannot_pass_the_delivery_check():
    judged = judge_cold_start(3, 3, 2, 0, [], 1.0, 5.0)
    lost = judged.checks[0]
    assert not lost.passed and lost.value is None
    assert lost.note == "only 2 of 3 first turns were acknowledged with a receipt to audit"


def test_cold_start_one_trial_missing_fails_even_when_the_others_were_fast():
    judged = judge_cold_start(3, 2, 2, 0, [], 0.5, 5.0)
    assert judged.failed() == ["cold-start trials that did not complete"]


# -- restore --------------------------------------------------------------------------------------
RESTORED = {"rto_s": 3.5, "rpo_s": 0.4, "integrity": 1.0, "backup_created": True, "served": True}
BACKUP = {"created": True, "store_before": {"sessions_read": 4}, "backup": {"sessions": 4}}


def test_a_restore_within_its_targets_passes():
    assert judge_restore("PASS", [], BACKUP, RESTORED, 60.0, 30.0).failed() == []


def test_a_disaster_and_restore_that_did_nothing_cannot_pass():
    # The restore "succeeded", the store served, but the data was not there.
    measured = {**RESTORED, "integrity": 0.0, "missing_before_backup": {"turns": 12, "acknowledged": 12}}
    judged = judge_restore("FAIL", [], BACKUP, measured, 60.0, 30.0)
    assert judged.failed() == ["integrity of restored sessions"]


def test_no_backup_before_the_disaster_names_itself_on_every_unmeasured_figure():
    judged = judge_restore("FAIL", [], {"created": False}, {"backup_created": False}, 60.0, 30.0)
    assert judged.failed() == ["RTO", "RPO (data-loss window)", "integrity of restored sessions"]
    assert {c.note for c in judged.checks} == {"no backup was taken before the disaster"}


@pytest.mark.parametrize("backup, measured, reasons, said", [
    ({**BACKUP, "backup": {"sessions": 1}}, {"backup_created": True}, [], "the backup held 1 sessions; the store had 4"),
    (BACKUP, {"backup_created": True}, ["activity restore-the-latest-backup failed: exit 3"],
     "the restore failed: exit 3"),
    (BACKUP, {}, [], "the restore experiment ended ERROR before it measured anything"),
    (BACKUP, {"backup_created": True, "served": False}, [], "the store did not serve again within restore_timeout_s"),
])
def test_why_a_restore_figure_is_missing_is_told_apart(backup, measured, reasons, said):
    judged = judge_restore("ERROR", reasons, backup, measured, 60.0, 30.0)
    assert judged.checks[0].note == said


# -- noisy neighbour ------------------------------------------------------------------------------
def test_the_noisy_neighbour_judge_holds_the_ratio_and_the_error_rate():
    fair = {"victim_p95_ratio": 1.3, "victim_error_rate": 0.0}
    assert judge_noisy_neighbour("PASS", fair, 3.0, 0.01).failed() == []
    starved = {"victim_p95_ratio": 7.4, "victim_error_rate": 0.0}
    assert judge_noisy_neighbour("FAIL", starved, 3.0, 0.01).failed() == ["victim p95 ratio (burst over own baseline)"]


def test_a_victim_never_measured_cannot_pass():
    judged = judge_noisy_neighbour("ERROR", {}, 3.0, 0.01)
    assert len(judged.failed()) == 2
    assert {c.note for c in judged.checks} == {"the noisy-neighbour experiment ended ERROR before it measured the victim"}


def test_tenant_shares_come_from_the_counters_between_two_readings():
    before = {"tenant-a": {"gpu_seconds": 10.0, "queue_wait_sum": 1.0, "queue_wait_count": 10}}
    after = {"tenant-a": {"gpu_seconds": 12.0, "queue_wait_sum": 1.5, "queue_wait_count": 20},
             "tenant-b": {"gpu_seconds": 6.0, "queue_wait_sum": 4.0, "queue_wait_count": 8}}  # new since `before`
    shares, waits = tenant_shares(before, after)
    assert shares == {"tenant-a": 0.25, "tenant-b": 0.75}
    assert waits == {"tenant-a": 0.05, "tenant-b": 0.5}
    assert tenant_shares({}, {}) == ({}, {})
