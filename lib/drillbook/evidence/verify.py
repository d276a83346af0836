"""Check a results folder (or one bundle): file digests, manifest digests, the chain, signatures,
each bundle's in-toto attestation, the exercise records (findings and remediation, chained and
signed like the ledger) and the ledger head kept outside.

Each problem is a Finding that names the bundle and, where it can, the file; ``ok`` holds only
when there is no error-level finding. Trust is explicit: signatures are checked against the
public keys the auditor names, never a private key that happens to be on the machine; without
one, signatures are "not checked" (a warning, an error with ``require_signed``); with one, a
signature cannot be dropped (an unsigned bundle after a signed one is an error). Seal times after
the verifier's clock or out of ledger order are findings. An unsealed
bundle (its run was killed before sealing) is a warning: it is reported, it cannot be trusted,
and it does not break the chain. A damaged ledger, a ledger line that names a path outside the
results folder, a hidden folder or a symlink are findings, never a traceback.
"""

from __future__ import annotations

import hashlib
import json
import time
from datetime import datetime
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drillbook.evidence import signing
from drillbook.evidence.anchor import check_head
from drillbook.evidence.attestation import problems as attestation_problems
from drillbook.evidence.bundle import MANIFEST, SIGNATURE, UNSEALED, read_ledger_text, sha256_file, writer_running
from drillbook.evidence.ledger import BUNDLE_NAME, LEDGER, LedgerEntry, parse_ledger
from drillbook.evidence.remediation import RECORDS, RECORDS_FINDING, check_records

COMPLETE = "complete"
# A sealed bundle holds its manifest, its signature and what the manifest lists: nothing else, an
# unsealed marker neither (sealing removes it before the ledger names the bundle).
SEALED_RESERVED = {MANIFEST, SIGNATURE}
# How far a seal's time may run ahead of the verifier's clock, or behind the seal before it in the
# ledger, before it is a finding (clocks of two machines, NTP steps).
CLOCK_SKEW_S = 300.0
LEDGER_FINDING = "ledger"  # the bundle name of findings about the ledger itself
TRUSTED, UNCHECKED, UNSIGNED = "signed by a trusted key", "signed, not checked", "unsigned"


@dataclass(frozen=True)
class Finding:
    bundle: str
    kind: str
    detail: str
    severity: str = "error"


@dataclass
class VerifyReport:
    checked: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    states: dict[str, str] = field(default_factory=dict)  # bundle -> complete, interrupted, killed, unwritten, incomplete, unsealed
    signatures: dict[str, str] = field(default_factory=dict)  # bundle -> TRUSTED, UNCHECKED, UNSIGNED or a problem
    ledger: list[LedgerEntry] = field(default_factory=list)  # the ledger's entries as read, once, under its lock
    head: str | None = None  # what the kept ledger head showed; None: no head was given
    keys_trusted: int = 0

    @property
    def entries(self) -> int:
        return len(self.ledger)

    def counts(self) -> dict[str, int]:
        """How many bundles are in each state."""
        return _tally(self.states.values())

    def signature_counts(self) -> dict[str, int]:
        return _tally(self.signatures.values())

    @property
    def not_complete(self) -> list[str]:
        """Bundles whose run did not end as planned: their evidence is partial."""
        return sorted(name for name, state in self.states.items() if state != COMPLETE)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def failed_bundles(self) -> set[str]:
        return {f.bundle for f in self.errors}

    def add(self, bundle: str, kind: str, detail: str, severity: str = "error") -> None:
        self.findings.append(Finding(bundle, kind, detail, severity))


def _tally(values: Any) -> dict[str, int]:
    counted: dict[str, int] = {}
    for value in values:
        counted[value] = counted.get(value, 0) + 1
    return counted


def _load_manifest(folder: Path) -> tuple[dict[str, Any] | None, str | None]:
    path = folder / MANIFEST
    if not path.is_file():
        return None, None
    data = path.read_bytes()
    try:
        manifest = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        manifest = {}
    return manifest if isinstance(manifest, dict) else {}, hashlib.sha256(data).hexdigest()


