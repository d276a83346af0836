"""A full disk under the results folder: the run says so in one line and keeps what it had, the
fault is undone, no partial file is left, and `drillbook rollback` seals the run once there is
room (and says which runs it could not seal until then), all through the real CLI on a small
tmpfs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from drillbook.chaos.ledger import FaultLedger

pytestmark = pytest.mark.integration


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs: room for a bundle's folder and marker, not for a run's notebook."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    folder = tmp_path / "small"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def drillbook(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "drillbook", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "DRILLBOOK_STATE_DIR": str(state), "COLUMNS": "250"},
                          stdin=subprocess.DEVNULL)


def test_a_full_disk_keeps_the_run_for_rollback_which_seals_it_once_there_is_room(sandbox, small_disk):
    results = small_disk / "results"
    run = drillbook(sandbox.state_dir, "run", "cold-start", "-p", "trials=1", "--results", str(results))
    assert run.returncode == 1, run.stdout + run.stderr
    said = [line for line in run.stderr.splitlines() if not line.startswith("… running")]  # the progress line
    assert len(said) == 1 and "Traceback" not in run.stderr, run.stderr
    assert "evidence could not be written to" in said[0] and "No space left on device" in said[0]
    assert "then `drillbook rollback` seals it" in said[0]
    (bundle,) = [p for p in results.iterdir() if p.is_dir()]
    assert (bundle / ".unsealed").exists() and not (bundle / "manifest.json").exists()
    assert not list(bundle.rglob("*.partial"))
    faults = FaultLedger(sandbox.state_dir / "faults.jsonl")
    assert faults.path.read_text().count("\"fault\"") >= 1 and faults.open_faults() == []  # undone by the run

    # Still full: rollback says which run it cannot seal yet, and exits 1; nothing else is lost
    waiting = drillbook(sandbox.state_dir, "rollback")
    assert waiting.returncode == 1 and f"not sealed: evidence could not be written to {bundle}" in waiting.stderr
    assert "0 faults undone" in waiting.stdout, waiting.stdout
    assert not (bundle / "manifest.json").exists() and not list(bundle.rglob("*.partial"))

    subprocess.run(["mount", "-o", "remount,size=16m", str(small_disk)], check=True)
    sealed = drillbook(sandbox.state_dir, "rollback")
    assert sealed.returncode == 0, sealed.stdout + sealed.stderr
    assert f"{bundle.name}: ERROR, its runner could not write its evidence" in sealed.stdout
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["status"] == "unwritten", manifest["status"]  # its runner lived: it was not killed
    summary = json.loads((bundle / "summary.json").read_text())
    assert summary["verdict"] == "ERROR" and summary["reason"].startswith("the runner could not write its evidence")
    verified = drillbook(sandbox.state_dir, "verify", str(results), "--allow-incomplete")
    assert verified.returncode == 0, verified.stdout
    assert drillbook(sandbox.state_dir, "rollback").stdout.strip() == "nothing to roll back"
