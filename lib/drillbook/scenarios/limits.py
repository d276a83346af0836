"""The kinds of parameter the scenarios share, each with the limits that make a result meaningful."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

Count = Annotated[int, Field(ge=1, le=100_000, description="at least one")]
Turns = Annotated[int, Field(ge=0, le=1_000_000)]
Seconds = Annotated[float, Field(gt=0, le=86_400, description="more than zero seconds")]
Wait = Annotated[float, Field(ge=0, le=86_400, description="zero or more seconds")]
Fraction = Annotated[float, Field(ge=0, le=1, description="a fraction from 0 to 1")]
Ratio = Annotated[float, Field(gt=0, le=1_000_000)]
Rate = Annotated[float, Field(gt=0, le=1_000_000, description="more than zero per second")]
Text = str


class Parameters(BaseModel):
    """A runbook's parameters: unknown names refused, values checked on assignment too."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class OnCall(Parameters):
    """Who runs an on-call runbook and for which incident (kept in the evidence)."""

    operator: Text = ""
    incident: Text = ""
