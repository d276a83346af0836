"""What a finished run says about itself when a test or a person asks why."""

from __future__ import annotations

from pathlib import Path

from drillbook.execute import ExecutedRun


def test_explain_names_the_reason_every_failed_check_and_the_evidence():
    summary = {"verdict": "ERROR", "reason": "experiment ha-replica-loss ERROR: activity kill-replicas failed",
               "checks": [{"name": "acknowledged turns lost", "value": 0.0, "comparison": "<=", "threshold": 0.0,
                           "passed": True, "note": ""},
                          {"name": "service recovery time", "value": None, "comparison": "<=", "threshold": 10.0,
                           "passed": False, "note": "the fault was never injected"}]}
    text = ExecutedRun("ha-replica-loss", "ERROR", Path("/evidence/run-1"), summary).explain()
    assert text == ("ha-replica-loss ERROR: experiment ha-replica-loss ERROR: activity kill-replicas failed; "
                    "failed checks: service recovery time None <= 10.0 (the fault was never injected); "
                    "evidence in /evidence/run-1")


def test_explain_of_a_run_that_wrote_no_checks():
    text = ExecutedRun("restore-drill", "INTERRUPTED", Path("b"), {"verdict": "INTERRUPTED"}).explain()
    assert text == "restore-drill INTERRUPTED: no reason recorded; failed checks: none; evidence in b"
