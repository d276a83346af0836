"""What every integration test is held to after it ran."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest


def _sealed_as_written(bundle: Path) -> bool:
    """summary.json is the one the bundle was sealed with (a test that forges or tampers with a
    copy on purpose leaves a bundle whose digest no longer matches: verify's business, not this)."""
    files = json.loads((bundle / "manifest.json").read_text()).get("files") or {}
    kept = files.get("summary.json")
    return bool(kept) and hashlib.sha256((bundle / "summary.json").read_bytes()).hexdigest() == kept.get("sha256")


@pytest.fixture(autouse=True)
def every_bundle_recomputes(request: pytest.FixtureRequest):
    """Every sealed bundle a test wrote under its tmp_path: `drillbook verify --recompute` derives
    each judged figure again from the kept observations and finds no disagreement, and the
    reference in-toto and DSSE libraries accept its attestation."""
    # asked for before the test runs, so that tmp_path is still there when this looks at it
    root: Path | None = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if root is None:
        return
    from drillbook.evidence.recompute import recompute_bundle

    disagreeing = [f"{manifest.parent.name}: {figure.describe()}"
                   for manifest in root.rglob("manifest.json")
                   if (manifest.parent / "summary.json").exists() and _sealed_as_written(manifest.parent)
                   for figure in recompute_bundle(manifest.parent) if not figure.agrees]
    assert not disagreeing, disagreeing
    # ... and its in-toto attestation holds for the reference libraries: the Statement, every
    # subject's digest and, for a signed bundle, the DSSE signature by the key that signed it.
    from tests.attestations import carried_key, third_party_check, untouched

    attested = []
    for path in root.rglob("manifest.json"):
        try:
            manifest = json.loads(path.read_text())
        except ValueError:
            continue
        if isinstance(manifest, dict) and isinstance(manifest.get("files"), dict) and untouched(path.parent, manifest):
            attested += [f"{path.parent.name}: {problem}"
                         for problem in third_party_check(path.parent, carried_key(manifest))]
    assert not attested, attested
