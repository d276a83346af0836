"""sha256 of files, the one digest drillbook uses for backups and evidence."""

from __future__ import annotations

import hashlib
from pathlib import Path


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes (hashlib.file_digest reads it in blocks)."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()
