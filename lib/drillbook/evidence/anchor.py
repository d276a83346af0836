"""The ledger head kept outside the results folder, so that a cut or rewritten history shows.

The chain in ``ledger.jsonl`` proves that nothing was taken out of the middle, but whoever can
write the results folder can delete the newest bundles together with their ledger lines, or
rebuild the whole history. The head (how many entries, the last bundle and its manifest digest)
is signed with the signing key when there is one and kept somewhere else: appended to a witness
file after every seal (``$DRILLBOOK_WITNESS``), or written by `drillbook head` into a CI
artifact, a git commit or an object store. `drillbook verify --expect-head FILE` then checks that
the ledger still holds that entry, with that digest.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drillbook import jsonl
from drillbook.errors import ConfigError
from drillbook.evidence import signing
from drillbook.evidence.ledger import SHA256_HEX, LedgerEntry, canonical_json, read_ledger

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from drillbook.evidence.verify import VerifyReport

HEAD_FORMAT = "drillbook-ledger-head/1"
STATED = ("format", "results", "count", "bundle", "manifest_sha256", "sealed_at")


def statement_digest(head: dict[str, Any]) -> str:
    """sha256 of what a head states (everything but its signature), as canonical JSON."""
    return hashlib.sha256(canonical_json({name: head.get(name) for name in STATED})).hexdigest()


def head_of(results_dir: Path, entry: LedgerEntry, key: "Ed25519PrivateKey | None") -> dict[str, Any]:
    """The head of a ledger whose newest entry is entry, signed with key when there is one."""
    head: dict[str, Any] = {"format": HEAD_FORMAT, "results": str(results_dir), "count": entry.seq,
                            "bundle": entry.bundle, "manifest_sha256": entry.manifest_sha256,
                            "sealed_at": entry.sealed_at, "signing": None}
    if key is not None:
        public = key.public_key()
        head["signing"] = {"algorithm": "ed25519", "public_key": signing.public_key_b64(public),
                           "fingerprint": signing.fingerprint(public),
                           "signature": signing.sign(key, statement_digest(head))}
    return head


def current_head(results_dir: Path, signing_key: Path | None) -> dict[str, Any] | None:
    """The signed head of a results folder's ledger as it is now; None for an empty ledger."""
    entries = read_ledger(results_dir)
    if not entries:
        return None
    key = signing.load_private_key(signing_key) if signing_key else None
    return head_of(results_dir, entries[-1], key)


def append_witness(witness: Path, head: dict[str, Any]) -> None:
    """Add a head to the witness file (one JSON line per sealed bundle, locked and fsynced)."""
    jsonl.append(witness, head, durable=True)


def read_head(path: Path, results_dir: Path | None = None) -> dict[str, Any]:
    """A kept head: a JSON file from `drillbook head`, or a witness file (its newest line for
    results_dir, else its newest line). Anything else is one ConfigError line (unusable input)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read the kept ledger head {path}: {error}") from None
    try:
        head = json.loads(text)  # a head written by `drillbook head`
    except json.JSONDecodeError:
        lines = [line for line in text.splitlines() if line.strip()]  # a witness file
        try:
            heads = [json.loads(line) for line in lines]
        except json.JSONDecodeError as error:
            raise ConfigError(f"{path} is not a ledger head or witness file: {error}") from None
        own = [h for h in heads if isinstance(h, dict) and results_dir is not None
               and h.get("results") == str(results_dir)]
        head = (own or heads or [None])[-1]
    if not isinstance(head, dict) or head.get("format") != HEAD_FORMAT:
        raise ConfigError(f"{path} is not a ledger head ({HEAD_FORMAT})")
    if not isinstance(head.get("count"), int) or head["count"] < 1 or not isinstance(head.get("bundle"), str) \
            or not SHA256_HEX.match(str(head.get("manifest_sha256"))):
        raise ConfigError(f"{path} is not a ledger head: count, bundle or manifest_sha256 is missing or malformed")
    return head


def check_head(entries: list[LedgerEntry], head: dict[str, Any], source: str, trusted: set[str] | None,
               require_signed: bool, report: "VerifyReport") -> None:
    """The ledger must still hold the kept head's entry, with its digest; the head's own signature
    must verify (and be by a trusted key when keys are trusted)."""
    count, bundle, digest = head["count"], head["bundle"], head["manifest_sha256"]
    info = head.get("signing")
    if info:
        if not isinstance(info, dict) or not signing.signed_by(info, statement_digest(head), info.get("signature")):
            report.add("ledger", "head-signature-invalid", f"the kept head {source} does not verify against its "
                                                           "signature: it was edited")
        elif trusted is not None and info["fingerprint"] not in trusted:
            report.add("ledger", "head-signature-untrusted", f"the kept head {source} is signed by key "
                                                             f"{info['fingerprint'][:16]}…, which is not trusted")
    elif require_signed:
        report.add("ledger", "head-unsigned", f"the kept head {source} is not signed")
    if count > len(entries):
        report.add("ledger", "history-cut",
                   f"the ledger has {len(entries)} entries but the head kept in {source} names entry {count} "
                   f"({bundle}): the newest {count - len(entries)} bundle(s) and their ledger lines were removed")
        report.head = "cut"
        return
    entry = entries[count - 1]
    if entry.bundle != bundle or entry.manifest_sha256 != digest:
        report.add("ledger", "history-rewritten",
                   f"ledger entry {count} is {entry.bundle} ({entry.manifest_sha256[:12]}…) but the head kept in "
                   f"{source} names {bundle} ({digest[:12]}…): the history was rewritten")
        report.head = "rewritten"
        return
    report.head = f"matches the head kept in {source} (entry {count} of {len(entries)}, {bundle})"