def check_files(folder: Path, manifest: dict[str, Any], report: VerifyReport) -> None:
    listed = manifest.get("files")
    if not isinstance(listed, dict):
        report.add(folder.name, "manifest-invalid", f"{MANIFEST} lists no files")
        listed = {}
    for relative, expected in sorted(listed.items()):
        path = folder / relative
        if ".." in Path(relative).parts or Path(relative).is_absolute():
            report.add(folder.name, "manifest-invalid", f"{relative} is a path outside the bundle")
        elif path.is_symlink():
            report.add(folder.name, "file-symlink", f"{relative} is a symlink, not a file the bundle holds")
        elif not path.is_file():
            report.add(folder.name, "file-missing", f"{relative} is listed in the manifest but missing")
        elif not isinstance(expected, dict) or sha256_file(path) != expected.get("sha256"):
            report.add(folder.name, "file-changed", f"{relative} differs from its recorded sha256")
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder).as_posix()
        if path.is_symlink() and relative not in listed:
            report.add(folder.name, "file-symlink", f"{relative} is a symlink that is not part of the bundle")
        elif path.is_file() and relative not in SEALED_RESERVED and relative not in listed:
            report.add(folder.name, "file-unexpected", f"{relative} is not listed in the manifest")


def check_signature(folder: Path, manifest: dict[str, Any], digest: str, trusted: set[str] | None,
                    require_signed: bool, report: VerifyReport) -> None:
    """A signature must verify against the key it names; that key must be trusted when the auditor
    named keys. Unsigned bundles are a warning, or an error when signatures are required."""
    info = manifest.get("signing")
    if not info:
        report.signatures[folder.name] = UNSIGNED
        if require_signed:
            report.add(folder.name, "signature-missing", "bundle is not signed and signatures are required")
        elif trusted is not None:
            report.add(folder.name, "unsigned", "bundle is not signed: only the chain vouches for it",
                       severity="warning")
        return
    path = folder / SIGNATURE
    if not path.is_file():
        report.signatures[folder.name] = "signature missing"
        report.add(folder.name, "signature-missing", f"{SIGNATURE} is missing")
        return
    try:
        signature = json.loads(path.read_text())
        valid = isinstance(signature, dict) and signature.get("fingerprint") == info.get("fingerprint") \
            and signing.signed_by(info, digest, signature.get("signature"))
    except (ValueError, AttributeError):  # not JSON, or a signing block that is not a mapping
        valid = False
    if not valid:
        report.signatures[folder.name] = "signature invalid"
        report.add(folder.name, "signature-invalid", f"{SIGNATURE} does not verify against the manifest digest")
    elif trusted is None:
        report.signatures[folder.name] = UNCHECKED
    elif info["fingerprint"] not in trusted:
        report.signatures[folder.name] = "untrusted key"
        report.add(folder.name, "signature-untrusted", f"signed by key {info['fingerprint'][:16]}…, which is not trusted")
    else:
        report.signatures[folder.name] = TRUSTED


def check_downgrade(entries: list[LedgerEntry], trusted: set[str] | None, report: VerifyReport) -> None:
    """With trusted keys given, a signature cannot be dropped: an unsigned bundle sealed after one
    signed by a trusted key is an error (a forged bundle with its signature removed), and so is a
    history with no bundle signed by a trusted key at all. Unsigned bundles from before the first
    signed one stay a warning: the history from before the team made its key."""
    if trusted is None:
        return
    order = [entry.bundle for entry in entries if entry.bundle in report.signatures]
    first = next((i for i, name in enumerate(order) if report.signatures[name] == TRUSTED), None)
    if first is None:
        if any(report.signatures[name] == UNSIGNED for name in order):
            report.add(LEDGER_FINDING, "signature-downgrade", "trusted keys were given but no bundle is signed by "
                                                            "one: a history sealed without signatures vouches for nothing")
        return
    for name in order[first + 1:]:
        if report.signatures[name] == UNSIGNED:
            report.add(name, "signature-downgrade", f"unsigned, but sealed after {order[first]}, which a trusted key "
                                                    "signed: a signature cannot be dropped")


def check_seal_times(entries: list[LedgerEntry], report: VerifyReport, now: float | None = None) -> None:
    """A seal dated after the verifier's clock, or well before the seal the ledger puts before it,
    is a finding: a clock set wrong (or set on purpose) would stretch or reorder the history."""
    now = time.time() if now is None else now
    previous: tuple[str, float] | None = None
    for entry in entries:
        try:
            at = datetime.fromisoformat(entry.sealed_at.replace("Z", "+00:00")).timestamp()
        except (ValueError, AttributeError):
            report.add(entry.bundle, "seal-time-invalid", f"sealed_at {entry.sealed_at!r} is not a time")
            continue
        if at > now + CLOCK_SKEW_S:
            report.add(entry.bundle, "seal-time-future", f"sealed at {entry.sealed_at}, after this verification's "
                                                         "clock: the sealing machine's clock was wrong")
        if previous is not None and at < previous[1] - CLOCK_SKEW_S:
            report.add(entry.bundle, "seal-time-order", f"sealed at {entry.sealed_at}, before {previous[0]}, which "
                                                        "the ledger puts before it")
        previous = (entry.bundle, at)


