"""Evidence bundles: written once, verified, tampering named, secrets kept out, report rendered."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from drillbook.evidence import BundleExists, BundleWriter, RunSummary, SloCheck, verify_path
from drillbook.evidence.bundle import LEDGER, EvidenceError, make_writable, read_ledger, remove_bundle
from drillbook.evidence.report import render_report
from drillbook.scenarios import REGISTRY
from drillbook.evidence.signing import new_key

SECRET = "s3cret-Tok3n-value-42"


def write_bundle(results: Path, runbook: str = "ha-replica-loss", verdict_value: float = 1.5,
                 signing_key: Path | None = None, witness: Path | None = None, **parameters) -> Path:
    summary = RunSummary.judge(runbook, "ha", {"recovery_time_s": verdict_value, "lost_turns": 0},
                               [SloCheck(name="recovery time", comparison="<=", threshold=5, value=verdict_value,
                                         unit="s")])
    with BundleWriter(results, runbook, "sandbox", {"users": 4, **parameters}, signing_key=signing_key,
                      witness=witness) as bundle:
        bundle.write_json("summary.json", summary.to_json())
        bundle.write_text("load/locust.log", "all good\n")
        bundle.write_bytes("plots/latency.png", b"\x89PNG\r\n\x1a\n" + os.urandom(64))
        bundle.event("fault_injected", what="kill agent-1")
    return bundle.path


def findings(results: Path, **kwargs) -> set[tuple[str, str]]:
    return {(f.bundle, f.kind) for f in verify_path(results, **kwargs).errors}


def tamper(path: Path, change) -> None:
    make_writable(path.parent)
    change(path)


@pytest.fixture
def results(tmp_path: Path) -> Path:
    return tmp_path / "results"


def test_a_written_bundle_verifies(results):
    first, second = write_bundle(results), write_bundle(results, verdict_value=2.0)
    report = verify_path(results)
    assert report.ok and set(report.checked) == {first.name, second.name}
    manifest = json.loads((second / "manifest.json").read_text())
    assert manifest["previous"]["bundle"] == first.name
    assert set(manifest["files"]) == {"summary.json", "load/locust.log", "plots/latency.png", "timeline.jsonl",
                                      "attestation.intoto.json"}
    assert manifest["status"] == "complete" and manifest["versions"]["drillbook"]
    assert [e.bundle for e in read_ledger(results)] == [first.name, second.name]
    assert not (second / ".unsealed").exists()


def test_changing_one_byte_of_any_file_is_named(results):
    bundle = write_bundle(results)
    for relative in ("summary.json", "load/locust.log", "plots/latency.png", "timeline.jsonl"):
        path = bundle / relative
        original = path.read_bytes()
        tamper(path, lambda p: p.write_bytes(bytes([original[0] ^ 1]) + original[1:]))
        assert (bundle.name, "file-changed") in findings(results), relative
        report = verify_path(results)
        assert relative in report.errors[0].detail
        path.write_bytes(original)
    assert verify_path(results).ok


def test_a_deleted_file_is_named(results):
    bundle = write_bundle(results)
    tamper(bundle / "load" / "locust.log", lambda p: p.unlink())
    report = verify_path(results)
    assert [(f.kind, "load/locust.log" in f.detail) for f in report.errors] == [("file-missing", True)]


def test_an_added_file_is_named(results):
    bundle = write_bundle(results)
    tamper(bundle / "extra.txt", lambda p: p.write_text("slipped in"))
    assert (bundle.name, "file-unexpected") in findings(results)


def test_an_edited_manifest_is_detected(results):
    bundle = write_bundle(results)

    def edit(path: Path) -> None:
        manifest = json.loads(path.read_text())
        manifest["parameters"]["users"] = 400
        path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")

    tamper(bundle / "manifest.json", edit)
    assert (bundle.name, "manifest-changed") in findings(results)


def test_removing_a_bundle_from_the_middle_of_the_chain_is_detected(results):
    first, middle, last = (write_bundle(results) for _ in range(3))
    remove_bundle(middle)
    assert (middle.name, "bundle-missing") in findings(results)
    # Removing its ledger line as well still breaks the chain at the next bundle.
    ledger = results / LEDGER
    ledger.write_text("".join(line + "\n" for line in ledger.read_text().splitlines() if middle.name not in line))
    assert (last.name, "chain-broken") in findings(results)
    assert first.name not in {bundle for bundle, _ in findings(results)}


def test_signatures_verify_and_a_replaced_signature_is_detected(results, tmp_path):
    key, other = tmp_path / "key.pem", tmp_path / "other.pem"
    fingerprint = new_key(key)
    new_key(other)
    bundle = write_bundle(results, signing_key=key)
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["signing"]["fingerprint"] == fingerprint
    assert verify_path(results, trusted={fingerprint}).ok
    assert (bundle.name, "signature-untrusted") in findings(results, trusted={"0" * 64})

    forged_source = write_bundle(tmp_path / "elsewhere", signing_key=other)
    forged = json.loads((forged_source / "manifest.sig").read_text())
    signature = json.loads((bundle / "manifest.sig").read_text())
    signature["signature"] = forged["signature"]
    tamper(bundle / "manifest.sig", lambda p: p.write_text(json.dumps(signature)))
    assert (bundle.name, "signature-invalid") in findings(results)


def test_an_existing_bundle_folder_is_refused_and_files_are_never_overwritten(results, monkeypatch):
    import drillbook.evidence.bundle as bundle_module

    class FixedClock(bundle_module.datetime):
        @classmethod
        def now(cls, tz=None):
            return bundle_module.datetime(2026, 1, 1, tzinfo=tz)

    monkeypatch.setattr(bundle_module, "datetime", FixedClock)
    monkeypatch.setattr(bundle_module.uuid, "uuid4", lambda: bundle_module.uuid.UUID(int=7))
    writer = BundleWriter(results, "drill", "sandbox")
    writer.write_text("notes.txt", "first")
    with pytest.raises(EvidenceError, match="never overwritten"):
        writer.write_text("notes.txt", "second")
    with pytest.raises(BundleExists, match="already exists"):
        BundleWriter(results, "drill", "sandbox")
    writer.seal()
    with pytest.raises(EvidenceError, match="sealed"):
        writer.write_text("late.txt", "too late")


def test_an_interrupted_run_is_sealed_incomplete_with_what_it_had(results):
    with pytest.raises(KeyboardInterrupt):
        with BundleWriter(results, "drill", "sandbox") as bundle:
            bundle.write_text("partial.log", "got this far")
            raise KeyboardInterrupt
    manifest = json.loads((bundle.path / "manifest.json").read_text())
    assert manifest["status"] == "incomplete" and "KeyboardInterrupt" in manifest["error"]
    assert "partial.log" in manifest["files"]
    assert verify_path(results).ok


def test_a_killed_writer_leaves_an_unsealed_bundle_that_verify_reports(results):
    code = ("from drillbook.evidence import BundleWriter; import os, sys;"
            f"b = BundleWriter({str(results)!r}, 'drill', 'sandbox'); b.write_text('a.txt', 'x');"
            "os.kill(os.getpid(), 9)")
    subprocess.run([sys.executable, "-c", code], check=False)
    write_bundle(results)
    report = verify_path(results)
    assert report.ok
    assert [f.kind for f in report.findings if f.bundle != "ledger"] == ["unsealed"]
    assert report.not_complete == [next(name for name, state in report.states.items() if state == "unsealed")]


def test_secrets_never_reach_any_file_of_a_bundle(results, monkeypatch):
    monkeypatch.setenv("DRILLBOOK_TEST_API_TOKEN", SECRET)
    dsn = "postgresql://agent:pg-passw0rd-99@127.0.0.1:5432/state"
    with BundleWriter(results, "drill", "sandbox", {"api_key": "tenant-key-123456", "dsn": dsn,
                                                    "note": f"token is {SECRET}"}) as bundle:
        bundle.write_text("load/locust.log", f"Authorization: Bearer {SECRET}\nconnecting to {dsn}\n")
        bundle.write_json("summary.json", {"seen": SECRET, "password": "hunter2-long"})
        bundle.event("connected", dsn=dsn)
    everything = b"".join(p.read_bytes() for p in bundle.path.rglob("*") if p.is_file())
    everything += (results / LEDGER).read_bytes()
    for secret in (SECRET, "tenant-key-123456", "pg-passw0rd-99", "hunter2-long"):
        assert secret.encode() not in everything, secret
    manifest = json.loads((bundle.path / "manifest.json").read_text())
    assert manifest["parameters"]["api_key"] == "***REDACTED***"
    assert "agent:***REDACTED***@127.0.0.1" in manifest["parameters"]["dsn"] or \
        manifest["parameters"]["dsn"] == "***REDACTED***"


def test_report_lists_sandbox_smoke_bundles_as_evidence_that_is_no_control(tmp_path):
    results = tmp_path / "results"
    env = {**os.environ, "DRILLBOOK_STATE_DIR": str(tmp_path / "state"), "COLUMNS": "200"}
    for _ in range(2):
        run = subprocess.run([sys.executable, "-m", "drillbook", "sandbox", "smoke", "--sessions", "2", "--turns", "3",
                              "--results", str(results)], env=env, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
    verify = subprocess.run([sys.executable, "-m", "drillbook", "verify", str(results)], env=env,
                            capture_output=True, text=True, timeout=60)
    assert verify.returncode == 0 and "2 bundles checked, 2 intact" in verify.stdout
    html = render_report(results)
    latest = sorted(p for p in results.iterdir() if p.is_dir())[-1]
    for entry in read_ledger(results):  # each digest once, in the list of bundles
        assert html.count(entry.manifest_sha256) == 1
    assert latest.name in html
    controls, rest = html.split('<h2 id="other">Other evidence (not a control, not scored)</h2>')
    others = rest.split("<h2>Verification</h2>")[0]
    assert "sandbox-smoke" not in controls and others.count("<td>sandbox-smoke</td>") == 2
    drills = sum(not declared.oncall for declared in REGISTRY.values())  # every drill's control: none has evidence
    assert drills == 8 and html.count("none\">NO EVIDENCE") == drills * 2  # summary table + sections
    assert '<p class="score">no runs</p>' in html
    assert "<script" not in html and "http://" not in html.replace("http://www.w3.org", "")

    tamper(latest / "summary.json", lambda p: p.write_text(p.read_text().replace('"sessions": 2', '"sessions": 3')))
    html = render_report(results)
    assert "file-changed" in html and "fails verification" in html and "UNVERIFIED" in html
    listed = subprocess.run([sys.executable, "-m", "drillbook", "list", str(results)], env=env, capture_output=True,
                            text=True, timeout=60)
    assert listed.returncode == 0 and listed.stdout.count("PASS") == 2
    bad = subprocess.run([sys.executable, "-m", "drillbook", "verify", str(results)], env=env, capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 1 and "summary.json differs" in bad.stdout
