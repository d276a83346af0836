"""What an auditor's own tools find in a bundle's in-toto attestation, with the reference
libraries only (securesystemslib's DSSE, in-toto-attestation's Statement) and no drillbook code."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from google.protobuf import json_format
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.statement import Statement
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import SSlibKey

ATTESTATION = "attestation.intoto.json"
SEALING = {"manifest.json", "manifest.sig", ATTESTATION}


def third_party_check(bundle: Path, key: SSlibKey | None) -> list[str]:
    """The envelope's signature (when a key is given), the Statement's shape, and every subject's
    sha256 against the file on disk; the subjects must be every file but what sealing wrote."""
    wrapped = Envelope.from_dict(json.loads((bundle / ATTESTATION).read_text()))
    found = []
    if key is not None:
        try:
            wrapped.verify([key], 1)
        except VerificationError as error:
            found.append(f"signature: {error}")
    proto = json_format.Parse(wrapped.payload, statement_pb2.Statement())
    Statement.copy_from_pb(proto).validate()
    for subject in proto.subject:
        data = (bundle / subject.name).read_bytes()
        if hashlib.sha256(data).hexdigest() != subject.digest["sha256"]:
            found.append(f"digest: {subject.name}")
    on_disk = {p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file()}
    if on_disk - SEALING != {s.name for s in proto.subject}:
        found.append("subjects are not the bundle's files")
    return found


def carried_key(manifest: dict) -> SSlibKey | None:
    """The key a bundle's manifest names (what a third party holds as the team's .pub)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    import base64

    info = manifest.get("signing")
    if not info:
        return None
    public = Ed25519PublicKey.from_public_bytes(base64.b64decode(info["public_key"]))
    return SSlibKey.from_crypto(public, keyid=info["fingerprint"])


def untouched(bundle: Path, manifest: dict) -> bool:
    """Every file the manifest lists is as it was sealed (a test that tampers on purpose leaves a
    bundle this is not true of: that is verify's business)."""
    for name, entry in (manifest.get("files") or {}).items():
        path = bundle / name
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != entry.get("sha256"):
            return False
    on_disk = {p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file()}
    return on_disk - {"manifest.json", "manifest.sig"} == set(manifest.get("files") or {})
