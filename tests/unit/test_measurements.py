"""A run's context hands providers one set of values: measurements from many threads are all kept,
journalled as they are made, and written once at the end."""

from __future__ import annotations

import json
import threading

import pytest

from drillbook.chaos.context import AFTER, BEFORE, METHOD, ContextError, RunContext
from drillbook.chaos.ledger import FaultLedger
from drillbook.chaos.traffic import TrafficWindow


def context(tmp_path) -> RunContext:
    return RunContext("run", tmp_path / "run", FaultLedger(tmp_path / "faults.jsonl"), target=None)  # type: ignore[arg-type]


def test_measurements_recorded_from_many_threads_are_all_kept(tmp_path):
    run = context(tmp_path)
    start = threading.Barrier(8)

    def provider(index: int) -> None:
        start.wait()
        for step in range(40):
            run.record_measurement(f"provider_{index}_{step}", step)
            run.append_measurement("trials", (index, step))
            run.merge_measurement("receipts", f"{index}-{step}", step)

    threads = [threading.Thread(target=provider, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert all(run.measurement(f"provider_{index}_{step}") == step for index in range(8) for step in range(40))
    assert len(run.measurement("trials")) == 8 * 40
    assert len(run.measurement("receipts")) == 8 * 40
    journal = (tmp_path / "run" / "measurements.jsonl").read_text().splitlines()
    assert len(journal) == 3 * 8 * 40  # every measurement written down as it was made


def test_closing_writes_measurements_and_windows_once(tmp_path):
    run = context(tmp_path)
    run.record_measurement("restore", {"healthy": True})
    window = TrafficWindow("fault", "tenant-a", acknowledged=3)
    run.publish_window(window)
    window.failed = 1  # the published window is the live one: later turns are seen
    assert run.window("fault").failed == 1
    assert run.close() == {"restore": {"healthy": True}}
    assert json.loads((tmp_path / "run" / "measurements.json").read_text()) == {"restore": {"healthy": True}}
    assert json.loads((tmp_path / "run" / "traffic-fault.json").read_text())["failed"] == 1


def test_judging_probes_know_the_phase_or_refuse(tmp_path):
    run = context(tmp_path)
    with pytest.raises(ContextError, match="drillbook control"):
        run.judging_after_method()
    run.enter(BEFORE)
    assert not run.judging_after_method()
    run.enter(METHOD)
    assert not run.judging_after_method()
    run.enter(AFTER)
    assert run.judging_after_method()


def test_a_followed_run_travels_in_its_configuration_and_nowhere_else(tmp_path):
    configuration = {"drillbook_run_id": "run"}
    opened = context(tmp_path).follow(configuration)
    provider_copy = configuration.copy()  # what chaoslib hands a provider
    assert RunContext.of(provider_copy) is opened
    assert context(tmp_path).follow(configuration) is opened  # the control and the runner follow the same run
    assert opened.phase == BEFORE
    opened.close()
    # Another run of the same id, in the same process, with its own configuration, is its own
    # run: nothing module-wide remembers the first.
    with pytest.raises(ContextError, match="drillbook_ledger is missing"):
        RunContext.of({"drillbook_run_id": "run"})
    with pytest.raises(ContextError, match="not a drillbook run context"):
        context(tmp_path).follow({"drillbook_context": "forged"})


def test_a_configuration_without_a_drillbook_target_is_refused_in_one_line():
    with pytest.raises(ContextError, match="drillbook_ledger is missing"):
        RunContext.of({"drillbook_run_id": "x"})
