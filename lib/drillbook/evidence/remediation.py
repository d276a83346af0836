"""Exercise records: findings and remediation items added after a run, without touching its
sealed bundle, and the remediation items the verdicts open and close by themselves.

`records.jsonl` in the results folder is an append-only, chained, signed record: each line names
a bundle the ledger holds (by name and manifest digest), says what was found or what must be
done (owner, due date), who said it and when, and carries the sha256 of the line before it and,
with a signing key, an Ed25519 signature of its own digest. `verify` checks the chain, the
signatures and that every bundle named is the one the ledger holds (`check_records`).

Remediation items (`remediation_items`, a pure function of the runs and the records):

- a FAIL (a measured miss) opens an item on its control and target, unless one is open there;
- the next run of that control on that target that passes (PASS, sealed complete, verifies)
  closes it, naming the closing run; further FAILs in between are added to the open item;
- a remediation record on a run of an item gives that item its owner, due date and action; a
  remediation record on a run that opened none (an ERROR, a PASS that was marginal) opens an
  item of its own, closed like the others by the next passing run after the record.

ERROR, ABORTED and INTERRUPTED open nothing by themselves: they are what could not be judged,
not a measured miss.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from drillbook.errors import ConfigError
from drillbook.evidence import signing
from drillbook.evidence.catalog import MISSING, RUNNING, BundleRow, run_passed
from drillbook.evidence.ledger import LedgerEntry, canonical_json

RECORDS = "records.jsonl"
FINDING, REMEDIATION = "finding", "remediation"
RECORDS_FINDING = "records"  # the bundle name of verify's findings about the records file itself


def line_digest(entry: dict[str, Any]) -> str:
    """The sha256 of a record line without its signature: what the signature signs and the next
    line chains to."""
    return hashlib.sha256(canonical_json({k: v for k, v in entry.items() if k != "signature"})).hexdigest()


def read_records(results_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The records as written, and what could not be read (a line that is not a JSON object)."""
    path = Path(results_dir) / RECORDS
    if not path.is_file():
        return [], []
    entries, problems = [], []
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            if not isinstance(entry, dict):
                raise ValueError("not an object")
        except ValueError:
            problems.append(f"line {number} is not a JSON object")
            continue
        entries.append(entry)
    return entries, problems


