"""Every sealed bundle carries an in-toto Statement in a DSSE envelope, which a third party checks
with the reference libraries (securesystemslib's DSSE, in-toto-attestation's Statement) and no
drillbook code: tampering with a file or with the statement is found by them and by `verify`."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from securesystemslib.dsse import Envelope
from securesystemslib.signer import CryptoSigner, SSlibKey

from drillbook.evidence import BundleWriter, RunSummary, SloCheck, verify_path
from drillbook.evidence.attestation import ATTESTATION, PREDICATE_TYPE, problems
from drillbook.evidence.bundle import MANIFEST, make_writable
from drillbook.evidence.signing import fingerprint, new_key
from tests.attestations import third_party_check


def sealed(results: Path, key: Path | None, verdict_value: float = 1.5) -> Path:
    summary = RunSummary.judge("ha-replica-loss", "ha", {"recovery_time_s": verdict_value, "operator": "dana"},
                               [SloCheck(name="recovery time", comparison="<=", threshold=5, value=verdict_value,
                                         unit="s")])
    with BundleWriter(results, "ha-replica-loss", "sandbox", {"users": 4}, signing_key=key) as bundle:
        bundle.write_json("summary.json", summary.to_json())
        bundle.write_text("load/locust.log", "all good\n")
        bundle.write_bytes("plots/latency.png", b"\x89PNG\r\n\x1a\n" + bytes(range(64)))
        bundle.event("fault_injected", what="kill agent-1")
    return bundle.path


def third_party_key(public_pem: Path) -> SSlibKey:
    """The auditor's key object, made from the .pub file alone; its key id is drillbook's fingerprint."""
    public = serialization.load_pem_public_key(public_pem.read_bytes())
    return SSlibKey.from_crypto(public, keyid=fingerprint(public))


def rewrite(path: Path, data: bytes) -> None:
    make_writable(path.parent)
    path.write_bytes(data)


@pytest.fixture()
def key(tmp_path: Path) -> Path:
    path = tmp_path / "keys" / "signing-key.pem"
    new_key(path)
    return path


def test_a_signed_bundle_carries_a_statement_the_reference_libraries_verify(tmp_path: Path, key: Path) -> None:
    bundle = sealed(tmp_path / "results", key)
    assert third_party_check(bundle, third_party_key(Path(f"{key}.pub"))) == []
    statement = json.loads(Envelope.from_dict(json.loads((bundle / ATTESTATION).read_text())).payload)
    assert statement["predicateType"] == PREDICATE_TYPE
    named = statement["predicate"]
    assert (named["runbook"], named["control"], named["target"], named["verdict"], named["operator"]) == \
        ("ha-replica-loss", "ha", "sandbox", "PASS", "dana")
    assert named["parameters"] == {"users": 4} and named["checks"][0]["passed"] is True
    assert named["period"]["startedAt"] <= named["period"]["finishedAt"]
    assert {s["name"] for s in statement["subject"]} >= {"summary.json", "load/locust.log", "plots/latency.png",
                                                         "timeline.jsonl"}
    manifest = json.loads((bundle / MANIFEST).read_text())
    assert ATTESTATION in manifest["files"], "the chain covers the attestation too"
    assert not [f for f in verify_path(tmp_path / "results").findings if f.kind.startswith("attestation")]


def test_a_changed_file_is_found_by_the_reference_libraries_and_by_verify(tmp_path: Path, key: Path) -> None:
    bundle = sealed(tmp_path / "results", key)
    rewrite(bundle / "load" / "locust.log", b"all bad\n")
    assert third_party_check(bundle, third_party_key(Path(f"{key}.pub"))) == ["digest: load/locust.log"]
    kinds = {(f.kind, f.detail.split()[0]) for f in verify_path(tmp_path / "results").errors}
    assert ("file-changed", "load/locust.log") in kinds


def test_a_changed_statement_is_found_by_the_reference_libraries_and_by_verify(tmp_path: Path, key: Path) -> None:
    bundle = sealed(tmp_path / "results", key, verdict_value=9.0)  # a FAIL, rewritten to read PASS
    envelope = json.loads((bundle / ATTESTATION).read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    assert statement["predicate"]["verdict"] == "FAIL"
    statement["predicate"]["verdict"] = "PASS"
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    rewrite(bundle / ATTESTATION, json.dumps(envelope).encode())
    found = third_party_check(bundle, third_party_key(Path(f"{key}.pub")))
    assert len(found) == 1 and found[0].startswith("signature")
    kinds = {f.kind for f in verify_path(tmp_path / "results").errors}
    assert {"attestation-signature-invalid", "file-changed"} <= kinds


def test_a_statement_signed_again_by_another_key_is_not_trusted(tmp_path: Path, key: Path) -> None:
    bundle = sealed(tmp_path / "results", key)
    other = tmp_path / "other.pem"
    new_key(other)
    private = serialization.load_pem_private_key(other.read_bytes(), password=None)
    original = Envelope.from_dict(json.loads((bundle / ATTESTATION).read_text()))
    forged = Envelope(payload=original.payload, payload_type=original.payload_type, signatures={})
    forged.sign(CryptoSigner(private, third_party_key(Path(f"{other}.pub"))))
    rewrite(bundle / ATTESTATION, json.dumps(forged.to_dict()).encode())
    assert third_party_check(bundle, third_party_key(Path(f"{key}.pub")))[0].startswith("signature")
    assert "attestation-signature-invalid" in {f.kind for f in verify_path(tmp_path / "results").errors}


def test_an_unsigned_bundle_carries_the_statement_in_an_envelope_without_signatures(tmp_path: Path) -> None:
    bundle = sealed(tmp_path / "results", None)
    envelope = json.loads((bundle / ATTESTATION).read_text())
    assert envelope["signatures"] == []
    assert third_party_check(bundle, None) == []
    assert not [f for f in verify_path(tmp_path / "results").findings if f.kind.startswith("attestation")]


def test_attestation_problems_name_what_differs(tmp_path: Path) -> None:
    bundle = sealed(tmp_path / "results", None)
    manifest = json.loads((bundle / MANIFEST).read_text())
    assert problems(bundle, manifest) == []
    dropped = {**manifest, "files": {k: v for k, v in manifest["files"].items() if k != "summary.json"}}
    assert [kind for kind, _ in problems(bundle, dropped)] == ["attestation-subjects"]
    assert [kind for kind, _ in problems(bundle, {**manifest, "runbook": "restore-drill"})] == \
        ["attestation-disagrees"]
    rewrite(bundle / ATTESTATION, b"{}")
    assert [kind for kind, _ in problems(bundle, manifest)] == ["attestation-invalid"]
    (bundle / ATTESTATION).unlink()
    assert [kind for kind, _ in problems(bundle, manifest)] == ["attestation-missing"]
    assert problems(bundle, {**manifest, "format": "drillbook-evidence/1"}) == [], \
        "a bundle sealed before attestations existed owes none"
