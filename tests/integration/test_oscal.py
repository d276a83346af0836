"""`drillbook report --oscal` and the framework view, through the real CLI: the OSCAL document
validates with compliance-trestle's own `trestle validate`, names each run's manifest digest, and
its findings and risks follow the verdicts; a custom mapping replaces the shipped one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from trestle.oscal.assessment_results import AssessmentResults

from drillbook.evidence import BundleWriter, RunSummary, SloCheck
from drillbook.evidence.bundle import read_ledger
from tests.helpers import team_mapping

pytestmark = pytest.mark.integration

TRESTLE = Path(sys.executable).parent / "trestle"
CUSTOM = team_mapping(("R-1", "Restores restore", ["restore"]))


def seal(results: Path, runbook: str, control: str, value: float) -> Path:
    summary = RunSummary.judge(runbook, control, {"figure": value},
                               [SloCheck(name="figure", comparison="<=", threshold=5, value=value)])
    with BundleWriter(results, runbook, "sandbox", {"trials": 1}) as bundle:
        bundle.write_json("summary.json", summary.to_json())
    return bundle.path


def drillbook(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_CONFIG_HOME": str(cwd / "config"), "COLUMNS": "200"}
    env.pop("DRILLBOOK_SIGNING_KEY", None)
    return subprocess.run([sys.executable, "-m", "drillbook", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def trestle_validate(document: Path, workspace: Path) -> subprocess.CompletedProcess:
    """compliance-trestle's own validation of an assessment-results document, in a trestle workspace."""
    workspace.mkdir()
    made = subprocess.run([str(TRESTLE), "init"], cwd=workspace, capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stdout + made.stderr
    placed = workspace / "assessment-results" / "drills" / "assessment-results.json"
    placed.parent.mkdir(parents=True)
    shutil.copyfile(document, placed)
    return subprocess.run([str(TRESTLE), "validate", "-f", str(placed)], cwd=workspace, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture()
def results(tmp_path: Path) -> Path:
    folder = tmp_path / "results"
    seal(folder, "ha-replica-loss", "ha", 1.0)
    seal(folder, "restore-drill", "restore", 2.0)
    seal(folder, "ha-replica-loss", "ha", 9.0)  # the latest HA run failed
    return folder


def test_oscal_assessment_results_validate_with_trestle_and_follow_the_verdicts(results: Path, tmp_path: Path) -> None:
    ran = drillbook("report", str(results), "-o", "page.html", "--oscal", "ar.json", cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert f"OSCAL assessment results written to {tmp_path / 'ar.json'}" in ran.stdout
    checked = trestle_validate(tmp_path / "ar.json", tmp_path / "workspace")
    assert checked.returncode == 0 and "VALID" in checked.stdout, checked.stdout + checked.stderr

    model = AssessmentResults.oscal_read(tmp_path / "ar.json")
    result = model.results[0]
    ledger = {entry.bundle: entry.manifest_sha256 for entry in read_ledger(results)}
    evidence = {o.relevant_evidence[0].href.split("/")[0]: o.relevant_evidence[0].props[0].value
                for o in result.observations}
    assert evidence == ledger, "one observation per run, each naming its bundle's manifest digest"
    findings = {f.target.target_id: f for f in result.findings}
    reviewed = {c.control_id for s in result.reviewed_controls.control_selections for c in s.include_controls}
    assert set(findings) == reviewed and {"cp-9", "cp-10", "soc2-a1.3", "dora-art-12", "sc-39"} <= reviewed
    assert findings["cp-9"].target.status.state.value == "not-satisfied", "restore passed, on-call restore never ran"
    assert "no run of oncall-restore" in findings["cp-9"].target.status.remarks
    assert str(getattr(findings["cp-10"].target.status.reason, "root", findings["cp-10"].target.status.reason)) == "fail"
    risks = {r.uuid: r for r in result.risks}
    risk = risks[findings["cp-10"].related_risks[0].risk_uuid]
    failed_run = next(o.uuid for o in result.observations if "FAIL" in o.title)
    assert [o.observation_uuid for o in risk.related_observations] == [failed_run]
    assert findings["sc-39"].related_observations is None and findings["sc-39"].related_risks is None

    page = (tmp_path / "page.html").read_text()
    assert 'id="framework-dora"' in page and 'id="framework-pci-dss"' in page
    cp9 = page[page.index('id="requirement-cp-9"'):]
    assert "PARTLY EVIDENCED" in cp9[:cp9.index("</tr>")]


def test_trestle_validation_finds_a_broken_document(results: Path, tmp_path: Path) -> None:
    assert drillbook("report", str(results), "-o", "page.html", "--oscal", "ar.json", cwd=tmp_path).returncode == 0
    document = json.loads((tmp_path / "ar.json").read_text())
    document["assessment-results"]["results"][0]["findings"][0]["target"]["status"]["state"] = "mostly"
    (tmp_path / "broken.json").write_text(json.dumps(document))
    assert trestle_validate(tmp_path / "broken.json", tmp_path / "workspace").returncode != 0


def test_a_custom_mapping_replaces_the_shipped_one(results: Path, tmp_path: Path) -> None:
    (tmp_path / "ours.yaml").write_text(CUSTOM)
    ran = drillbook("report", str(results), "-o", "page.html", "--oscal", "ar.json", "--mapping", "ours.yaml",
                    cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert trestle_validate(tmp_path / "ar.json", tmp_path / "workspace").returncode == 0
    findings = AssessmentResults.oscal_read(tmp_path / "ar.json").results[0].findings
    assert [(f.target.target_id, f.target.status.state.value) for f in findings] == [("team-r-1", "satisfied")]
    page = (tmp_path / "page.html").read_text()
    assert 'id="framework-team"' in page and 'id="framework-dora"' not in page
    assert '<span class="state MET">MET</span>' in page


def test_a_bad_mapping_stops_the_report_before_anything_is_written(results: Path, tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text(CUSTOM.replace("[restore]", "[restore, uptime]"))
    ran = drillbook("report", str(results), "-o", "page.html", "--oscal", "ar.json", "--mapping", "bad.yaml",
                    cwd=tmp_path)
    assert ran.returncode == 2
    lines = [line for line in (ran.stdout + ran.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and "'uptime', which is no drillbook control" in lines[0], lines
    assert not (tmp_path / "page.html").exists() and not (tmp_path / "ar.json").exists()
