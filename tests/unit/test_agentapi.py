"""The agent API as a profile describes it: templates, JMESPath mappings, and their errors."""

from __future__ import annotations

import httpx
import pytest
from pydantic import ValidationError

from drillbook.agentapi import MINTED_PREFIX, AgentApi, ReadBack, failure_reason, render
from drillbook.delivery import stored_turns

LANGSERVE = {"open_session": None, "turn": "/chat/invoke", "idempotency_header": None,
             "turn_body": {"input": {"input": "{input}"}, "config": {"configurable": {"session_id": "{session}"}}},
             "ack_seq_field": None, "ack_digest_field": None, "reply_field": "output.content"}


def test_a_template_fills_nested_fields_and_keeps_a_lone_placeholders_type():
    body = render({"messages": [{"role": "user", "content": "say: {input}"}], "max_tokens": "{max_tokens}",
                   "user": "{session}"}, {"input": "hi", "max_tokens": 16, "session": "s1"})
    assert body == {"messages": [{"role": "user", "content": "say: hi"}], "max_tokens": 16, "user": "s1"}


def test_a_nested_request_and_reply_are_described_not_coded():
    api = AgentApi(**LANGSERVE)
    session = api.minted_session()
    assert api.mints_sessions() and session.startswith(MINTED_PREFIX)
    assert api.turn_body_for("hello", session) == {"input": {"input": "hello"},
                                                    "config": {"configurable": {"session_id": session}}}
    assert api.idempotency_headers("k1") == {}  # no idempotency header: none is sent
    ack = api.acknowledgement({"output": {"content": "Noted.", "type": "ai"}, "metadata": {"run_id": "r"}})
    assert (ack.seq, ack.digest, ack.reply) == (None, None, "Noted.") and ack.problems(api) == []


def test_a_mapping_that_selects_nothing_is_named():
    api = AgentApi(ack_seq_field="ack.position")
    ack = api.acknowledgement({"seq": 1, "hash": "h"})
    assert ack.problems(api) == ["api.ack_seq_field 'ack.position' selects no number"]


@pytest.mark.parametrize(("fields", "message"), [
    ({"ack_seq_field": "a[?"}, "is not a JMESPath expression"),
    ({"turn": "/chat/invoke", "turn_body": {"input": "{input}"}}, "must contain {session}"),
    ({"turn_body": {"text": "{prompt}"}}, "unknown placeholder {prompt}"),
    ({"turn_body": {"session": "{session}"}}, "turn_body must contain {input}"),
])
def test_a_wrong_mapping_or_template_is_refused_when_the_profile_loads(fields, message):
    with pytest.raises(ValidationError) as caught:
        AgentApi(**fields)
    assert message in str(caught.value)


def test_stored_turns_come_through_the_read_back_mapping():
    mapping = ReadBack(turns="messages[?type=='human']", content="data.content", seq=None, hash=None,
                       idempotency_key=None, prev_hash=None)
    answer = {"messages": [{"type": "human", "data": {"content": "one"}}, {"type": "ai", "data": {"content": "x"}},
                           {"type": "human", "data": {"content": "two"}}]}
    turns = stored_turns(answer, mapping)
    assert [t.content for t in turns] == ["one", "two"] and all(t.seq is None and t.hash is None for t in turns)
    with pytest.raises(ValueError, match="selects no list of turns"):
        stored_turns({"history": []}, mapping)


def test_a_form_body_goes_as_form_fields_and_a_json_body_as_json():
    form = AgentApi(open_session=None, turn="/agents/a/runs", body_format="form",
                    turn_body={"message": "{input}", "session_id": "{session}", "stream": "false", "n": "{max_tokens}"})
    rendered = form.turn_body_for("hi there", "s1", max_tokens=8)
    assert form.body(rendered) == {"data": {"message": "hi there", "session_id": "s1", "stream": "false", "n": "8"}}
    assert AgentApi().body({"input": "hi"}) == {"json": {"input": "hi"}}
    assert AgentApi().body(None) == {}


def test_a_form_template_must_be_flat():
    with pytest.raises(ValidationError, match="must be a mapping of field names to strings or numbers"):
        AgentApi(open_session=None, turn="/runs", body_format="form",
                 turn_body={"input": {"text": "{input}"}, "session": "{session}"})


@pytest.mark.parametrize(("response", "reason"), [
    (httpx.Response(502, json={"error": "agent replica failed: ServerDisconnectedError"}),
     "HTTP 502: agent replica failed: ServerDisconnectedError"),
    (httpx.Response(422, json={"detail": [{"msg": "field required"}]}), "HTTP 422: [{'msg': 'field required'}]"),
    (httpx.Response(503, text="<html>busy</html>"), "HTTP 503"),
    (httpx.Response(500, json=["not", "a", "mapping"]), "HTTP 500"),
    (httpx.Response(504, json={"error": "x" * 500}), "HTTP 504: " + "x" * 120),
])
def test_a_failure_keeps_the_reason_the_platform_gave(response, reason):
    assert failure_reason(response) == reason


def test_an_answer_that_is_a_list_of_events_is_mapped_and_keeps_its_receipt():
    from drillbook.agentapi import receipt

    api = AgentApi(ack_seq_field="[-1].seq", ack_digest_field=None)
    events = [{"event": "RunStarted"}, {"event": "RunContent", "content": "hi"}, {"event": "RunCompleted", "seq": 7}]
    kept = receipt(api, events, "s-1", "acme", "hello", "k-1", acked_at=1.0)
    assert (kept["seq"], kept["hash"], kept["session_id"], kept["idempotency_key"]) == (7, None, "s-1", "k-1")
