"""Exercise records over real runs, through the real CLI: the record a run is sealed with, a FAIL
that opens a remediation item, `findings add` giving it an owner, the next PASS closing it, and
the report, OSCAL and verify showing all of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from trestle.oscal.assessment_results import AssessmentResults

from drillbook.evidence.attestation import read_statement
from drillbook.evidence.bundle import read_ledger
from tests.integration.test_oscal import trestle_validate

pytestmark = pytest.mark.integration

COLD = ["run", "cold-start", "-p", "trials=1", "-p", "idle_s=0.1"]
RECORD = ["--scope", "tenant-a chat agents", "--participant", "dana (on-call)", "--participant", "lee (observer)",
          "--objective", "first token within the SLO after scale-from-zero", "--reference", "CHG-1234"]


def test_a_fail_opens_remediation_that_a_later_pass_closes(sandbox, tmp_path: Path) -> None:
    results = tmp_path / "results"
    env = {**os.environ, "DRILLBOOK_STATE_DIR": str(sandbox.state_dir), "COLUMNS": "250",
           "XDG_CONFIG_HOME": str(tmp_path / "config")}
    env.pop("DRILLBOOK_SIGNING_KEY", None)

    def drillbook(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "drillbook", *args], env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=300)

    assert drillbook("keys", "new").returncode == 0  # records and bundles signed with the team's key
    failed = drillbook(*COLD, "-p", "slo_p95_s=0.0001", *RECORD, "--results", str(results))
    assert failed.returncode == 1 and "FAIL" in failed.stdout, failed.stdout + failed.stderr
    (first,) = [results / e.bundle for e in read_ledger(results)]
    manifest = json.loads((first / "manifest.json").read_text())
    expected = {"scope": "tenant-a chat agents", "participants": ["dana (on-call)", "lee (observer)"],
                "objectives": ["first token within the SLO after scale-from-zero"], "reference": "CHG-1234"}
    assert manifest["exercise"] == expected
    assert read_statement(first)["predicate"]["exercise"] == expected, "the record is attested with the run"

    listed = drillbook("findings", "list", str(results))
    assert "1 open, 0 closed" in listed.stdout and first.name.rsplit("_", 1)[1] in listed.stdout

    unowned = drillbook("findings", "add", first.name, "--remediation", "pre-warm one replica", "--results",
                        str(results))
    assert unowned.returncode == 2 and unowned.stderr.strip() == \
        "drillbook: --remediation needs --owner NAME and --due YYYY-MM-DD"
    added = drillbook("findings", "add", first.name.rsplit("_", 1)[1], "--remediation", "pre-warm one replica",
                      "--owner", "sre-team", "--due", "2099-01-31", "--results", str(results))
    assert added.returncode == 0 and "signed" in added.stdout, added.stdout + added.stderr
    assert drillbook("findings", "add", first.name, "--finding", "the pool scaled from zero on every call",
                     "--results", str(results)).returncode == 0

    passed = drillbook(*COLD, "--results", str(results))
    assert passed.returncode == 0, passed.stdout + passed.stderr
    second = next(results / e.bundle for e in read_ledger(results) if e.bundle != first.name)
    listed = drillbook("findings", "list", str(results))
    assert "0 open, 1 closed" in listed.stdout and second.name.rsplit("_", 1)[1] in listed.stdout
    assert "sre-team" in listed.stdout and "pre-warm one replica" in listed.stdout

    public = Path(env["XDG_CONFIG_HOME"]) / "drillbook" / "signing-key.pem.pub"
    verified = drillbook("verify", str(results), "--public-key", str(public))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "exercise records: 2 findings and remediation records, chain, signatures and bundles hold" in \
        verified.stdout

    assert drillbook("report", str(results), "-o", "page.html", "--oscal", "ar.json").returncode == 0
    page = (tmp_path / "page.html").read_text()
    remediation = page[page.index('<h2 id="remediation">'):page.index('<h2 id="gamedays">')]
    assert "CLOSED" in remediation and "sre-team" in remediation and "the pool scaled from zero" in remediation
    assert "CHG-1234" in page
    assert trestle_validate(tmp_path / "ar.json", tmp_path / "workspace").returncode == 0
    risks = AssessmentResults.oscal_read(tmp_path / "ar.json").results[0].risks
    (owed,) = [r for r in risks if r.title.startswith("Remediation")]
    assert owed.status.model_dump(mode="json") == "closed"
    assert owed.remediations[0].lifecycle == "completed" and len(owed.related_observations) == 2