def check_bundle(folder: Path, entry: LedgerEntry, trusted: set[str] | None, require_signed: bool,
                 report: VerifyReport) -> None:
    if folder.is_symlink():
        report.add(entry.bundle, "bundle-symlink", "bundle folder is a symlink, not the sealed folder")
        return
    if not folder.is_dir():
        report.add(entry.bundle, "bundle-missing", "bundle is in the ledger but its folder is missing")
        return
    manifest, digest = _load_manifest(folder)
    if manifest is None or digest is None:
        report.add(entry.bundle, "manifest-missing", f"{MANIFEST} is missing")
        return
    report.states[entry.bundle] = str(manifest.get("status", "unknown"))
    if digest != entry.manifest_sha256:
        report.add(entry.bundle, "manifest-changed", f"{MANIFEST} differs from the digest in the ledger")
    linked = (manifest.get("previous") or {}).get("manifest_sha256") if isinstance(manifest.get("previous"), dict) \
        else None
    if linked != entry.previous_manifest_sha256:
        report.add(entry.bundle, "chain-broken", "the manifest's previous-bundle digest disagrees with the ledger")
    check_files(folder, manifest, report)
    check_signature(folder, manifest, digest, trusted, require_signed, report)
    for kind, detail in attestation_problems(folder, manifest):
        report.add(entry.bundle, kind, detail)


def check_chain(results_dir: Path, entries: list[LedgerEntry], report: VerifyReport, trusted: set[str] | None,
                require_signed: bool = False, only: set[str] | None = None) -> set[str]:
    seen: set[str] = set()
    previous_digest: str | None = None
    for number, entry in enumerate(entries, 1):
        if entry.bundle in seen:
            report.add(entry.bundle, "ledger-duplicate", f"ledger entry {number} names {entry.bundle} a second time")
            continue
        seen.add(entry.bundle)
        if entry.previous_manifest_sha256 != previous_digest or entry.seq != number:
            report.add(entry.bundle, "chain-broken",
                       f"ledger line {entry.seq} does not follow the line before it: a bundle or ledger line "
                       f"before {entry.bundle} was removed")
        previous_digest = entry.manifest_sha256
        if only is not None and entry.bundle not in only:
            continue
        report.checked.append(entry.bundle)
        check_bundle(results_dir / entry.bundle, entry, trusted, require_signed, report)
    return seen


def _read_entries(results_dir: Path, report: VerifyReport) -> list[LedgerEntry]:
    path = results_dir / LEDGER
    if path.is_symlink() or path.exists() and not path.is_file():
        report.add(LEDGER_FINDING, "ledger-damaged", f"{LEDGER} is not a plain file")
        return []
    if not path.exists():
        return []
    entries, problems = parse_ledger(read_ledger_text(results_dir))
    for problem in problems:
        report.add(LEDGER_FINDING, "ledger-damaged", f"{LEDGER} {problem}")
    return entries


def _unledgered(results_dir: Path, seen: set[str], report: VerifyReport, trusted: set[str] | None,
                require_signed: bool) -> None:
    """Everything in the results folder that the ledger does not account for."""
    for path in sorted(results_dir.iterdir()):
        if path.name in seen or path.name in (LEDGER, RECORDS):
            continue
        if path.is_symlink():
            report.add(path.name, "symlink", "a symlink in the results folder is not evidence drillbook sealed")
        elif not path.is_dir():
            if not path.name.startswith("."):
                report.add(path.name, "stray-file", "a file in the results folder that is not a bundle",
                           severity="warning")
        elif path.name.startswith(".") or not BUNDLE_NAME.match(path.name):
            report.checked.append(path.name)
            report.add(path.name, "not-in-ledger", "a hidden or oddly named folder in the results folder, not "
                                                   "a bundle of the ledger")
        else:
            report.checked.append(path.name)
            _check_unsealed(path, report, trusted, require_signed)


def _sealed_since(folder: Path, report: VerifyReport, trusted: set[str] | None, require_signed: bool) -> bool:
    """A folder with a manifest that the ledger read at the start did not name may have been
    sealed while this verification ran: the ledger read again (after any seal in progress) names
    it then, and it is checked against that entry."""
    if not (folder / MANIFEST).is_file():
        return False
    entries, _ = parse_ledger(read_ledger_text(folder.parent))
    entry = next((e for e in entries if e.bundle == folder.name), None)
    if entry is None:
        return False
    check_bundle(folder, entry, trusted, require_signed, report)
    return True


