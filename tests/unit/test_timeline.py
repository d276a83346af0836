"""drillbook.timeline: one type for a run's events, handed to listeners as they happen."""

import threading

from drillbook import jsonl
from drillbook.timeline import Timeline, written_to


def test_events_are_stamped_kept_in_order_and_handed_to_every_listener(tmp_path):
    seen = []
    timeline = Timeline(seen.append, written_to(tmp_path / "t.jsonl"))
    first = timeline.add("started", run="r1")
    merged = timeline.merge([{"t": 5.0, "kind": "activity_started"}], experiment="ha")
    assert first["kind"] == "started" and first["t"] > 1e9
    assert merged == [{"t": 5.0, "kind": "activity_started", "experiment": "ha"}]  # stamped elsewhere: t kept
    assert [e["kind"] for e in timeline] == ["started", "activity_started"] == [e["kind"] for e in seen]
    assert jsonl.read(tmp_path / "t.jsonl") == timeline.events  # the journal holds what the timeline holds
    assert len(timeline) == 2 and timeline and not Timeline()


def test_events_from_several_threads_are_all_kept_and_written_whole(tmp_path):
    timeline = Timeline(written_to(tmp_path / "t.jsonl"))

    def add(worker: int) -> None:
        for n in range(200):
            timeline.add("tick", worker=worker, n=n)

    threads = [threading.Thread(target=add, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    written = jsonl.read(tmp_path / "t.jsonl")
    assert len(timeline) == 800 and written == timeline.events
    for worker in range(4):
        assert [e["n"] for e in written if e["worker"] == worker] == list(range(200))