def append_record(results_dir: Path, row: BundleRow, kind: str, *, text: str, author: str,
                  owner: str | None = None, due: date | None = None, signing_key: Path | None = None,
                  now: datetime | None = None) -> dict[str, Any]:
    """Add one record about a sealed run; chained to the line before it and signed with the key
    (when one is configured). The bundle is never touched."""
    if row.status in (MISSING, RUNNING, "unsealed", "no manifest", "damaged") or not row.manifest_sha256:
        raise ConfigError(f"{row.name} is not a sealed bundle ({row.status}): records name sealed runs only")
    key = signing.load_private_key(signing_key) if signing_key else None
    path = Path(results_dir) / RECORDS
    with open(path, "a+", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        entries, problems = read_records(results_dir)
        if problems:
            raise ConfigError(f"{path} is damaged ({problems[0]}); nothing is added to a damaged record")
        entry: dict[str, Any] = {
            "seq": len(entries) + 1, "at": (now or datetime.now(timezone.utc)).isoformat(timespec="seconds")
            .replace("+00:00", "Z"), "kind": kind, "bundle": row.name, "manifest_sha256": row.manifest_sha256,
            "control": row.control, "target": row.target, "text": text, "author": author,
            "owner": owner, "due": due.isoformat() if due else None,
            "previous": line_digest(entries[-1]) if entries else None,
            "signing": None if key is None else {"algorithm": "ed25519",
                                                 "public_key": signing.public_key_b64(key.public_key()),
                                                 "fingerprint": signing.fingerprint(key.public_key())}}
        if key is not None:
            entry["signature"] = signing.sign(key, line_digest(entry))
        handle.seek(0, os.SEEK_END)
        handle.write(json.dumps(entry, sort_keys=True) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    return entry


def check_records(results_dir: Path, ledger: list[LedgerEntry], trusted: set[str] | None) -> list[tuple[str, str]]:
    """What is wrong with the records file, as (kind, detail): a damaged line, a broken chain (a
    line changed, removed or put elsewhere), a signature that does not verify or is not by a
    trusted key, a bundle the ledger does not hold or holds with another digest."""
    entries, problems = read_records(results_dir)
    found = [("records-damaged", f"{RECORDS} {problem}") for problem in problems]
    held = {entry.bundle: entry.manifest_sha256 for entry in ledger}
    previous: str | None = None
    for number, entry in enumerate(entries, 1):
        if entry.get("previous") != previous or entry.get("seq") != number:
            found.append(("records-chain-broken", f"record {entry.get('seq')} does not follow the record before it: "
                                                  "a record was changed, removed or moved"))
        previous = line_digest(entry)
        info = entry.get("signing")
        if info:
            if not signing.signed_by(info, previous, entry.get("signature")):
                found.append(("records-signature-invalid", f"record {entry.get('seq')} does not verify against "
                                                           "the key it names"))
            elif trusted is not None and info.get("fingerprint") not in trusted:
                found.append(("records-signature-untrusted", f"record {entry.get('seq')} is signed by a key that "
                                                             "is not trusted"))
        bundle = str(entry.get("bundle"))
        if held.get(bundle) != entry.get("manifest_sha256"):
            found.append(("records-bundle-unknown", f"record {entry.get('seq')} names {bundle}, which the ledger "
                                                    + ("holds with another manifest digest" if bundle in held
                                                       else "does not hold")))
    return found


@dataclass
class RemediationItem:
    """Work owed on one control on one target, from the run (or record) that opened it to the
    passing run that closed it."""

    control: str
    target: str
    opened_at: str
    opened_by: BundleRow | None  # the FAIL that opened it (None: a remediation record did)
    failures: list[BundleRow] = field(default_factory=list)
    closed_by: BundleRow | None = None
    owner: str | None = None
    due: str | None = None
    actions: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)

    @property
    def open(self) -> bool:
        return self.closed_by is None

    @property
    def closed_at(self) -> str | None:
        return self.closed_by.finished_at if self.closed_by is not None else None

    def age_days(self, now: datetime) -> float:
        """Days open: until now while open, until the closing run once closed."""
        end = _moment(self.closed_at) if self.closed_at else now
        return max(0.0, (end - _moment(self.opened_at)).total_seconds() / 86400)

    def overdue(self, now: datetime) -> bool:
        return self.open and self.due is not None and now.date() > date.fromisoformat(self.due)

    @property
    def key(self) -> str:
        """A stable name: control, target and the bundle (or time) that opened it."""
        return f"{self.control}@{self.target}#{self.opened_by.run_id if self.opened_by else self.opened_at}"


def _moment(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def remediation_items(rows: Iterable[BundleRow], records: list[dict[str, Any]], failed: set[str]) -> list[RemediationItem]:
    """Every remediation item of a results folder, oldest first (see the module's rules)."""
    runs = sorted((r for r in rows if r.status not in (RUNNING, MISSING) and r.finished_at),
                  key=lambda r: (r.finished_at, r.name))
    pending = sorted((r for r in records if r.get("kind") == REMEDIATION), key=lambda r: str(r.get("at")))
    items: list[RemediationItem] = []
    open_on: dict[tuple[str, str], RemediationItem] = {}
    member: dict[str, RemediationItem] = {}  # bundle name -> the item it opened or failed in

    def manual_items_until(moment: str) -> None:
        """Open an item for each remediation record made before moment whose run belongs to none."""
        while pending and str(pending[0].get("at")) <= moment:
            record = pending.pop(0)
            if str(record.get("bundle")) in member:
                continue
            place = (str(record.get("control")), str(record.get("target")))
            item = open_on.get(place)
            if item is None:
                item = RemediationItem(place[0], place[1], str(record.get("at")), None)
                items.append(item)
                open_on[place] = item
            member[str(record.get("bundle"))] = item

    for row in runs:
        manual_items_until(row.finished_at)
        place = (row.control, row.target)
        item = open_on.get(place)
        if row.verdict == "FAIL":
            if item is None:
                item = RemediationItem(row.control, row.target, row.finished_at, row)
                items.append(item)
                open_on[place] = item
            else:
                item.failures.append(row)
            member[row.name] = item
        elif item is not None and run_passed(row, failed):
            item.closed_by = row
            del open_on[place]
    manual_items_until("\uffff")
    for record in records:  # what the records say of the runs of each item, in the order said
        item = member.get(str(record.get("bundle")))
        if item is not None:
            _annotate(item, record)
    return items


def _annotate(item: RemediationItem, record: dict[str, Any]) -> None:
    text = str(record.get("text") or "")
    if record.get("kind") == REMEDIATION:
        item.owner, item.due = record.get("owner") or item.owner, record.get("due") or item.due
        if text and text not in item.actions:
            item.actions.append(text)
    elif text and text not in item.findings:
        item.findings.append(text)
