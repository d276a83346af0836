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
    each judged figure again from the kept observations and finds no disagreement."""
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
