"""The session-continuity drill on the real sandbox: PASS where streams resume (SQLite and
PostgreSQL, a replica killed mid-stream), FAIL for each defect and for a stack that cannot resume."""

from __future__ import annotations

import json
import time
import uuid

import httpx
import pytest

from drillbook import jsonl
from drillbook.agentapi import AgentApi
from drillbook.execute import execute
from drillbook.streamclient import ACK, FAILURE, OTHER_PROCESS, TurnRecord, follow_turn, read_stream

pytestmark = pytest.mark.integration

QUICK = {"users": "12", "duration_s": "8", "kill_after_s": "3"}  # a kill finds streams on its replica
DROPS_ONLY = {"users": "4", "duration_s": "5", "kill_count": "0"}


def metrics(executed) -> dict:
    return executed.summary["metrics"]


def streams(executed) -> list[TurnRecord]:
    return [TurnRecord.from_json(line) for line in jsonl.read(executed.bundle / "observations" / "streams.jsonl")]


def failed_checks(executed) -> set[str]:
    return {check["name"] for check in executed.summary["checks"] if not check["passed"]}


def test_streams_resume_across_drops_handoffs_and_a_killed_replica_on_sqlite(sandbox_factory, tmp_path):
    handle = sandbox_factory(tokens_per_second=200)
    executed = execute("session-continuity", overrides=QUICK, results=tmp_path / "results",
                       sandbox_state=handle.state_dir)
    assert executed.verdict == "PASS", executed.explain()
    found = metrics(executed)
    # Every fault was seen to land by the clients themselves: drops, resumes, and streams the kill broke.
    assert found["streams_dropped"] > 0 and found["resumes"] >= found["streams_dropped"]
    assert found["streams_hit_by_kill"] >= 1 and found["killed_replicas"]
    assert found["tokens_checked"] == 64 * found["acknowledged_turns"]
    assert found["failed_turns"] == found["failed_turns_at_kill"]
    assert found["resume_p50_ms"] <= found["resume_p95_ms"] <= found["resume_p99_ms"]
    records = streams(executed)
    assert len(records) == found["turns"]
    # Turns were resumed by another process than the one that started them, and ended there.
    elsewhere = [r for r in records if any(c.by == OTHER_PROCESS for c in r.connections)]
    assert elsewhere and all(r.ending() is not None for r in elsewhere)
    # The evidence keeps every event id: within a turn, ids run 1, 2, ... with no gap or repeat.
    for record in records:
        ids = [int(e.id) for c in record.connections for e in c.events]
        assert ids == list(range(1, len(ids) + 1)), record.turn_key


def test_streaming_users_under_locust_workers_send_every_turn_to_the_master(sandbox_factory, tmp_path):
    handle = sandbox_factory(tokens_per_second=200)
    executed = execute("session-continuity", overrides={**DROPS_ONLY, "load_workers": "2"},
                       results=tmp_path / "results", sandbox_state=handle.state_dir)
    assert executed.verdict == "PASS", executed.explain()
    load = executed.bundle / "load"
    from_workers = sorted(load.glob("streams-worker-*.jsonl"))
    assert len(from_workers) == 2 and all(path.stat().st_size for path in from_workers)
    assert metrics(executed)["turns"] == sum(len(jsonl.read(path)) for path in load.glob("streams-*.jsonl"))


def test_streams_resume_on_postgres(sandbox_factory, pg_dsn, tmp_path):
    handle = sandbox_factory(tokens_per_second=200, store="postgres", dsn=pg_dsn)
    executed = execute("session-continuity", overrides=QUICK, results=tmp_path / "results",
                       sandbox_state=handle.state_dir)
    assert executed.verdict == "PASS", executed.explain()
    assert metrics(executed)["tokens_checked"] > 0 and metrics(executed)["streams_hit_by_kill"] >= 1


def test_a_reconnect_that_runs_the_turn_again_fails_for_repeated_tokens_and_a_turn_stored_twice(sandbox_factory,
                                                                                                 tmp_path):
    handle = sandbox_factory(tokens_per_second=200, defects=["no-stream-resume"])
    executed = execute("session-continuity", overrides=DROPS_ONLY, results=tmp_path / "results",
                       sandbox_state=handle.state_dir)
    assert executed.verdict == "FAIL", executed.explain()
    assert failed_checks(executed) >= {"tokens duplicated across a resume",
                                       "turns not acknowledged and stored exactly once"}, executed.explain()
    assert metrics(executed)["repeated_event_ids"] > 0


