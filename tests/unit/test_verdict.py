"""A chaos journal's verdict and the reasons given for it."""

from __future__ import annotations

from drillbook.chaos.runner import verdict_of


def state(met: bool, **probes: bool) -> dict:
    return {"steady_state_met": met,
            "probes": [{"activity": {"name": name}, "tolerance_met": ok} for name, ok in probes.items()]}


def test_a_steady_state_missed_before_the_fault_is_an_error_naming_the_probe():
    journal = {"status": "failed", "steady_states": {"before": state(False, **{"all-replicas-ready": True,
                                                                              "client-errors-within-budget": False})}}
    assert verdict_of(journal) == ("ERROR", ["steady state not met before the fault (probe client-errors-within-budget "
                                             "missed its tolerance): nothing was judged"])


def test_a_probe_missed_after_the_fault_fails_the_experiment_and_is_named():
    journal = {"status": "completed", "deviated": True,
               "steady_states": {"before": state(True, ready=True, budget=True),
                                 "after": state(False, ready=True, budget=False)}}
    assert verdict_of(journal) == ("FAIL", ["probe budget missed its tolerance after the fault"])


def test_every_probe_held_passes():
    journal = {"status": "completed", "steady_states": {"before": state(True, ready=True),
                                                        "after": state(True, ready=True)}}
    assert verdict_of(journal) == ("PASS", [])
