"""Evidence in S3-compatible storage with object lock, where the store itself refuses to lose it.

`drillbook publish --to s3://bucket/prefix` copies every sealed bundle of a results folder, file
by file, then the ledger and its head, each object written with a retention in COMPLIANCE mode:
until it expires, the store refuses to delete that version or to shorten its retention, whoever
asks. The bucket must have been created with object lock (and so versioning) enabled; a bucket
without it is refused before anything is written. A file already in the store is skipped when it
is the same and refused when it differs (nothing is overwritten). Bundle files go first and each
manifest last, then the ledger and the head: a publish cut short leaves bundles that say they are
incomplete, never a ledger that names a bundle that is not there.

`verify` and `report` read an ``s3://`` address by downloading into a temporary folder the version
of each object the chain vouches for (the manifest the ledger names, the files the manifest
names) and verifying that as a results folder, with findings for what the store shows beyond it:
an object with a newer version (an attempted overwrite: the locked original is still there and is
what is verified), a delete marker (an attempted delete), and a ledger version that is not a
prefix of the newest (history rewritten).

Where the store is: ``$DRILLBOOK_S3_ENDPOINT`` (``http://127.0.0.1:8333``), with the credentials in
``$DRILLBOOK_S3_ACCESS_KEY`` and ``$DRILLBOOK_S3_SECRET_KEY``. Retention: ``--retention-days``
(default 365).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from drillbook.errors import ConfigError, DrillbookError, TargetUnreachable
from drillbook.evidence.bundle import MANIFEST, bundle_folders
from drillbook.evidence.ledger import LEDGER, parse_ledger
from drillbook.evidence.verify import EvidenceSource, Finding

SCHEME = "s3://"
HEAD = "head.json"
ENV_ENDPOINT, ENV_ACCESS, ENV_SECRET = "DRILLBOOK_S3_ENDPOINT", "DRILLBOOK_S3_ACCESS_KEY", "DRILLBOOK_S3_SECRET_KEY"
DEFAULT_RETENTION_DAYS = 365


def is_store(address: str | os.PathLike[str] | None) -> bool:
    return address is not None and str(address).startswith(SCHEME)


@dataclass(frozen=True)
class Location:
    bucket: str
    prefix: str

    @classmethod
    def parse(cls, address: str) -> "Location":
        parts = urlsplit(address)
        if parts.scheme != "s3" or not parts.netloc:
            raise ConfigError(f"invalid evidence store {address!r}: expected s3://bucket/prefix")
        prefix = parts.path.strip("/")
        if ".." in prefix.split("/"):
            raise ConfigError(f"invalid evidence store {address!r}: the prefix may not contain '..'")
        return cls(parts.netloc, prefix)

    def key(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)

    def __str__(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.prefix}" if self.prefix else f"{SCHEME}{self.bucket}"


def _client() -> Any:
    from minio import Minio

    endpoint = os.environ.get(ENV_ENDPOINT, "")
    if not endpoint:
        raise ConfigError(f"an s3:// evidence store needs ${ENV_ENDPOINT} (for example http://127.0.0.1:8333)")
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"invalid ${ENV_ENDPOINT} {endpoint!r}: expected http(s)://host:port")
    access, secret = os.environ.get(ENV_ACCESS, ""), os.environ.get(ENV_SECRET, "")
    if not access or not secret:
        raise ConfigError(f"an s3:// evidence store needs ${ENV_ACCESS} and ${ENV_SECRET}")
    return Minio(parts.netloc, access_key=access, secret_key=secret, secure=parts.scheme == "https")


@dataclass
class Published:
    uploaded: list[str] = field(default_factory=list)  # bundles written now
    present: list[str] = field(default_factory=list)  # bundles already in the store, unchanged
    ledger_entries: int = 0
    retain_until: str = ""


@dataclass
class Version:
    name: str
    version_id: str | None
    latest: bool
    delete_marker: bool


class EvidenceStore:
    """One s3:// location, checked to be reachable and object-locked before anything is done."""

    def __init__(self, address: str) -> None:
        from minio.error import S3Error
        from urllib3.exceptions import HTTPError

        self.location = Location.parse(address)
        self.client = _client()
        try:
            if not self.client.bucket_exists(self.location.bucket):
                raise ConfigError(f"evidence store {self.location}: bucket {self.location.bucket!r} does not exist")
            self.client.get_object_lock_config(self.location.bucket)
        except S3Error as error:
            if error.code == "ObjectLockConfigurationNotFoundError":
                raise ConfigError(f"evidence store {self.location}: bucket {self.location.bucket!r} has no object "
                                  "lock; create it with object lock enabled") from None
            raise TargetUnreachable(f"evidence store {self.location}: {error.code}: {error.message}") from None
        except (HTTPError, OSError) as error:
            raise TargetUnreachable(f"evidence store {self.location} at {os.environ.get(ENV_ENDPOINT)} does not "
                                    f"answer: {type(error).__name__}") from None

    # -- writing --------------------------------------------------------------------------------
    def _put(self, key: str, data: bytes, until: datetime) -> None:
        from minio.commonconfig import COMPLIANCE
        from minio.retention import Retention

        self.client.put_object(self.location.bucket, key, io.BytesIO(data), len(data),
                               retention=Retention(COMPLIANCE, until))

    def _existing(self) -> dict[str, str]:
        """Latest version's ETag of every object under the prefix."""
        prefix = self.location.key() + "/" if self.location.prefix else ""
        return {o.object_name: (o.etag or "").strip('"') for o in
                self.client.list_objects(self.location.bucket, prefix=prefix, recursive=True)}

    def publish(self, results_dir: Path, retention_days: int = DEFAULT_RETENTION_DAYS) -> Published:
        """Everything sealed in results_dir, in the order that never leaves the store claiming more
        than it holds; a store that fails halfway is one line naming how far it got."""
        from minio.error import S3Error
        from urllib3.exceptions import HTTPError

        done = Published()
        try:
            return self._publish(results_dir, retention_days, done)
        except (S3Error, HTTPError, OSError) as error:
            raise DrillbookError(f"publishing to {self.location} stopped after {len(done.uploaded)} bundles: "
                                 f"{type(error).__name__}: {str(error)[:200]}; the ledger was not updated in the "
                                 "store; run publish again to finish") from None

    def _publish(self, results_dir: Path, retention_days: int, done: Published) -> Published:
        from drillbook.config import signing_key
        from drillbook.evidence.anchor import current_head
        from drillbook.evidence.ledger import read_ledger

        entries = read_ledger(results_dir)  # a damaged ledger is refused, not published
        until = datetime.now(timezone.utc) + timedelta(days=retention_days)
        existing = self._existing()
        done.ledger_entries, done.retain_until = len(entries), until.isoformat(timespec="seconds")
        ledgered = {entry.bundle for entry in entries}
        for folder in bundle_folders(results_dir):
            if folder.name not in ledgered:
                continue  # unsealed or not drillbook's: nothing vouches for it
            files = sorted((p for p in folder.rglob("*") if p.is_file()), key=lambda p: p.name == MANIFEST)
            wrote = False
            for path in files:  # the manifest last
                key = self.location.key(folder.name, path.relative_to(folder).as_posix())
                data = path.read_bytes()
                if key in existing:
                    if existing[key] != hashlib.md5(data).hexdigest():  # noqa: S324 - S3's ETag of a single put
                        raise DrillbookError(f"evidence store {self.location} already holds a different {key}; "
                                             "nothing is overwritten")
                    continue
                self._put(key, data, until)
                wrote = True
            (done.uploaded if wrote else done.present).append(folder.name)
        head = current_head(results_dir, signing_key())
        for name, data in ((LEDGER, (results_dir / LEDGER).read_bytes() if entries else b""),
                           (HEAD, json.dumps(head, indent=2).encode() if head is not None else None)):
            key = self.location.key(name)
            if data is not None and existing.get(key) != hashlib.md5(data).hexdigest():  # noqa: S324
                self._put(key, data, until)  # a new locked version; the earlier ones stay
        return done

    # -- reading --------------------------------------------------------------------------------
    def _versions(self) -> dict[str, list[Version]]:
        prefix = self.location.key() + "/" if self.location.prefix else ""
        found: dict[str, list[Version]] = {}
        for o in self.client.list_objects(self.location.bucket, prefix=prefix, recursive=True, include_version=True):
            found.setdefault(o.object_name, []).append(
                Version(o.object_name, o.version_id, bool(o.is_latest), bool(o.is_delete_marker)))
        return found

    def _read(self, version: Version) -> bytes:
        response = self.client.get_object(self.location.bucket, version.name, version_id=version.version_id)
        try:
            return response.read()
        finally:
            response.close()
            response.release_conn()

    def download(self, dest: Path) -> EvidenceSource:
        """The evidence as the chain vouches for it, into dest; returned: this store, with the
        findings for what it shows beyond that, and the newest head published there."""
        versions = self._versions()
        findings: list[Finding] = []
        strip = len(self.location.key()) + 1 if self.location.prefix else 0

        def relative(name: str) -> str:
            return name[strip:]

        for name, kept in sorted(versions.items()):
            where = relative(name).split("/", 1)[0]
            bundle = "ledger" if where in (LEDGER, HEAD) else where
            if any(v.delete_marker for v in kept):
                findings.append(Finding(bundle, "store-deleted", f"{relative(name)} was deleted in the store "
                                                                      "(a delete marker); its locked version is kept"))
            real = [v for v in kept if not v.delete_marker]
            if len(real) > 1 and where not in (LEDGER, HEAD):
                findings.append(Finding(bundle, "store-overwritten",
                                             f"{relative(name)} has {len(real)} versions: it was written again after "
                                             "it was published; the version the chain vouches for is verified"))
        ledger_versions = [v for v in versions.get(self.location.key(LEDGER), []) if not v.delete_marker]
        texts = {id(v): self._read(v) for v in ledger_versions}
        ledger = max(texts.values(), key=len) if texts else b""  # every publish only ever adds entries
        if any(not ledger.startswith(text) for text in texts.values()):
            findings.append(Finding("ledger", "store-history-rewritten",
                                         "published versions of the ledger disagree: one is not a prefix of the "
                                         "longest, so entries were changed after they were published"))
        newest = next((v for v in ledger_versions if v.latest), None)
        if newest is not None and len(texts[id(newest)]) < len(ledger):
            findings.append(Finding("ledger", "store-history-cut",
                                         "the newest version of the ledger in the store holds fewer entries than an "
                                         "earlier one; the longer, locked version is verified"))
        dest.mkdir(parents=True, exist_ok=True)
        (dest / LEDGER).write_bytes(ledger)
        vouched = {e.bundle: e.manifest_sha256 for e in parse_ledger(ledger.decode("utf-8", "replace"))[0]}
        manifests: dict[str, dict[str, Any]] = {}
        for name, kept in versions.items():  # manifests first: they say which version of each file is meant
            path = relative(name)
            if path.endswith("/" + MANIFEST) and path.count("/") == 1:
                bundle = path.split("/", 1)[0]
                data = self._choose(kept, vouched.get(bundle))
                if data is not None:
                    self._write(dest, path, data)
                    try:
                        manifests[bundle] = json.loads(data)
                    except ValueError:
                        manifests[bundle] = {}
        head: dict[str, Any] | None = None
        for name, kept in versions.items():
            path = relative(name)
            if path == HEAD:
                data = self._choose(kept, None)
                try:
                    head = json.loads(data) if data else None
                except ValueError:
                    findings.append(Finding("ledger", "store-head-damaged", f"{HEAD} in the store is not JSON"))
                continue
            if path == LEDGER or "/" not in path or path.endswith("/" + MANIFEST) and path.count("/") == 1:
                continue
            bundle, inner = path.split("/", 1)
            listed = ((manifests.get(bundle) or {}).get("files") or {}).get(inner) or {}
            data = self._choose(kept, listed.get("sha256"))
            if data is not None:
                self._write(dest, path, data)
        return EvidenceSource(str(self.location), findings, head)

    def _choose(self, kept: list[Version], sha256: str | None) -> bytes | None:
        """The version whose digest is the one vouched for; else the newest (verify says what is wrong)."""
        real = [v for v in kept if not v.delete_marker]
        if not real:
            return None
        newest = next((v for v in real if v.latest), real[0])
        if sha256 is None or len(real) == 1:
            return self._read(newest)
        for version in real:
            data = self._read(version)
            if hashlib.sha256(data).hexdigest() == sha256:
                return data
        return self._read(newest)

    @staticmethod
    def _write(dest: Path, relative: str, data: bytes) -> None:
        target = dest / relative
        if dest.resolve() not in target.resolve().parents:
            return  # a key that would lead outside the folder is not written (verify reports it missing)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
