"""Control mappings: the shipped one loads and covers every control; a bad one is one line; a
framework control's state comes from the latest run of each drillbook control it names."""

from __future__ import annotations

from pathlib import Path

import pytest

from drillbook.errors import ConfigError
from drillbook.evidence.catalog import RUNNING, BundleRow
from drillbook.evidence.frameworks import (MET, NO_EVIDENCE, NOT_MET, PARTLY, known_controls, load_mapping,
                                           requirement_statuses)
from drillbook.evidence.summary import RunSummary, SloCheck
from tests.helpers import team_mapping

CUSTOM = team_mapping(("R-1", "Replicas can be lost", ["ha"]),
                      ("R 2", "Restores restore, and replicas can be lost", ["restore", "ha"]))


def row(control_runbook: str, verdict: str, at: str, status: str = "complete", name: str = "") -> BundleRow:
    control = {"ha-replica-loss": "ha", "restore-drill": "restore"}[control_runbook]
    summary = RunSummary(runbook=control_runbook, control=control, verdict=verdict,
                         checks=[SloCheck(name="x", comparison="<=", threshold=1, value=0.5 if verdict == "PASS" else 2)])
    name = name or f"2026{at.replace(':', '')}_{control_runbook}_sandbox_{abs(hash((at, verdict))) % 999999:06d}"
    return BundleRow(Path("/results") / name, control_runbook, "sandbox", status, f"2026-12-01T{at}Z", "d" * 64,
                     summary)


def custom(tmp_path: Path, text: str = CUSTOM) -> Path:
    path = tmp_path / "mapping.yaml"
    path.write_text(text)
    return path


def states(mapping, rows, failed=frozenset()) -> dict[str, str]:
    return {s.requirement.id: s.state for s in requirement_statuses(mapping, rows, set(failed))}


def test_the_shipped_mapping_names_every_control_and_every_framework_the_issue_asks_for() -> None:
    mapping = load_mapping()
    assert [f.id for f in mapping.frameworks] == ["dora", "soc2", "iso27001", "iso22301", "nist-800-53", "pci-dss"]
    named = {c for f in mapping.frameworks for r in f.requirements for c in r.evidenced_by}
    assert named == known_controls(), "every drillbook control evidences something, and nothing unknown is named"
    ids = {mapping.oscal_id(f, r) for f in mapping.frameworks for r in f.requirements}
    assert {"cp-4", "cp-4.3", "cp-9", "cp-10", "soc2-a1.3", "iso27001-a.8.13", "dora-art-12", "pci-dss-12.10.2"} <= ids


def test_a_state_comes_from_the_latest_run_of_each_control(tmp_path: Path) -> None:
    mapping = load_mapping(custom(tmp_path))
    passed, failed_later = row("ha-replica-loss", "PASS", "10:00:00"), row("ha-replica-loss", "FAIL", "11:00:00")
    assert states(mapping, []) == {"R-1": NO_EVIDENCE, "R 2": NO_EVIDENCE}
    assert states(mapping, [passed]) == {"R-1": MET, "R 2": PARTLY}, "no restore run: a gap, never MET"
    assert states(mapping, [passed, failed_later]) == {"R-1": NOT_MET, "R 2": NOT_MET}
    fixed = row("ha-replica-loss", "PASS", "12:00:00")
    restored = row("restore-drill", "PASS", "09:00:00")
    assert states(mapping, [failed_later, fixed, restored]) == {"R-1": MET, "R 2": MET}
    statuses = requirement_statuses(mapping, [failed_later, fixed, restored], set())
    assert statuses[1].latest is fixed and (statuses[1].passed, len(statuses[1].runs)) == (2, 3)


def test_a_run_that_did_not_pass_in_any_way_is_not_met(tmp_path: Path) -> None:
    mapping = load_mapping(custom(tmp_path))
    passed = row("ha-replica-loss", "PASS", "10:00:00")
    assert states(mapping, [passed], failed={passed.name})["R-1"] == NOT_MET, "a bundle that fails verification"
    killed = row("ha-replica-loss", "PASS", "10:00:00", status="killed")
    assert states(mapping, [killed])["R-1"] == NOT_MET
    errored = row("ha-replica-loss", "ERROR", "10:00:00")
    assert states(mapping, [errored])["R-1"] == NOT_MET
    running = row("ha-replica-loss", "PASS", "13:00:00", status=RUNNING)
    assert states(mapping, [running])["R-1"] == NO_EVIDENCE, "a run still going is no evidence yet"
    explained = requirement_statuses(mapping, [errored], set())[1].explain()
    assert "latest ha run did not pass" in explained and "no run of restore" in explained


def test_a_custom_mapping_gets_oscal_ids_made_from_its_ids(tmp_path: Path) -> None:
    mapping = load_mapping(custom(tmp_path))
    framework = mapping.frameworks[0]
    assert [mapping.oscal_id(framework, r) for r in framework.requirements] == ["team-r-1", "team-r-2"]
    assert mapping.source == str(tmp_path / "mapping.yaml")


@pytest.mark.parametrize("text, expected", [
    ("frameworks: [{id: t, title: T, requirements: [{id: A, title: A, evidenced_by: [ha, uptime]}]}]",
     "names 'uptime', which is no drillbook control"),
    ("frameworks: []", "frameworks"),
    ("- just a list", "is not a mapping with a 'frameworks' list"),
    ("frameworks: [{id: t, title: T, requirements: [{id: A, title: A, evidenced_by: []}]}]", "evidenced_by"),
    ("frameworks: [{id: t, title: T, requirements: [{id: A, title: A, oscal_id: '1x', evidenced_by: [ha]}]}]",
     "is not an OSCAL token"),
    ("frameworks: [{id: t, title: T, requirements: [{id: A, title: A, evidenced_by: [ha]}, "
     "{id: a, title: B, evidenced_by: [ha]}]}]", "gives id 't-a' to two requirements"),
    ("frameworks: [{id: t, title: T, requirements: [{id: A, title: A, evidenced_by: [ha]}]}, "
     "{id: t, title: U, requirements: [{id: B, title: B, evidenced_by: [ha]}]}]", "names framework 't' twice"),
    ("frameworks: [{id: t, title: T, requirements: [{id: A, title: A, evidenced_by: [ha], owner: x}]}]", "owner"),
    ("frameworks: [", "is not YAML"),
])
def test_a_bad_mapping_is_one_line_naming_what_is_wrong(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_mapping(custom(tmp_path, text))
    assert expected in str(raised.value) and "\n" not in str(raised.value)
    assert str(tmp_path / "mapping.yaml") in str(raised.value)


def test_a_mapping_that_cannot_be_read_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the control mapping .*missing.yaml"):
        load_mapping(tmp_path / "missing.yaml")
