"""How a workload streams a turn and lets a client resume it: the profile's ``api.streams``.

The defaults are the reference platform's (drillbook.sandbox.streaming). A turn streams as
Server-Sent Events from ``start`` (POST, the turn's body, the idempotency key in its header: the
turn's id); each event's ``id`` is what a client resumes after, and its data (JSON) carries a
token, the acknowledgement or the failure where ``token``, ``ack`` and ``failed`` (JMESPath)
select something (``turn_id``, where the workload names the turn itself, e.g. a run id in its
first event: what a resume asks for; else the idempotency key). ``resume`` (GET) continues a turn after an event id, sent as the
``Last-Event-ID`` header (resume_by: header) or as a query parameter (resume_by: cursor). A stack
whose streams cannot be resumed sets ``resume: null``: the session-continuity drill then reports
that it cannot resume, as a FAIL with that reason. ``stored_reply`` is where a stored turn (in
the read-back, delivery.mapping.turns) carries the reply, which the resumed tokens are held to.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from drillbook.config import StrictModel
from drillbook.jmes import check_expression

TURN_PLACEHOLDER = "{turn}"


class StreamApi(StrictModel):
    """A workload's resumable streams (see the module's docstring)."""

    start: str = Field("/v1/sessions/{session}/streams", description="POST: start a turn, answered as "
                                                                       "Server-Sent Events")
    resume: str | None = Field("/v1/sessions/{session}/streams/{turn}", description="GET: the turn's events after "
                                                                                    "an id; null: streams cannot "
                                                                                    "be resumed")
    resume_by: Literal["header", "cursor"] = Field("header", description="header: Last-Event-ID; cursor: the "
                                                                         "cursor query parameter")
    cursor: str = Field("after", description="the query parameter that carries the last event id (resume_by: cursor)")
    turn_id: str | None = Field(None, description="JMESPath in an event's data: the id the workload resumes the "
                                                  "turn by (a run id); null: the turn's idempotency key")
    token: str = Field("token", description="JMESPath in an event's data: a token of the reply")
    ack: str | None = Field("ack", description="JMESPath in an event's data: present on the acknowledgement")
    ack_event: str | None = Field(None, description="an SSE event name that acknowledges the turn, whatever its "
                                                    "data (LangServe's end); null: the ack expression decides")
    failed: str | None = Field("failed", description="JMESPath in an event's data: the platform's reason a turn "
                                                     "failed; null: it never says")
    stored_reply: str | None = Field("output", description="JMESPath in a stored turn of the read-back: the "
                                                           "reply; null: the read-back carries none, and the "
                                                           "tokens cannot be held to it")
    stored_input: str | None = Field("input", description="JMESPath in a stored turn: the input drillbook sent "
                                                          "(finds a turn stored again under another key)")
    separator: str = Field(" ", description="what joins tokens in the stored reply")

    @field_validator("turn_id", "token", "ack", "failed", "stored_reply", "stored_input")
    @classmethod
    def _expression(cls, expression: str | None) -> str | None:
        return check_expression(expression)

    @model_validator(mode="after")
    def _paths(self) -> "StreamApi":
        if self.ack is None and self.ack_event is None:
            raise ValueError("api.streams needs ack or ack_event: how else would a turn be seen acknowledged")
        if self.resume is not None and TURN_PLACEHOLDER not in self.resume:
            raise ValueError("api.streams.resume must contain {turn} (the turn's id: its idempotency key, or "
                             "what api.streams.turn_id selects)")
        return self

    def start_path(self, session_id: str) -> str:
        return self.start.replace("{session}", session_id)

    def resume_request(self, session_id: str, turn_key: str, after: str | None) -> tuple[str, dict[str, str]]:
        """(path, headers) of a resume after an event id (None: from the start)."""
        assert self.resume is not None
        path = self.resume.replace("{session}", session_id).replace(TURN_PLACEHOLDER, turn_key)
        if after is None:
            return path, {}
        if self.resume_by == "header":
            return path, {"Last-Event-ID": after}
        from urllib.parse import quote

        return f"{path}{'&' if '?' in path else '?'}{self.cursor}={quote(after)}", {}


__all__ = ["StreamApi"]