def _check_unsealed(folder: Path, report: VerifyReport, trusted: set[str] | None = None,
                    require_signed: bool = False) -> None:
    marker = folder / UNSEALED
    if _sealed_since(folder, report, trusted, require_signed):
        return
    if not marker.is_file() or (folder / MANIFEST).exists():
        report.add(folder.name, "not-in-ledger", "bundle folder is not in the ledger")
        return
    try:
        named = json.loads(marker.read_text())
        runs = isinstance(named, dict) and bool(named.get("run_id")) and bool(named.get("runbook"))
    except (json.JSONDecodeError, UnicodeDecodeError, OSError):
        runs, named = False, {}
    if not runs:
        if _sealed_since(folder, report, trusted, require_signed):  # its marker went as it was sealed
            return
        report.add(folder.name, "not-in-ledger", f"its {UNSEALED} marker names no run: not a bundle drillbook began")
        return
    if writer_running(named):
        report.add(folder.name, "running", f"a run in progress (pid {named['pid']}): not evidence yet, not verified",
                   severity="warning")
        return
    report.states[folder.name] = "unsealed"
    report.add(folder.name, "unsealed", "run ended before sealing (no manifest); contents not attested",
               severity="warning")


def verify_path(path: Path, trusted: set[str] | None = None, *, require_signed: bool = False,
                expected_head: dict[str, Any] | None = None, head_source: str = "") -> VerifyReport:
    """Verify a results folder (with ledger.jsonl), or a single bundle inside one.

    trusted: fingerprints of the public keys the auditor trusts (None: signatures are checked
    only against the key each bundle carries, which says nothing about who signed it).
    expected_head: a ledger head kept outside the results folder (`drillbook.evidence.anchor`)."""
    path = Path(path)
    report = VerifyReport(keys_trusted=len(trusted or ()))
    whole = (path / LEDGER).exists() or not (path / MANIFEST).exists() and not (path / UNSEALED).exists()
    results_dir, only = (path, None) if whole else (path.parent, {path.name})
    entries = report.ledger = _read_entries(results_dir, report)
    seen = check_chain(results_dir, entries, report, trusted, require_signed, only)
    if only is None and results_dir.is_dir():
        _unledgered(results_dir, seen, report, trusted, require_signed)
        for kind, detail in check_records(results_dir, entries, trusted):
            report.add(RECORDS_FINDING, kind, detail)
    elif path.name not in seen:
        report.checked.append(path.name)
        _check_unsealed(path, report, trusted, require_signed)
    check_downgrade(entries, trusted, report)
    check_seal_times(entries, report)
    if trusted is None and report.signatures:
        signed = sum(1 for state in report.signatures.values() if state != UNSIGNED)
        carried = (f"{signed} signed bundle(s) were checked only against the key each carries, which anyone can "
                   "replace") if signed else "no bundle is signed"
        report.add(LEDGER_FINDING, "signatures-unchecked",
                   "signatures not checked: no trusted public key was given (--public-key or $DRILLBOOK_TRUSTED_KEYS); "
                   + carried, severity="error" if require_signed else "warning")
    if expected_head is not None:
        check_head(entries, expected_head, head_source or "the kept head", trusted, require_signed, report)
    return report


@dataclass
class EvidenceSource:
    """Where evidence was read from when that is not a local results folder (an object store):
    the findings that place adds to verification, and the ledger head it keeps."""

    name: str
    findings: list[Finding] = field(default_factory=list)
    head: dict[str, Any] | None = None


def recompute_figures(path: Path, report: VerifyReport) -> int:
    """`--recompute`: derive every judged figure of each checked bundle again from its raw
    observations (drillbook.evidence.recompute); a figure that disagrees with summary.json is an
    error finding. Returns how many figures were recomputed."""
    from drillbook.evidence.recompute import recompute_bundle

    path = Path(path)
    results_dir = path if not (path / MANIFEST).exists() else path.parent
    counted = 0
    for name in sorted(set(report.checked)):
        for figure in recompute_bundle(results_dir / name):
            counted += 1
            if not figure.agrees:
                report.add(name, "figure-disagrees", figure.describe())
    return counted


def verify_evidence(results_dir: Path, trusted: set[str] | None = None, source: EvidenceSource | None = None, *,
                    require_signed: bool = False, expected_head: dict[str, Any] | None = None,
                    head_source: str = "") -> VerifyReport:
    """verify_path, and for evidence read from elsewhere its findings and, unless another head is
    given, the head kept there."""
    if source is not None and expected_head is None:
        expected_head, head_source = source.head, source.name
    report = verify_path(results_dir, trusted, require_signed=require_signed, expected_head=expected_head,
                         head_source=head_source)
    if source is not None:
        report.findings.extend(source.findings)
    return report
