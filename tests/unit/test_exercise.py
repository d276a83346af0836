"""The exercise record: a plan states it, the command line adds to it, nothing empty is sealed,
and bad values are one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from drillbook.errors import ConfigError
from drillbook.evidence.exercise import Exercise, exercise_options
from drillbook.gameday import load_plan

PLAN = """
name: quarterly
runbooks:
  - runbook: cold-start
    parameters: {trials: 1}
exercise:
  scope: tenant-a chat agents
  participants: [dana (on-call)]
  objectives: [first token within the SLO]
  reference: CHG-1
"""


def test_a_plan_states_the_record_and_the_command_line_adds_to_it(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN)
    plan = load_plan(path)
    assert plan.exercise.participants == ["dana (on-call)"] and plan.exercise.reference == "CHG-1"
    merged = exercise_options(None, ["lee (observer)", "dana (on-call)"], [], "INC-7", base=plan.exercise)
    assert merged.sealed() == {"scope": "tenant-a chat agents", "participants": ["dana (on-call)", "lee (observer)"],
                               "objectives": ["first token within the SLO"], "reference": "INC-7"}


def test_nothing_said_seals_nothing() -> None:
    assert Exercise().sealed() is None and exercise_options(None, [], [], None).sealed() is None


def test_bad_values_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--participant is given an empty value"):
        exercise_options(None, [" "], [], None)
    with pytest.raises(ConfigError, match="exercise record: .*scope"):
        exercise_options("x" * 501, [], [], None)
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN.replace("reference: CHG-1", "ticket: CHG-1"))
    with pytest.raises(ConfigError, match="plan.yaml: .*ticket"):
        load_plan(path)
