"""drillbook.jsonl: complete lines only, and a cut line never swallows the record after it."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from drillbook import jsonl
from drillbook.chaos.ledger import FaultLedger
from drillbook.processes import ProcessLedger


def test_a_missing_journal_has_no_records(tmp_path):
    assert jsonl.read(tmp_path / "none.jsonl") == []


def test_records_come_back_in_order_with_values_json_cannot_hold_as_text(tmp_path):
    path = tmp_path / "deep" / "er" / "journal.jsonl"  # folders are made
    jsonl.append(path, {"n": 1, "at": Path("/x")})
    jsonl.append(path, {"n": 2})
    assert jsonl.read(path) == [{"n": 1, "at": "/x"}, {"n": 2}]


def test_what_is_not_a_complete_object_line_is_left_out():
    data = (b'{"n": 1}\n'
            b"\n"  # blank
            b"[1, 2]\n"  # JSON, not a record
            b"not json\n"
            b'{"n": "\xff"}\n'  # not UTF-8
            b'{"n": 2}\n'
            b'{"n": 3')  # a writer cut mid-line: no newline
    assert jsonl.parse(data) == [{"n": 1}, {"n": 2}]
    assert jsonl.parse(b'{"n": 4}') == []  # even a whole object is not a complete line without its newline


def test_an_append_after_a_cut_line_starts_a_line_of_its_own(tmp_path):
    path = tmp_path / "journal.jsonl"
    jsonl.append(path, {"n": 1})
    with open(path, "ab") as handle:  # what a writer killed mid-line leaves
        handle.write(b'{"n": 2, "half')
    jsonl.append(path, {"n": 3})
    assert jsonl.read(path) == [{"n": 1}, {"n": 3}]
    assert path.read_bytes().endswith(b'\n{"n": 3}\n')


def test_a_fault_ledger_cut_mid_line_still_names_the_fault_to_undo(tmp_path):
    ledger = FaultLedger(tmp_path / "faults.jsonl")
    fault = ledger.record("run", "sandbox", "kill", {"op": "await_ready", "service": "agent"}, service="agent")
    with open(ledger.path, "ab") as handle:  # the undone line of a rollback cut by a full disk
        handle.write(b'{"undone": "' + fault.id.encode())
    assert [f.id for f in ledger.open_faults()] == [fault.id]
    ledger.resolve(fault, "replaced")
    assert ledger.open_faults() == []


def _append_many(path: str, writer: int, count: int) -> None:
    for n in range(count):
        jsonl.append(Path(path), {"writer": writer, "n": n, "pad": "x" * 3000}, durable=True)


def test_durable_appends_from_several_processes_keep_every_line_whole(tmp_path):
    path = tmp_path / "ledger.jsonl"
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_append_many, args=(str(path), w, 40)) for w in range(3)]
    for process in writers:
        process.start()
    for process in writers:
        process.join(60)
        assert process.exitcode == 0
    records = jsonl.read(path)
    assert len(records) == 120 and len(path.read_bytes().splitlines()) == 120
    for writer in range(3):
        assert [r["n"] for r in records if r["writer"] == writer] == list(range(40))


def test_a_process_ledger_reads_through_a_cut_line(tmp_path):
    ledger = ProcessLedger(tmp_path / "processes.jsonl")
    entry = ledger.started("locust", 12345, "a load")
    with open(ledger.path, "ab") as handle:
        handle.write(b'{"stopped": 12')
    assert [e.pid for e in ledger.open_entries()] == [12345]
    ledger.stopped(entry, "stopped")
    assert ledger.open_entries() == []


def test_one_process_may_hold_entries_of_two_kinds_and_each_is_closed_on_its_own(tmp_path):
    ledger = ProcessLedger(tmp_path / "processes.jsonl")
    summary = ledger.started("gameday", 4242, "a game day's summary")
    run = ledger.started("run", 4242, "the run it is in")
    assert sorted(e.kind for e in ledger.open_entries()) == ["gameday", "run"]
    ledger.stopped(run, "sealed")
    assert [e.kind for e in ledger.open_entries()] == ["gameday"]
    ledger.stopped(summary, "sealed")
    assert ledger.open_entries() == []
    # An older ledger's stopped record names no kind: it closes every entry of that process.
    ledger.started("run", 4343, "old")
    with open(ledger.path, "a") as handle:
        handle.write('{"stopped": 4343, "ticks": null, "how": "old"}\n')
    assert ledger.open_entries() == []
