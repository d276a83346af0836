"""JSON Lines: the one way drillbook appends a record to a journal and reads the journal back.

A record is one JSON object on one line, written whole with its newline. Reading keeps complete
lines only: what follows the last newline (a writer killed mid-line, a disk that filled) and a
line that is not a JSON object are left out. An append after such a cut starts a line of its
own, so that a cut line never swallows the record written after it.

The fault ledger, the process ledger and the witness file append `durable`: under an exclusive
lock, and on disk (fsync) before the fault or process they record is relied on. The evidence
ledger is read by drillbook.evidence.ledger instead, which names every damaged line rather than
leaving it out: there a damaged line is a finding.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any


def append(path: Path, record: dict[str, Any], durable: bool = False) -> None:
    """Append one record as one line, keys sorted (values JSON cannot hold are written as text)."""
    line = (json.dumps(record, sort_keys=True, default=str) + "\n").encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab+") as handle:
        if durable:
            fcntl.flock(handle, fcntl.LOCK_EX)
        end = handle.seek(0, os.SEEK_END)
        if end:
            handle.seek(end - 1)
            if handle.read(1) != b"\n":  # the last writer was cut mid-line: leave its fragment alone
                line = b"\n" + line
        handle.write(line)  # append mode: always at the end
        if durable:
            handle.flush()
            os.fsync(handle.fileno())


def parse(data: bytes) -> list[dict[str, Any]]:
    """The records of complete lines, in order (see the module's docstring for what is left out)."""
    records = []
    for line in data.split(b"\n")[:-1]:  # the piece after the last newline is cut, or empty
        try:
            record = json.loads(line)
        except ValueError:  # not JSON, not UTF-8, or blank
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def read(path: Path) -> list[dict[str, Any]]:
    """The records of a journal's complete lines, in order; none when it does not exist."""
    try:
        return parse(path.read_bytes())
    except FileNotFoundError:
        return []


__all__ = ["append", "parse", "read"]