def test_a_turn_that_dies_with_its_client_fails_as_cancelled(sandbox_factory, tmp_path):
    handle = sandbox_factory(tokens_per_second=200, defects=["turn-dies-with-client"])
    executed = execute("session-continuity", overrides=DROPS_ONLY, results=tmp_path / "results",
                       sandbox_state=handle.state_dir)
    assert executed.verdict == "FAIL", executed.explain()
    assert "turns a dropped client cancelled" in failed_checks(executed), executed.explain()
    # (a drop at one of the last tokens can come after the turn was stored: not every drop cancels)
    assert 0 < metrics(executed)["turns_cancelled_by_client"] <= metrics(executed)["streams_dropped"]


def test_a_stack_that_cannot_resume_fails_with_that_reason(sandbox_factory, tmp_path):
    handle = sandbox_factory(tokens_per_second=200)
    profile = tmp_path / "no-resume.yaml"
    profile.write_text("name: no-resume\nkind: sandbox\ndelivery: {verifier: reference}\n"
                       "api: {streams: {resume: null}}\n")
    executed = execute("session-continuity", target=str(profile), overrides=DROPS_ONLY,
                       results=tmp_path / "results", sandbox_state=handle.state_dir)
    assert executed.verdict == "FAIL", executed.explain()
    resume = next(c for c in executed.summary["checks"] if c["name"] == "resume latency p95")
    assert "cannot resume" in resume["note"], resume
    assert "turns a dropped client cancelled" in failed_checks(executed)


def test_a_turn_outlives_its_connection_and_a_killed_replica_fails_it_without_storing_a_part(sandbox_factory):
    """The platform itself, seen from a client: the rest of a dropped turn exactly once from the
    other replica, a finished turn whole, and a turn whose replica died failed and never stored."""
    handle = sandbox_factory(tokens_per_second=100)
    api = AgentApi()
    auth = api.auth(handle.tenant_keys["tenant-a"])
    gateway = handle.gateway_url
    session = httpx.post(f"{gateway}/v1/sessions", headers=auth).json()["session_id"]

    def body(tokens: int) -> bytes:
        return json.dumps({"input": "hello", "max_tokens": tokens}).encode()

    # A start without the turn's id, or with a body that is not a turn, is refused before anything runs.
    assert httpx.post(f"{gateway}/v1/sessions/{session}/streams", headers=auth, json={"input": "x"}).status_code == 400
    assert httpx.post(f"{gateway}/v1/sessions/{session}/streams", headers={**auth, "Idempotency-Key": "k0"},
                      content=b"not json").status_code == 400
    key = uuid.uuid4().hex
    record = TurnRecord(session, "tenant-a", key, "hello", time.time())
    follow_turn(gateway, api.streams, auth, record, body(20), [5, 3], 30, {"Idempotency-Key": key})
    assert [c.how for c in record.connections] == ["dropped", "dropped", "ended"]
    assert record.ending().kind == ACK and record.ending().id == "21"
    stored = httpx.get(f"{gateway}/v1/sessions/{session}", headers=auth).json()["turns"]
    tokens = [e.text for c in record.connections for e in c.events if e.text is not None]
    assert [t["idempotency_key"] for t in stored] == [key] and stored[0]["output"].split() == tokens
    # A client that comes back after the turn ended gets what it missed, once.
    path, headers = api.streams.resume_request(session, key, "18")
    late = read_stream(gateway, "GET", path, {**auth, **headers}, None, api.streams, "18")
    assert [e.id for e in late.events] == ["19", "20", "21"]
    # The replica streaming a turn is killed: the turn ends failed, and nothing of it is stored.
    killed_key = uuid.uuid4().hex
    first = read_stream(gateway, "POST", api.streams.start_path(session), {**auth, "Idempotency-Key": killed_key,
                        "Content-Type": "application/json"}, body(400), api.streams, None, drop_after_tokens=10)
    with handle.control() as control:
        control.kill("agent", count=2, signal="SIGKILL")
    resumed = TurnRecord(session, "tenant-a", killed_key, "hello", time.time(), [first])
    follow_turn(gateway, api.streams, auth, resumed, body(400), [], 30, {"Idempotency-Key": killed_key})
    assert resumed.ending().kind == FAILURE and "replica" in resumed.ending().detail
    stored = httpx.get(f"{gateway}/v1/sessions/{session}", headers=auth).json()["turns"]
    assert [t["idempotency_key"] for t in stored] == [key]
