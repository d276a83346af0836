"""The bundles of a results folder as rows: what ran, where, when, with which verdict and digest."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from drillbook.evidence.bundle import MANIFEST, UNSEALED, bundle_folders, read_ledger_text, writer_running
from drillbook.evidence.ledger import LEDGER, LedgerEntry, parse_ledger
from drillbook.evidence.summary import RunSummary

GAMEDAY_PREFIX = "gameday-"  # a game day's own bundle is named for its plan: gameday-<plan>
MISSING = "missing"  # a bundle the ledger names whose folder is gone
RUNNING = "running"  # an unsealed bundle whose writer is still alive: a live run, not yet evidence


@dataclass(frozen=True)
class BundleRow:
    path: Path
    runbook: str
    target: str
    status: str
    finished_at: str
    manifest_sha256: str | None
    summary: RunSummary | None
    exercise: dict | None = None  # the exercise record it was sealed with (drillbook.evidence.exercise)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def control(self) -> str:
        """The control this run counts for, from its runbook's declaration (drillbook.scenarios)."""
        from drillbook.scenarios import control_of

        return control_of(self.runbook)

    @property
    def gameday_plan(self) -> str | None:
        """The plan's name when this is a game day's own bundle (its runs are bundles of their own)."""
        return self.runbook.removeprefix(GAMEDAY_PREFIX) if self.runbook.startswith(GAMEDAY_PREFIX) else None

    @property
    def run_id(self) -> str:
        """The short id that ends a bundle's name: enough to find it in the list of bundles."""
        return self.name.rsplit("_", 1)[-1]

    @property
    def verdict(self) -> str:
        if self.status == "unsealed":
            return "UNSEALED"
        if self.status == MISSING:
            return "MISSING"
        if self.status == RUNNING:
            return "RUNNING"
        return self.summary.verdict if self.summary else ("ERROR" if self.status != "complete" else "—")

    @property
    def reason(self) -> str:
        """Why the verdict is what it is, in one line (empty for a plain PASS)."""
        if self.status == "unsealed":
            return "never sealed: the run was killed before it could seal its evidence"
        if self.status == MISSING:
            return "sealed into the ledger, and its folder is gone"
        if self.status == RUNNING:
            return "still running: not evidence yet, and not counted"
        if self.status == "no manifest":
            return "no manifest: not a bundle drillbook sealed"
        if self.status == "damaged":
            return "its manifest cannot be read"
        if self.summary is None:
            return f"sealed {self.status} without a summary"
        if self.status not in ("complete", "interrupted", "killed", "unwritten"):
            return f"sealed {self.status}: {self.summary.reason}" if self.summary.reason else f"sealed {self.status}"
        if self.summary.reason:
            return self.summary.reason
        failed = [check.describe() for check in self.summary.checks if not check.passed]
        return "; ".join(failed)


def run_passed(row: BundleRow, failed: set[str]) -> bool:
    """Whether a run counts as passed: PASS, sealed complete, and its bundle verifies (failed:
    the bundles that fail verification)."""
    return row.verdict == "PASS" and row.status == "complete" and row.name not in failed


def shown_verdict(row: BundleRow, failed: set[str]) -> str:
    """The verdict as the report shows it: UNVERIFIED for a bundle that fails verification."""
    if row.name in failed:
        return "UNVERIFIED"
    return row.verdict


def _unsealed_row(folder: Path) -> BundleRow:
    """A folder without a manifest: what its marker says (never its summary, which nothing attests)."""
    marker = folder / UNSEALED
    named: dict = {}
    if marker.is_file():
        try:
            loaded = json.loads(marker.read_text() or "{}")
            named = loaded if isinstance(loaded, dict) else {}
        except (json.JSONDecodeError, UnicodeDecodeError):
            named = {}
    runbook = str(named.get("runbook") or (folder.name.split("_")[1] if folder.name.count("_") >= 2 else "?"))
    status = (RUNNING if writer_running(named) else "unsealed") if marker.is_file() else "no manifest"
    return BundleRow(folder, runbook, str(named.get("target", "?")), status, str(named.get("started_at", "")), None,
                     None)


def read_row(folder: Path) -> BundleRow:
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        return _unsealed_row(folder)
    data = manifest_path.read_bytes()
    try:
        manifest = json.loads(data)
        if not isinstance(manifest, dict):
            raise ValueError("not an object")
    except (ValueError, UnicodeDecodeError):
        return BundleRow(folder, "?", "?", "damaged", "", hashlib.sha256(data).hexdigest(), None)
    try:
        summary = RunSummary.read(folder / "summary.json")
    except (ValueError, TypeError, UnicodeDecodeError):
        summary = None
    exercise = manifest.get("exercise")
    return BundleRow(folder, str(manifest.get("runbook", "?")), str(manifest.get("target", "?")),
                     str(manifest.get("status", "?")), str(manifest.get("finished_at", "")),
                     hashlib.sha256(data).hexdigest(), summary, exercise if isinstance(exercise, dict) else None)


def missing_rows(results_dir: Path, present: set[str], ledger: list[LedgerEntry] | None = None) -> list[BundleRow]:
    """The bundles the ledger names whose folders are gone: each is still a run, of the runbook
    and target its name says, sealed when the ledger says, that did not pass. (Deleting a FAIL
    bundle must not raise a score.) A damaged ledger gives what it still lets be read.
    ledger: its entries when already read (verification reads them once, under the ledger's lock)."""
    if ledger is not None:
        entries = ledger
    elif (Path(results_dir) / LEDGER).is_file():
        entries, _ = parse_ledger(read_ledger_text(Path(results_dir)))
    else:
        return []
    rows = []
    for entry in entries:
        if entry.bundle in present:
            continue
        parts = entry.bundle.split("_")
        runbook, target = (parts[1], "_".join(parts[2:-1]) or "?") if len(parts) >= 4 else ("?", "?")
        rows.append(BundleRow(Path(results_dir) / entry.bundle, runbook, target, MISSING, entry.sealed_at,
                              entry.manifest_sha256, None))
    return rows


def list_bundles(results_dir: Path, ledger: list[LedgerEntry] | None = None) -> list[BundleRow]:
    """Every bundle, newest first: each folder, and each bundle the ledger names whose folder is
    gone (from `ledger` when its entries were already read)."""
    rows = [read_row(folder) for folder in bundle_folders(Path(results_dir))]
    rows += missing_rows(results_dir, {row.name for row in rows}, ledger)
    return sorted(rows, key=lambda row: (row.finished_at or row.name, row.name), reverse=True)


@dataclass(frozen=True)
class GameDayRows:
    """One game day as its own bundle tells it: the summary, the runs it made, what it never ran."""

    summary: BundleRow
    runs: list[BundleRow]
    not_run: list[str]


def gameday_rows(summary_bundle: Path) -> GameDayRows:
    summary = read_row(summary_bundle)
    metrics = summary.summary.metrics if summary.summary is not None else {}
    runs = [read_row(summary_bundle.parent / str(run["bundle"])) for run in metrics.get("runs", [])]
    return GameDayRows(summary, runs, [str(name) for name in metrics.get("not_run", [])])
