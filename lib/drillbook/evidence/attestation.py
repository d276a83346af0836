"""An in-toto Statement for every sealed bundle, in a DSSE envelope: evidence a third party can
check with the in-toto and DSSE tools of its own, without drillbook.

The Statement's subjects are the bundle's files with their sha256 (every file the manifest lists
but the attestation itself); its predicate says what the run was: runbook, control, target,
parameters, verdict, checks, period, operator and how it was sealed. The envelope is signed with
the evidence key that signs the manifest (DSSE, Ed25519, the key id being drillbook's key
fingerprint), through securesystemslib's signer, the reference implementation of DSSE. A bundle
sealed without a key carries the same Statement in an envelope with no signature: the manifest's
chain vouches for it, as it vouches for the manifest.

The attestation is one of the files the manifest lists, so the ledger's chain covers it too.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any, Mapping

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from drillbook.evidence import signing

ATTESTATION = "attestation.intoto.json"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "urn:drillbook:predicate:run:v1"
FIRST_FORMAT_WITH_ATTESTATION = 2  # bundles of drillbook-evidence/1 were sealed before attestations


def predicate(manifest: Mapping[str, Any], summary: Mapping[str, Any] | None) -> dict[str, Any]:
    """What the run was, from the manifest being sealed and the run's summary.json (None: the
    run wrote none, as a killed one): verdict and checks are the summary's, never guessed."""
    from drillbook.scenarios import control_of

    summary = summary or {}
    metrics = summary.get("metrics") if isinstance(summary.get("metrics"), dict) else {}
    return {
        "bundle": manifest["bundle"], "runId": manifest["run_id"], "runbook": manifest["runbook"],
        "control": summary.get("control") or control_of(manifest["runbook"]), "target": manifest["target"], "parameters": manifest.get("parameters", {}),
        "status": manifest["status"], "verdict": summary.get("verdict"), "reason": summary.get("reason") or None,
        "checks": [{key: check.get(key) for key in ("name", "comparison", "threshold", "value", "unit", "passed")}
                   for check in summary.get("checks", []) if isinstance(check, dict)],
        "period": {"startedAt": manifest["started_at"], "finishedAt": manifest["finished_at"]},
        "operator": metrics.get("operator"), "incident": metrics.get("incident"),
        "exercise": manifest.get("exercise"),  # scope, participants, objectives, reference (exercise.py)
        "drillbook": manifest.get("versions", {}).get("drillbook"),
    }


def statement(files: Mapping[str, Mapping[str, Any]], predicate_body: Mapping[str, Any]) -> dict[str, Any]:
    """The in-toto Statement (v1): one subject per file, named by its path in the bundle."""
    return {"_type": STATEMENT_TYPE,
            "subject": [{"name": name, "digest": {"sha256": entry["sha256"]}} for name, entry in sorted(files.items())],
            "predicateType": PREDICATE_TYPE, "predicate": dict(predicate_body)}


def _key_of(public_key_b64: str, fingerprint: str):  # -> securesystemslib.signer.SSlibKey
    from securesystemslib.signer import SSlibKey

    return SSlibKey.from_crypto(signing.public_key_from_b64(public_key_b64), keyid=fingerprint)


def envelope(statement_body: Mapping[str, Any], key: Ed25519PrivateKey | None) -> dict[str, Any]:
    """The Statement in a DSSE envelope, signed with key (no signature without one)."""
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import CryptoSigner

    payload = json.dumps(statement_body, sort_keys=True, separators=(",", ":")).encode()
    wrapped = Envelope(payload=payload, payload_type=PAYLOAD_TYPE, signatures={})
    if key is not None:
        public = key.public_key()
        wrapped.sign(CryptoSigner(key, _key_of(signing.public_key_b64(public), signing.fingerprint(public))))
    return wrapped.to_dict()


def format_version(manifest: Mapping[str, Any]) -> int:
    try:
        return int(str(manifest.get("format", "")).rsplit("/", 1)[-1])
    except ValueError:
        return 0


def problems(folder: Path, manifest: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What is wrong with a sealed bundle's attestation, as (kind, detail): missing where it is
    due, not a DSSE envelope of an in-toto Statement, a signature that does not verify against
    the key that signed the manifest, subjects that are not the files the manifest lists, or a
    predicate that names another run. The file's own digest is checked with the manifest's."""
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import VerificationError

    path = folder / ATTESTATION
    if not path.is_file():
        due = format_version(manifest) >= FIRST_FORMAT_WITH_ATTESTATION
        return [("attestation-missing", f"{ATTESTATION} is missing")] if due else []
    try:
        wrapped = Envelope.from_dict(json.loads(path.read_text()))
        body = json.loads(wrapped.payload)
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as error:
        return [("attestation-invalid", f"{ATTESTATION} is not a DSSE envelope of a JSON statement ({error})")]
    found = []
    if wrapped.payload_type != PAYLOAD_TYPE or not isinstance(body, dict) or body.get("_type") != STATEMENT_TYPE \
            or body.get("predicateType") != PREDICATE_TYPE:
        return [("attestation-invalid", f"{ATTESTATION} does not hold a drillbook in-toto Statement")]
    info = manifest.get("signing")
    if isinstance(info, dict) and info.get("public_key") and info.get("fingerprint"):
        try:
            wrapped.verify([_key_of(str(info["public_key"]), str(info["fingerprint"]))], 1)
        except (VerificationError, ValueError) as error:
            found.append(("attestation-signature-invalid",
                          f"the attestation's DSSE signature does not verify against the manifest's key ({error})"))
    listed = manifest.get("files") if isinstance(manifest.get("files"), dict) else {}
    expected = {name: entry.get("sha256") for name, entry in listed.items()
                if name != ATTESTATION and isinstance(entry, dict)}
    subjects = body.get("subject") if isinstance(body.get("subject"), list) else []
    attested = {str(s.get("name")): (s.get("digest") or {}).get("sha256") for s in subjects if isinstance(s, dict)}
    if attested != expected:
        differ = sorted(set(attested.items()) ^ set(expected.items()))
        found.append(("attestation-subjects", f"the attested files differ from the manifest's: "
                                              f"{', '.join(name for name, _ in differ[:5])}"))
    named = body.get("predicate") if isinstance(body.get("predicate"), dict) else {}
    for field, key in (("runId", "run_id"), ("runbook", "runbook"), ("target", "target"), ("bundle", "bundle")):
        if named.get(field) != manifest.get(key):
            found.append(("attestation-disagrees", f"the attestation's {field} {named.get(field)!r} is not the "
                                                   f"manifest's {manifest.get(key)!r}"))
    return found


def read_statement(folder: Path) -> dict[str, Any]:
    """The Statement a bundle's attestation carries (unchecked: `problems` checks it)."""
    data = json.loads((folder / ATTESTATION).read_text())
    return json.loads(base64.b64decode(data["payload"]))
