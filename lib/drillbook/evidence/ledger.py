"""The ledger of a results folder: one JSON line per sealed bundle, each naming the manifest
digest of the bundle before it, so that the bundles form one chain.

Kept apart from the writer (drillbook.evidence.bundle) so that the kept head
(drillbook.evidence.anchor) and verify read it without the writer, and nothing imports in a circle.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drillbook.errors import EvidenceError

LEDGER = "ledger.jsonl"


def canonical_json(value: Any) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str) + "\n").encode()


@dataclass(frozen=True)
class LedgerEntry:
    seq: int
    bundle: str
    manifest_sha256: str
    previous_manifest_sha256: str | None
    sealed_at: str
    status: str


BUNDLE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


def _entry(data: Any) -> LedgerEntry:
    """One ledger line as an entry, or ValueError saying what is wrong with it."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    try:
        entry = LedgerEntry(**data)
    except TypeError:
        raise ValueError(f"fields {sorted(data)} are not those of a ledger entry") from None
    if not isinstance(entry.seq, int) or not isinstance(entry.bundle, str) or not isinstance(entry.status, str):
        raise ValueError("a field has the wrong type")
    if not SHA256_HEX.match(str(entry.manifest_sha256)) or not (
            entry.previous_manifest_sha256 is None or SHA256_HEX.match(str(entry.previous_manifest_sha256))):
        raise ValueError("a digest is not 64 hex digits")
    if not BUNDLE_NAME.match(entry.bundle):
        raise ValueError(f"bundle {entry.bundle!r} is not the name of a folder inside the results folder")
    return entry


def parse_ledger(text: str) -> tuple[list[LedgerEntry], list[str]]:
    """Every readable entry of a ledger, and one line for each line that is not one (a cut or
    edited line, a bundle name that would lead outside the results folder)."""
    entries: list[LedgerEntry] = []
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entries.append(_entry(json.loads(line)))
        except ValueError as error:  # json.JSONDecodeError is a ValueError
            problems.append(f"line {number} is not a ledger entry: {error}")
    return entries, problems


def read_ledger(results_dir: Path) -> list[LedgerEntry]:
    """The ledger's entries; a damaged ledger is an EvidenceError (nothing is sealed onto it)."""
    path = results_dir / LEDGER
    if not path.exists():
        return []
    entries, problems = parse_ledger(path.read_text(encoding="utf-8", errors="replace"))
    if problems:
        raise EvidenceError(f"{path} is damaged ({problems[0]}); `drillbook verify` shows every problem")
    return entries
