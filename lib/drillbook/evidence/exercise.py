"""What an exercise was meant to be, as the frameworks ask an exercise record to say: its scope,
who took part, its objectives, and the incident or change it belongs to.

A game-day plan states it (`exercise:`), `drillbook run` and `drillbook gameday` take it as
options (--scope, --participant, --objective, --reference); it is sealed into each run's
manifest (and its in-toto predicate), so it is attested with the run, never added afterwards.
What is learned afterwards (findings, remediation) goes to the exercise records
(drillbook.evidence.remediation), which reference the sealed bundle without touching it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Exercise(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    scope: str = Field(default="", max_length=500, description="What the exercise covers (systems, tenants, regions)")
    participants: list[str] = Field(default_factory=list, max_length=50, description="Who took part, and as what")
    objectives: list[str] = Field(default_factory=list, max_length=50, description="What it set out to show")
    reference: str = Field(default="", max_length=200, description="The incident or change it belongs to")

    @property
    def empty(self) -> bool:
        return not (self.scope or self.participants or self.objectives or self.reference)

    def merged(self, scope: str | None = None, participants: list[str] | None = None,
               objectives: list[str] | None = None, reference: str | None = None) -> "Exercise":
        """This record with what was given on the command line: scope and reference replace the
        plan's, participants and objectives add to them."""
        return Exercise.model_validate({
            "scope": scope if scope else self.scope,
            "participants": [*self.participants, *(p for p in participants or [] if p not in self.participants)],
            "objectives": [*self.objectives, *(o for o in objectives or [] if o not in self.objectives)],
            "reference": reference if reference else self.reference})

    def sealed(self) -> dict[str, Any] | None:
        """What goes into the manifest (None when nothing was said: no empty record is sealed)."""
        return None if self.empty else self.model_dump()


def exercise_options(scope: str | None, participants: list[str], objectives: list[str], reference: str | None,
                     base: Exercise | None = None) -> Exercise:
    """The exercise record of a run from its command-line options (on top of a plan's record);
    one ConfigError line when a value is out of bounds."""
    from pydantic import ValidationError

    from drillbook.config import validation_line
    from drillbook.errors import ConfigError

    for name, values in (("--participant", participants), ("--objective", objectives)):
        if any(not value.strip() for value in values):
            raise ConfigError(f"{name} is given an empty value")
    try:
        return (base or Exercise()).merged(scope, participants, objectives, reference)
    except ValidationError as error:
        raise ConfigError(f"exercise record: {validation_line(error)}") from None
