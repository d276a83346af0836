"""The bundles of a results folder as rows: what ran, where, when, with which verdict and digest."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from drillbook.evidence.bundle import MANIFEST, UNSEALED, bundle_folders
from drillbook.evidence.summary import RunSummary


@dataclass(frozen=True)
class BundleRow:
    path: Path
    runbook: str
    target: str
    status: str
    finished_at: str
    manifest_sha256: str | None
    summary: RunSummary | None

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def verdict(self) -> str:
        if self.status == "unsealed":
            return "UNSEALED"
        return self.summary.verdict if self.summary else ("ERROR" if self.status != "complete" else "—")

    @property
    def reason(self) -> str:
        """Why the verdict is what it is, in one line (empty for a plain PASS)."""
        if self.status == "unsealed":
            return "never sealed: the run was killed before it could seal its evidence"
        if self.status == "no manifest":
            return "no manifest: not a bundle drillbook sealed"
        if self.summary is None:
            return f"sealed {self.status} without a summary"
        if self.status not in ("complete", "interrupted", "killed"):
            return f"sealed {self.status}: {self.summary.reason}" if self.summary.reason else f"sealed {self.status}"
        if self.summary.reason:
            return self.summary.reason
        failed = [check.describe() for check in self.summary.checks if not check.passed]
        return "; ".join(failed)


def read_row(folder: Path) -> BundleRow:
    manifest_path = folder / MANIFEST
    if not manifest_path.exists():
        status = "unsealed" if (folder / UNSEALED).exists() else "no manifest"
        return BundleRow(folder, folder.name.split("_")[1] if "_" in folder.name else "?", "?", status, "", None, None)
    data = manifest_path.read_bytes()
    manifest = json.loads(data)
    try:
        summary = RunSummary.read(folder / "summary.json")
    except (ValueError, TypeError):
        summary = None
    return BundleRow(folder, manifest.get("runbook", "?"), manifest.get("target", "?"), manifest.get("status", "?"),
                     manifest.get("finished_at", ""), hashlib.sha256(data).hexdigest(), summary)


def list_bundles(results_dir: Path) -> list[BundleRow]:
    """Every bundle, newest first."""
    rows = [read_row(folder) for folder in bundle_folders(Path(results_dir))]
    return sorted(rows, key=lambda row: (row.finished_at or row.name, row.name), reverse=True)
