"""How drillbook speaks a workload's agent API, and reads its sessions back, from the profile alone.

A profile's ``api`` section says where sessions open and turns go, what the request bodies look
like (templates) and where the answers carry what drillbook needs (JMESPath expressions, from
the jmespath library, so nested requests and replies are described rather than coded). Its
``delivery`` section says where a session is read back and where each stored turn carries its
content, position, digest, idempotency key and link to its predecessor. Every expression and
template is checked when the profile loads; a request is built and an answer read only here,
so the load generator, the chaos probes and ``target check`` speak one API the same way.

Templates are JSON-like values (mappings, lists, strings, numbers) in which the placeholders
``{input}``, ``{session}``, ``{idempotency_key}`` and ``{max_tokens}`` are filled in; a string that
is exactly one placeholder takes the value's own type (``"{max_tokens}"`` becomes a number).
Bodies go as JSON, or as an HTML form (``body_format: form``, for APIs such as Agno's AgentOS
that take form fields); a form template is a flat mapping of field names to strings or numbers.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from drillbook.config import StrictModel
from drillbook.jmes import check_expression, compiled, pick  # noqa: F401 - re-exported: where the API's answers are read
from drillbook.streamapi import StreamApi

PLACEHOLDERS = ("input", "session", "idempotency_key", "max_tokens")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
MINTED_PREFIX = "drillbook-"  # sessions drillbook names itself where the API has no open call


def placeholders_in(template: Any) -> set[str]:
    if isinstance(template, str):
        return set(_PLACEHOLDER.findall(template))
    if isinstance(template, dict):
        return set().union(*(placeholders_in(k) | placeholders_in(v) for k, v in template.items()))
    if isinstance(template, list):
        return set().union(*(placeholders_in(item) for item in template))
    return set()


def check_template(template: Any) -> Any:
    unknown = placeholders_in(template) - set(PLACEHOLDERS)
    if unknown:
        raise ValueError(f"unknown placeholder {{{sorted(unknown)[0]}}}; known: "
                         + ", ".join(f"{{{name}}}" for name in PLACEHOLDERS))
    return template


def render(template: Any, values: dict[str, Any]) -> Any:
    """The template with its placeholders filled in (a lone placeholder keeps its value's type)."""
    if isinstance(template, str):
        whole = _PLACEHOLDER.fullmatch(template)
        if whole:
            return values.get(whole.group(1))
        return _PLACEHOLDER.sub(lambda m: "" if values.get(m.group(1)) is None else str(values[m.group(1)]), template)
    if isinstance(template, dict):
        return {render(key, values): render(value, values) for key, value in template.items()}
    if isinstance(template, list):
        return [render(item, values) for item in template]
    return template


class AgentApi(StrictModel):
    """How clients speak to the agent API. The defaults are the reference platform's.

    Paths may hold {session}. The turn body is ``turn_body`` (a template) or, without one,
    ``{input_field: text, max_tokens_field: n}``. The *_field entries are JMESPath expressions
    into the answers; a plain field name is one. ack_seq_field and ack_digest_field may be null
    for an API that neither numbers nor hashes turns: drillbook's own receipts then carry the
    audit (what it sent, what was acknowledged, in which order).
    """

    auth_header: str = "Authorization"
    auth_scheme: str = Field("Bearer", description="prefix before the key; empty sends the key alone")
    open_session: str | None = Field("/v1/sessions", description="POST that opens a session; null: the API has "
                                                                 "none, drillbook names each session itself")
    open_session_body: Any = Field(None, description="template of the open-session body (none: no body)")
    session_id_field: str = Field("session_id", description="JMESPath: the new session's id in the answer")
    turn: str = "/v1/sessions/{session}/turns"
    turn_body: Any = Field(None, description="template of a turn's body; none: {input_field: text}")
    input_field: str = "input"
    max_tokens_field: str | None = "max_tokens"
    idempotency_header: str | None = Field("Idempotency-Key", description="header carrying drillbook's "
                                                                           "idempotency key on every turn and session "
                                                                           "open; null: none is sent")
    ack_seq_field: str | None = Field("seq", description="JMESPath: the turn's position in the answer")
    ack_digest_field: str | None = Field("hash", description="JMESPath: the turn's digest in the answer")
    reply_field: str | None = Field(None, description="JMESPath: the agent's reply text (shown by target check)")
    stream_query: str | None = Field("stream=true", description="query that streams tokens; none: not streamed")
    body_format: Literal["json", "form"] = Field("json", description="how request bodies are sent: a JSON "
                                                                     "document, or form fields")
    streams: StreamApi = Field(default_factory=StreamApi, description="how a turn streams and is resumed "
                                                                      "(drillbook.streamapi)")

    @field_validator("session_id_field", "ack_seq_field", "ack_digest_field", "reply_field")
    @classmethod
    def _expression(cls, expression: str | None) -> str | None:
        return check_expression(expression)

    @field_validator("open_session_body", "turn_body")
    @classmethod
    def _template(cls, template: Any) -> Any:
        return check_template(template)

    @model_validator(mode="after")
    def _session_somewhere(self) -> "AgentApi":
        if "{session}" not in self.turn and "session" not in placeholders_in(self.turn_body):
            raise ValueError("the turn path or turn_body must contain {session}")
        if self.turn_body is not None and "input" not in placeholders_in(self.turn_body):
            raise ValueError("turn_body must contain {input}")
        if self.body_format == "form":
            for name, template in (("turn_body", self.turn_body), ("open_session_body", self.open_session_body)):
                if template is not None and not _flat_form(template):
                    raise ValueError(f"with body_format form, {name} must be a mapping of field names to "
                                     "strings or numbers")
        return self

    def body(self, body: Any) -> dict[str, Any]:
        """The keyword arguments that send a rendered body (httpx and requests take the same)."""
        if body is None:
            return {}
        if self.body_format == "form":
            return {"data": {key: "" if value is None else str(value) for key, value in body.items()}}
        return {"json": body}

    def auth(self, key: str) -> dict[str, str]:
        return {self.auth_header: f"{self.auth_scheme} {key}" if self.auth_scheme else key}

    def turn_path(self, session_id: str) -> str:
        return self.turn.replace("{session}", session_id)

    def turn_body_for(self, text: str, session_id: str, idempotency_key: str | None = None,
                      max_tokens: int | None = None) -> Any:
        if self.turn_body is None:
            body: dict[str, Any] = {self.input_field: text}
            if max_tokens and self.max_tokens_field:
                body[self.max_tokens_field] = max_tokens
            return body
        return render(self.turn_body, {"input": text, "session": session_id, "idempotency_key": idempotency_key,
                                       "max_tokens": max_tokens or None})

    def idempotency_headers(self, idempotency_key: str | None) -> dict[str, str]:
        return {self.idempotency_header: idempotency_key} if self.idempotency_header and idempotency_key else {}

    def mints_sessions(self) -> bool:
        return self.open_session is None

    def minted_session(self) -> str:
        return f"{MINTED_PREFIX}{uuid.uuid4().hex}"

    def open_body(self) -> Any:
        return render(self.open_session_body, {}) if self.open_session_body is not None else None

    def session_id_of(self, answer: Any) -> str | None:
        found = pick(self.session_id_field, answer)
        return None if found in (None, "") else str(found)

    def acknowledgement(self, answer: Any) -> "Acknowledgement":
        seq = pick(self.ack_seq_field, answer)
        digest = pick(self.ack_digest_field, answer)
        reply = pick(self.reply_field, answer)
        return Acknowledgement(seq=_int_or_none(seq), digest=None if digest is None else str(digest),
                               reply=None if reply is None else str(reply))


@dataclass(frozen=True)
class Acknowledgement:
    """What an answer says of an acknowledged turn (each None where the API does not say it)."""

    seq: int | None
    digest: str | None
    reply: str | None = None

    def problems(self, api: AgentApi) -> list[str]:
        """Mapped fields the answer did not carry (a mapping that selects nothing is a defect)."""
        wrong = []
        if api.ack_seq_field and self.seq is None:
            wrong.append(f"api.ack_seq_field {api.ack_seq_field!r} selects no number")
        if api.ack_digest_field and self.digest is None:
            wrong.append(f"api.ack_digest_field {api.ack_digest_field!r} selects nothing")
        if api.reply_field and self.reply is None:
            wrong.append(f"api.reply_field {api.reply_field!r} selects nothing")
        return wrong


def _flat_form(template: Any) -> bool:
    return isinstance(template, dict) and all(
        isinstance(value, (str, int, float)) and not isinstance(value, bool) for value in template.values())


def _int_or_none(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


class ReadBack(StrictModel):
    """Where a session's read-back carries its stored turns (JMESPath; the defaults are the
    read-back contract's, docs/delivery-contract.md). A turn field set to null is not offered."""

    turns: str = Field("turns", description="JMESPath: the list of stored turns, in order, in the answer")
    seq: str | None = Field("seq", description="JMESPath in a turn: its position")
    hash: str | None = Field("hash", description="JMESPath in a turn: its digest")
    idempotency_key: str | None = Field("idempotency_key", description="JMESPath in a turn: its idempotency key")
    prev_hash: str | None = Field("prev_hash", description="JMESPath in a turn: its predecessor's digest")
    content: str | None = Field(None, description="JMESPath in a turn: the input drillbook sent")

    @field_validator("turns", "seq", "hash", "idempotency_key", "prev_hash", "content")
    @classmethod
    def _expression(cls, expression: str | None) -> str | None:
        return check_expression(expression)

    def mapped(self) -> dict[str, str]:
        return {name: getattr(self, name) for name in ("seq", "hash", "idempotency_key", "prev_hash", "content")
                if getattr(self, name) is not None}


class SessionNotOpened(Exception):
    """The API refused to open a session, or its answer carried no session id (the reason says which)."""


def failure_reason(response: Any) -> str:
    """`HTTP <status>` and, where the platform said why (a JSON body's `error` or `detail`), its
    words: which of a gateway's failures a client saw is what an operator needs to know."""
    status = f"HTTP {response.status_code}"
    try:
        body = response.json()
    except ValueError:
        return status
    reason = (body.get("error") or body.get("detail")) if isinstance(body, dict) else None
    return f"{status}: {str(reason)[:120]}" if reason else status


def open_session(http: Any, api: AgentApi) -> str:
    """A new session's id: opened with the API's open call, or named by drillbook where it has none.

    ``http`` is an httpx.Client with the tenant's auth already set. The open carries a new
    idempotency key, so that a platform may retry it."""
    if api.mints_sessions():
        return api.minted_session()
    response = http.post(api.open_session, **api.body(api.open_body()),
                         headers=api.idempotency_headers(uuid.uuid4().hex))
    if response.status_code not in (200, 201):
        raise SessionNotOpened(failure_reason(response))
    try:
        session_id = api.session_id_of(response.json())
    except ValueError:
        session_id = None
    if session_id is None:
        raise SessionNotOpened(f"api.session_id_field {api.session_id_field!r} selects nothing in the answer")
    return session_id


def send_turn(http: Any, api: AgentApi, session_id: str, text: str, idempotency_key: str | None,
              max_tokens: int | None = None) -> Any:
    """POST one turn (not streamed); the httpx response."""
    return http.post(api.turn_path(session_id), **api.body(api.turn_body_for(text, session_id, idempotency_key,
                                                                             max_tokens)),
                     headers=api.idempotency_headers(idempotency_key))


def receipt(api: AgentApi, answer: Any, session_id: str, tenant: str, sent: str, idempotency_key: str | None,
            attempts: int = 1, acked_at: float | None = None) -> dict[str, Any]:
    """drillbook's receipt of an acknowledged turn (the fields of drillbook.delivery.Receipt)."""
    import time

    ack = api.acknowledgement(answer)
    return {"session_id": session_id, "tenant": tenant, "seq": ack.seq, "hash": ack.digest,
            "idempotency_key": idempotency_key,
            "attempts": attempts, "acked_at": time.time() if acked_at is None else acked_at, "sent": sent}
