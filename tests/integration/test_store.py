"""The state store on real SQLite files and a real PostgreSQL server: appends, idempotency,
concurrency, backup, destroy and restore."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from drillbook.errors import StoreUnavailable
from drillbook.sandbox.chain import verify_chain
from drillbook.sandbox.store import PostgresStore, SQLiteStore, StateStore

pytestmark = pytest.mark.integration


@pytest.fixture(params=["sqlite", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path):
    created: list[StateStore] = []

    def make(idempotency: bool = True) -> StateStore:
        if request.param == "sqlite":
            store: StateStore = SQLiteStore(tmp_path / f"db{len(created)}" / "state.db", idempotency=idempotency)
        else:
            store = PostgresStore(request.getfixturevalue("pg_dsn"), idempotency=idempotency)
        store.init_schema()
        created.append(store)
        return store

    yield make
    for store in created:
        store.close()


def snapshot(store: StateStore, session_ids: list[str]) -> dict[str, list[tuple]]:
    return {sid: [(t.seq, t.hash, t.input, t.output) for t in store.turns(sid)] for sid in session_ids}


def test_turns_are_appended_in_order_with_an_unbroken_chain(make_store):
    store = make_store()
    session = store.create_session("tenant-a")
    acks = [store.append_turn(session.id, f"k{i}", f"in {i}", f"out {i}")[0] for i in range(5)]
    assert [a.seq for a in acks] == [1, 2, 3, 4, 5]
    stored = store.turns(session.id)
    assert [t.hash for t in stored] == [a.hash for a in acks]
    assert verify_chain(session.id, stored).ok
    assert store.get_session(session.id).tenant == "tenant-a"
    assert store.counts() == (1, 5)


def test_a_retried_key_is_applied_once(make_store):
    store = make_store()
    session = store.create_session("t")
    first, replayed_first = store.append_turn(session.id, "same-key", "hi", "there")
    again, replayed_again = store.append_turn(session.id, "same-key", "hi", "there")
    assert (replayed_first, replayed_again) == (False, True)
    assert again == first
    assert len(store.turns(session.id)) == 1


def test_a_retried_session_open_opens_one_session_per_tenant(make_store):
    store = make_store()
    first = store.create_session("tenant-a", "open-key")
    again = store.create_session("tenant-a", "open-key")
    elsewhere = store.create_session("tenant-b", "open-key")
    assert again == first
    assert elsewhere.id != first.id and elsewhere.tenant == "tenant-b"
    assert store.counts() == (2, 0)


def test_without_idempotency_a_retried_open_opens_two_sessions(make_store):
    store = make_store(idempotency=False)
    assert store.create_session("t", "open-key").id != store.create_session("t", "open-key").id
    assert store.counts() == (2, 0)


def test_without_idempotency_a_retry_is_applied_twice(make_store):
    store = make_store(idempotency=False)
    session = store.create_session("t")
    store.append_turn(session.id, "same-key", "hi", "there")
    store.append_turn(session.id, "same-key", "hi", "there")
    keys = [t.idempotency_key for t in store.turns(session.id)]
    assert keys == ["same-key", "same-key"]


def test_concurrent_appends_keep_seq_and_chain(make_store):
    store = make_store()
    session = store.create_session("t")
    errors: list[BaseException] = []

    def writer(worker: int) -> None:
        try:
            for i in range(15):
                store.append_turn(session.id, f"w{worker}-{i}", "x", "y")
        except BaseException as error:  # noqa: BLE001
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    stored = store.turns(session.id)
    assert [t.seq for t in stored] == list(range(1, 61))
    assert verify_chain(session.id, stored).ok


def test_backup_then_destroy_then_restore_gives_identical_sessions(make_store, tmp_path: Path):
    store = make_store()
    sessions = [store.create_session("t").id for _ in range(3)]
    for sid in sessions:
        for i in range(4):
            store.append_turn(sid, f"{sid}-{i}", f"in {i}", f"out {i}")
    before = snapshot(store, sessions)
    backup = store.backup(tmp_path / "backups")
    assert (backup.sessions, backup.turns) == (3, 12)
    assert Path(backup.path).stat().st_size == backup.size_bytes

    store.append_turn(sessions[0], "after-backup", "lost", "in the disaster")
    store.destroy()
    with pytest.raises(StoreUnavailable):
        store.ping()
    with pytest.raises(StoreUnavailable):
        store.turns(sessions[0])

    store.restore(Path(backup.path))
    store.ping()
    assert snapshot(store, sessions) == before
    assert all(verify_chain(sid, store.turns(sid)).ok for sid in sessions)
    # The store keeps working after the restore.
    turn, _ = store.append_turn(sessions[0], "after-restore", "a", "b")
    assert turn.seq == 5


def test_restore_over_a_live_store_replaces_its_content(make_store, tmp_path: Path):
    store = make_store()
    sid = store.create_session("t").id
    store.append_turn(sid, "k1", "a", "b")
    backup = store.backup(tmp_path / "backups")
    store.append_turn(sid, "k2", "c", "d")
    store.restore(Path(backup.path))
    assert [t.idempotency_key for t in store.turns(sid)] == ["k1"]


def test_a_streamed_turn_is_written_by_its_owner_only_and_ends_once(make_store):
    from drillbook.sandbox.store import ack
    from drillbook.sandbox.stream_store import ACK, DONE, FAILED, FAILURE, TOKEN

    store = make_store()
    session = store.create_session("tenant-a")
    stream, opened = store.open_stream(session.id, "k1", "hello", "http://a#1", 100.0)
    assert opened and stream.state == "running" and stream.last_id == 0
    again, opened_again = store.open_stream(session.id, "k1", "hello", "http://b#2", 101.0)
    assert not opened_again and again.owner == "http://a#1"  # a retried start joins the turn, takes nothing
    assert store.extend_stream(session.id, "k1", "http://a#1", ["x", "y"], 100.5)
    assert not store.extend_stream(session.id, "k1", "http://b#2", ["z"], 100.6)  # not its turn
    assert [(e.id, e.kind) for e in store.stream_events(session.id, "k1", 0)] == [(1, TOKEN), (2, TOKEN)]
    assert [e.id for e in store.stream_events(session.id, "k1", 1)] == [2]
    turn = store.finish_stream(session.id, "k1", "http://a#1", "k1", "x y", ack)
    assert turn.output == "x y" and store.stream(session.id, "k1").state == DONE
    (ending,) = store.stream_events(session.id, "k1", 2)
    assert ending.kind == ACK and '"seq": 1' in ending.data
    assert not store.fail_stream(session.id, "k1", "too late", lost_owner="http://a#1")  # ended: stays acknowledged

    # A turn found lost is failed once, and its replica can then neither add to it nor store it.
    store.open_stream(session.id, "k2", "again", "http://a#1", 100.0)
    assert store.extend_stream(session.id, "k2", "http://a#1", ["p"], 100.1)
    assert not store.fail_stream(session.id, "k2", "lost", lost_owner="http://other#9")  # the row names another
    assert store.fail_stream(session.id, "k2", "lost", lost_owner="http://a#1")
    assert not store.fail_stream(session.id, "k2", "lost", lost_owner="http://a#1")
    assert not store.extend_stream(session.id, "k2", "http://a#1", ["q"], 100.2)
    assert store.finish_stream(session.id, "k2", "http://a#1", "k2", "p q", ack) is None
    assert [(e.id, e.kind) for e in store.stream_events(session.id, "k2", 0)] == [(1, TOKEN), (2, FAILURE)]
    assert store.stream(session.id, "k2").state == FAILED and [t.idempotency_key for t in store.turns(session.id)] == ["k1"]
    assert [s.turn_key for s in store.running_streams()] == []
