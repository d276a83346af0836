"""The evidence bundle writer: one folder per run, written once, sealed by a manifest and a ledger.

Every file goes in atomically (temporary name, fsync, hard link into place, which fails rather
than overwrite). Sealing lists the sha256 of every file in ``manifest.json``, links the manifest
to the previous sealed bundle of the same results folder, signs the manifest digest when a key
is configured (``manifest.sig``), and appends the manifest digest to ``ledger.jsonl`` under a
lock. A bundle interrupted by an exception or a signal is sealed as ``incomplete`` (or, by the
runbook layer, ``interrupted``) with what it had; a bundle whose process was killed outright keeps
its ``.unsealed`` marker, which names the run, until `drillbook rollback` seals it as ``killed``
(or ``unwritten``, when its runner lived but could not write its evidence) (`BundleWriter.resume`).
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import platform
import re
import secrets as secrets_module
import shutil
import stat
import subprocess
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Iterator, Mapping

from drillbook.timeline import Timeline
from drillbook import __version__
from drillbook.digest import file_sha256 as sha256_file
from drillbook.errors import BundleExists, EvidenceError
from drillbook.evidence import signing
from drillbook.evidence.attestation import ATTESTATION, envelope, predicate, statement
from drillbook.evidence.anchor import append_witness, head_of
from drillbook.evidence.ledger import LEDGER, LedgerEntry, canonical_json, read_ledger
from drillbook.evidence.redact import Redactor
from drillbook.processes import same_process, start_ticks

FORMAT = "drillbook-evidence/2"  # 2: every bundle carries an in-toto attestation (drillbook.evidence.attestation)
MANIFEST = "manifest.json"
SIGNATURE = "manifest.sig"
UNSEALED = ".unsealed"
RESERVED = {MANIFEST, SIGNATURE, UNSEALED, ATTESTATION}  # names a run cannot write: sealing writes them
TEXT_SUFFIXES = {".json", ".jsonl", ".csv", ".log", ".txt", ".html", ".ipynb", ".yaml", ".yml", ".md", ".py"}
PACKAGES = ("papermill", "nbclient", "nbconvert", "chaostoolkit", "chaostoolkit-lib", "chaostoolkit-kubernetes",
            "kubernetes", "locust", "pandas", "matplotlib", "pydantic", "aiohttp")
NAME_PART = re.compile(r"[^A-Za-z0-9.-]+")


def utc_stamp(moment: datetime) -> str:
    return moment.strftime("%Y%m%dT%H%M%SZ")


def utc_iso(moment: datetime) -> str:
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def atomic_create(path: Path, data: bytes, replace: bool = False) -> None:
    """Create path with data, never replacing an existing file: write, fsync, hard-link, unlink.
    The same bytes written again are no overwrite (a seal taken up again after a full disk).
    replace: an unsealed bundle taken over by rollback, whose files are not evidence yet.
    A write that fails (a full disk, an I/O error) leaves no partial file behind."""
    partial = path.with_name(f".{path.name}.{secrets_module.token_hex(4)}.partial")
    try:
        with open(partial, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if replace:
            os.replace(partial, path)
            return
        try:
            os.link(partial, path)
        except FileExistsError:
            if path.is_file() and not path.is_symlink() and path.stat().st_size == len(data) \
                    and path.read_bytes() == data:
                return
            raise EvidenceError(f"{path} already exists; evidence is never overwritten") from None
    finally:
        partial.unlink(missing_ok=True)


@functools.lru_cache(maxsize=1)
def package_versions() -> dict[str, str]:
    versions = {"drillbook": __version__, "python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def git_state(root: Path) -> dict[str, Any] | None:
    try:
        revision = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                  timeout=10)
        if revision.returncode != 0:
            return None
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return {"revision": revision.stdout.strip(), "dirty": bool(status.stdout.strip())}


def writer_running(marker: Mapping[str, Any]) -> bool:
    """Whether the process that began an unsealed bundle (its marker's pid and start time) is still
    running on this machine: then the run is live, not killed. A marker without a start time (an
    older one) is never taken for live, since its pid may have been given to another process."""
    pid, ticks = marker.get("pid"), marker.get("pid_start_ticks")
    return isinstance(pid, int) and isinstance(ticks, int) and same_process(pid, ticks)


def read_ledger_text(results_dir: Path) -> str:
    """The ledger as it stands between seals: read under a shared lock, which waits for a seal in
    progress (it holds the exclusive one from its manifest to its ledger line). Empty if absent."""
    path = results_dir / LEDGER
    try:
        handle = open(path, "r", encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH)
        except OSError:  # a file system without locks: read it as it is
            pass
        return handle.read()


class _LedgerLock:
    """Exclusive lock on the results folder's ledger while a bundle is sealed."""

    def __init__(self, results_dir: Path) -> None:
        self.path = results_dir / LEDGER

    def __enter__(self) -> "_LedgerLock":
        self.handle = open(self.path, "a+", encoding="utf-8")
        fcntl.flock(self.handle, fcntl.LOCK_EX)
        return self

    def append(self, entry: LedgerEntry) -> None:
        """Add a line; a line that could not be written whole (a full disk) is taken back."""
        self.handle.seek(0, os.SEEK_END)
        size = self.handle.tell()
        try:
            self.handle.write(json.dumps(entry.__dict__, sort_keys=True) + "\n")
            self.handle.flush()
            os.fsync(self.handle.fileno())
        except OSError:
            os.truncate(self.path, size)
            raise

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()


@dataclass(frozen=True)
class SealedBundle:
    path: Path
    manifest_sha256: str
    status: str

    @property
    def name(self) -> str:
        return self.path.name


class BundleWriter:
    """Collects one run's files and seals them as evidence; use as a context manager."""

    def __init__(self, results_dir: Path, runbook: str, target: str, parameters: Mapping[str, Any] | None = None,
                 *, secrets: list[str] | tuple[str, ...] = (), signing_key: Path | None = None,
                 project_root: Path | None = None, extra: Mapping[str, Any] | None = None,
                 witness: Path | None = None, _resume: Path | None = None) -> None:
        self.redactor = Redactor(secrets)
        self.signing_key = signing_key
        self.witness = witness
        self.project_root = project_root
        self.timeline = Timeline()  # the run's, merged: written once, sorted by time, when sealed
        self.sealed: SealedBundle | None = None
        self.resumed = _resume is not None  # its files may be written again: nothing in it is sealed yet
        if _resume is not None:  # an unsealed bundle of a dead process, named by its marker
            marker = json.loads((_resume / UNSEALED).read_text() or "{}")
            self.path, self.results_dir = _resume, _resume.parent
            self.started = datetime.fromisoformat(marker["started_at"].replace("Z", "+00:00"))
            self.run_id, self.runbook, self.target = marker["run_id"], marker["runbook"], marker["target"]
            self.parameters, self.extra = marker.get("parameters", {}), marker.get("extra", {})
            for leftover in self.path.rglob(".*.partial"):  # a write its writer never finished
                leftover.unlink(missing_ok=True)
            return
        self.results_dir = Path(results_dir)
        self.results_dir.mkdir(parents=True, exist_ok=True)
        self.started = datetime.now(timezone.utc)
        self.run_id = uuid.uuid4().hex
        self.runbook, self.target = runbook, target
        name = "_".join([utc_stamp(self.started), NAME_PART.sub("-", runbook), NAME_PART.sub("-", target),
                         self.run_id[:6]])
        self.path = self.results_dir / name
        try:
            os.mkdir(self.path)
        except FileExistsError:
            raise BundleExists(f"bundle folder {self.path} already exists; evidence is never overwritten") from None
        self.parameters = self.redactor.data(dict(parameters or {}))
        self.extra = self.redactor.data(dict(extra or {}))
        # The marker names the run, so that a bundle whose process was killed can still be sealed.
        (self.path / UNSEALED).write_text(json.dumps({
            "run_id": self.run_id, "runbook": runbook, "target": target, "started_at": utc_iso(self.started),
            "pid": os.getpid(), "pid_start_ticks": start_ticks(os.getpid()), "parameters": self.parameters,
            "extra": self.extra}, default=str))

    @classmethod
    def resume(cls, path: Path, *, secrets: list[str] | tuple[str, ...] = (), signing_key: Path | None = None,
               project_root: Path | None = None, witness: Path | None = None) -> "BundleWriter":
        """Take over an unsealed bundle (its writer was killed) to add what is left and seal it."""
        if not (path / UNSEALED).is_file() or (path / MANIFEST).exists():
            raise EvidenceError(f"{path} is not an unsealed bundle")
        return cls(path.parent, "", "", secrets=secrets, signing_key=signing_key, project_root=project_root,
                   witness=witness, _resume=path)

    # -- writing -----------------------------------------------------------------------------
    def _destination(self, relative: str) -> Path:
        if self.sealed is not None:
            raise EvidenceError(f"bundle {self.path.name} is sealed; nothing more can be written")
        candidate = Path(relative)
        if candidate.is_absolute() or ".." in candidate.parts or not candidate.parts or relative in RESERVED:
            raise EvidenceError(f"{relative!r} is not a file name a bundle can hold")
        destination = self.path / candidate
        destination.parent.mkdir(parents=True, exist_ok=True)
        return destination

    def write_bytes(self, relative: str, data: bytes) -> Path:
        destination = self._destination(relative)
        atomic_create(destination, data, replace=self.resumed)
        return destination

    def write_text(self, relative: str, text: str) -> Path:
        return self.write_bytes(relative, self.redactor.text(text).encode("utf-8"))

    def write_json(self, relative: str, value: Any) -> Path:
        return self.write_bytes(relative, canonical_json(self.redactor.data(value)))

    def copy_file(self, source: Path, relative: str) -> Path:
        if source.suffix in TEXT_SUFFIXES:
            return self.write_text(relative, source.read_text(encoding="utf-8", errors="replace"))
        return self.write_bytes(relative, source.read_bytes())

    def copy_tree(self, source: Path, relative_dir: str) -> list[Path]:
        return [self.copy_file(path, f"{relative_dir.rstrip('/')}/{path.relative_to(source)}")
                for path in sorted(source.rglob("*")) if path.is_file() and not path.name.endswith(".partial")]

    def event(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Add an event to the run's timeline (written as timeline.jsonl when sealed)."""
        entry = {"t": time.time(), "kind": kind, **fields}
        self.add_events([entry])
        return entry

    def add_events(self, events: list[dict[str, Any]]) -> None:
        """Merge events (each with an epoch `t`) into the one timeline this bundle seals."""
        stamped = []
        for entry in events:
            moment = float(entry.get("t", time.time()))
            stamped.append(self.redactor.data({"ts": datetime.fromtimestamp(moment, timezone.utc)
                                               .isoformat(timespec="microseconds").replace("+00:00", "Z"),
                                               **entry, "t": moment}))
        self.timeline.merge(stamped)

    # -- sealing -----------------------------------------------------------------------------
    def _files(self) -> dict[str, dict[str, Any]]:
        """Every file a run wrote, with its digest (not what sealing writes)."""
        listed = {}
        for path in sorted(self.path.rglob("*")):
            relative = path.relative_to(self.path).as_posix()
            if path.is_file() and relative not in RESERVED and not path.name.endswith(".partial"):
                listed[relative] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
        return listed

    def seal(self, status: str = "complete", error: str | None = None) -> SealedBundle:
        """Write the timeline and manifest, sign, append to the ledger, and make the bundle read-only."""
        if self.sealed is not None:
            return self.sealed
        if self.timeline:
            ordered = sorted(self.timeline, key=lambda e: e["t"])
            atomic_create(self.path / "timeline.jsonl",
                          "".join(json.dumps(e, sort_keys=True, default=str) + "\n" for e in ordered).encode(),
                          replace=self.resumed)
        key = signing.load_private_key(self.signing_key) if self.signing_key else None
        manifest: dict[str, Any] = {
            "format": FORMAT, "bundle": self.path.name, "run_id": self.run_id, "runbook": self.runbook,
            "target": self.target, "parameters": self.parameters, "status": status,
            "error": self.redactor.text(error) if error else None,
            "started_at": utc_iso(self.started), "finished_at": utc_iso(datetime.now(timezone.utc)),
            "versions": dict(package_versions()), "git": git_state(self.project_root) if self.project_root else None,
            **self.extra,
            "signing": None if key is None else {
                "algorithm": "ed25519", "public_key": signing.public_key_b64(key.public_key()),
                "fingerprint": signing.fingerprint(key.public_key())},
        }
        manifest["files"] = self._attest(manifest, key)
        with _LedgerLock(self.results_dir) as ledger:
            entries = read_ledger(self.results_dir)
            previous = entries[-1] if entries else None
            manifest["previous"] = None if previous is None else {
                "bundle": previous.bundle, "manifest_sha256": previous.manifest_sha256}
            data = canonical_json(manifest)
            digest = hashlib.sha256(data).hexdigest()
            entry = LedgerEntry(len(entries) + 1, self.path.name, digest,
                                previous.manifest_sha256 if previous else None, manifest["finished_at"], status)
            marker = (self.path / UNSEALED).read_bytes()
            try:
                atomic_create(self.path / MANIFEST, data)
                if key is not None:
                    atomic_create(self.path / SIGNATURE, canonical_json({
                        "fingerprint": manifest["signing"]["fingerprint"], "manifest_sha256": digest,
                        "signature": signing.sign(key, digest)}))
                (self.path / UNSEALED).unlink()  # before the ledger names it: a sealed bundle holds no marker
                ledger.append(entry)
            except OSError:  # a full disk: the bundle stays unsealed, as it was, for rollback to seal
                for made in (MANIFEST, SIGNATURE, ATTESTATION):
                    (self.path / made).unlink(missing_ok=True)
                if not (self.path / UNSEALED).exists():
                    (self.path / UNSEALED).write_bytes(marker)
                raise
            if self.witness is not None:  # the history's new head, kept outside the results folder
                append_witness(self.witness, head_of(self.results_dir, entry, key))
        make_read_only(self.path)
        self.sealed = SealedBundle(self.path, digest, status)
        return self.sealed

    def _attest(self, manifest: dict[str, Any], key: Any) -> dict[str, dict[str, Any]]:
        """Write the in-toto attestation of every file written so far (drillbook.evidence.attestation);
        returns every file of the bundle, the attestation included, with its digest."""
        try:
            summary = json.loads((self.path / "summary.json").read_text())
        except (OSError, ValueError):
            summary = None
        files = self._files()
        body = statement(files, predicate(manifest, summary if isinstance(summary, dict) else None))
        data = canonical_json(envelope(body, key))
        atomic_create(self.path / ATTESTATION, data, replace=True)
        return {**files, ATTESTATION: {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}}

    def __enter__(self) -> "BundleWriter":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if exc is None:
            self.seal("complete")
        else:
            self.seal("incomplete", error=f"{exc_type.__name__ if exc_type else 'error'}: {exc}")


def make_read_only(folder: Path) -> None:
    for path in sorted(folder.rglob("*"), reverse=True):
        mode = path.stat().st_mode
        path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    folder.chmod(folder.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def make_writable(folder: Path) -> None:
    """For tests and for deleting old evidence on purpose: give write permission back."""
    folder.chmod(folder.stat().st_mode | stat.S_IWUSR)
    for path in folder.rglob("*"):
        path.chmod(path.stat().st_mode | stat.S_IWUSR)


def bundle_folders(results_dir: Path) -> Iterator[Path]:
    for path in sorted(results_dir.iterdir()) if results_dir.is_dir() else []:
        if path.is_dir() and not path.name.startswith("."):
            yield path


def remove_bundle(path: Path) -> None:
    make_writable(path)
    shutil.rmtree(path)
