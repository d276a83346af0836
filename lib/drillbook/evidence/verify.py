"""Check a results folder (or one bundle): file digests, manifest digests, the chain, signatures.

Each problem is a Finding that names the bundle and, where it can, the file; ``ok`` holds only
when there is no error-level finding. An unsealed bundle (its run was killed before sealing) is
a warning: it is reported, it cannot be trusted, and it does not break the chain.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drillbook.evidence import signing
from drillbook.evidence.bundle import (LEDGER, MANIFEST, RESERVED, SIGNATURE, UNSEALED, LedgerEntry, bundle_folders,
                                       read_ledger, sha256_file)


@dataclass(frozen=True)
class Finding:
    bundle: str
    kind: str
    detail: str
    severity: str = "error"


COMPLETE = "complete"


@dataclass
class VerifyReport:
    checked: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    states: dict[str, str] = field(default_factory=dict)  # bundle -> complete, interrupted, killed, incomplete, unsealed

    def counts(self) -> dict[str, int]:
        """How many bundles are in each state."""
        counted: dict[str, int] = {}
        for state in self.states.values():
            counted[state] = counted.get(state, 0) + 1
        return counted

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


def _load_manifest(folder: Path) -> tuple[dict[str, Any] | None, str | None]:
    path = folder / MANIFEST
    if not path.exists():
        return None, None
    data = path.read_bytes()
    try:
        return json.loads(data), hashlib.sha256(data).hexdigest()
    except json.JSONDecodeError:
        return {}, hashlib.sha256(data).hexdigest()


def check_files(folder: Path, manifest: dict[str, Any], report: VerifyReport) -> None:
    listed: dict[str, dict[str, Any]] = manifest.get("files", {})
    for relative, expected in sorted(listed.items()):
        path = folder / relative
        if not path.is_file():
            report.add(folder.name, "file-missing", f"{relative} is listed in the manifest but missing")
        elif sha256_file(path) != expected["sha256"]:
            report.add(folder.name, "file-changed", f"{relative} differs from its recorded sha256")
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder).as_posix()
        if path.is_file() and relative not in RESERVED and relative not in listed:
            report.add(folder.name, "file-unexpected", f"{relative} is not listed in the manifest")


def check_signature(folder: Path, manifest: dict[str, Any], digest: str, trusted: set[str] | None,
                    report: VerifyReport) -> None:
    info = manifest.get("signing")
    if not info:
        if trusted:
            report.add(folder.name, "signature-missing", "bundle is not signed but signing is expected")
        return
    path = folder / SIGNATURE
    if not path.exists():
        report.add(folder.name, "signature-missing", f"{SIGNATURE} is missing")
        return
    try:
        signature = json.loads(path.read_text())
        public_key = signing.public_key_from_b64(info["public_key"])
        valid = signing.verify(public_key, digest, signature["signature"])
        consistent = signing.fingerprint(public_key) == info["fingerprint"] == signature.get("fingerprint")
    except (ValueError, KeyError, TypeError):
        valid, consistent = False, False
    if not (valid and consistent):
        report.add(folder.name, "signature-invalid", f"{SIGNATURE} does not verify against the manifest digest")
    elif trusted is not None and info["fingerprint"] not in trusted:
        report.add(folder.name, "signature-untrusted", f"signed by key {info['fingerprint'][:16]}…, which is not trusted")


def check_chain(results_dir: Path, entries: list[LedgerEntry], report: VerifyReport,
                trusted: set[str] | None, only: set[str] | None = None) -> set[str]:
    seen: set[str] = set()
    previous_digest: str | None = None
    for entry in entries:
        seen.add(entry.bundle)
        if entry.previous_manifest_sha256 != previous_digest:
            report.add(entry.bundle, "chain-broken",
                       f"ledger line {entry.seq} does not follow the line before it: a bundle or ledger line "
                       f"before {entry.bundle} was removed")
        previous_digest = entry.manifest_sha256
        if only is not None and entry.bundle not in only:
            continue
        folder = results_dir / entry.bundle
        report.checked.append(entry.bundle)
        if not folder.is_dir():
            report.add(entry.bundle, "bundle-missing", "bundle is in the ledger but its folder is missing")
            continue
        manifest, digest = _load_manifest(folder)
        if manifest is None or digest is None:
            report.add(entry.bundle, "manifest-missing", f"{MANIFEST} is missing")
            continue
        report.states[entry.bundle] = str(manifest.get("status", "unknown"))
        if digest != entry.manifest_sha256:
            report.add(entry.bundle, "manifest-changed", f"{MANIFEST} differs from the digest in the ledger")
        linked = (manifest.get("previous") or {}).get("manifest_sha256")
        if linked != entry.previous_manifest_sha256:
            report.add(entry.bundle, "chain-broken", "the manifest's previous-bundle digest disagrees with the ledger")
        check_files(folder, manifest, report)
        check_signature(folder, manifest, digest, trusted, report)
    return seen


def verify_path(path: Path, trusted: set[str] | None = None) -> VerifyReport:
    """Verify a results folder (with ledger.jsonl), or a single bundle inside one."""
    path = Path(path)
    report = VerifyReport()
    if (path / LEDGER).exists() or not (path / MANIFEST).exists() and not (path / UNSEALED).exists():
        results_dir, only = path, None
    else:
        results_dir, only = path.parent, {path.name}
    entries = read_ledger(results_dir)
    seen = check_chain(results_dir, entries, report, trusted, only)
    folders = [results_dir / name for name in only] if only else list(bundle_folders(results_dir))
    for folder in folders:
        if folder.name in seen:
            continue
        report.checked.append(folder.name)
        if (folder / UNSEALED).exists():
            report.states[folder.name] = "unsealed"
            report.add(folder.name, "unsealed", "run ended before sealing (no manifest); contents not attested",
                       severity="warning")
        else:
            report.add(folder.name, "not-in-ledger", "bundle folder is not in the ledger")
    return report
