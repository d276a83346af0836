"""Measurements that an experiment's providers record from several threads at once are all kept."""

from __future__ import annotations

import threading

from drillbook.chaos.context import RunContext
from drillbook.chaos.ledger import FaultLedger


def test_measurements_recorded_from_many_threads_are_all_kept(tmp_path):
    run = RunContext("run", tmp_path / "run", FaultLedger(tmp_path / "faults.jsonl"), target=None)  # type: ignore[arg-type]
    start = threading.Barrier(8)

    def provider(index: int) -> None:
        start.wait()
        for step in range(40):
            run.record_measurement(f"provider_{index}_{step}", step)

    threads = [threading.Thread(target=provider, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert all(run.measurement(f"provider_{index}_{step}") == step for index in range(8) for step in range(40))
