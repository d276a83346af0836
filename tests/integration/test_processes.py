"""Children die with what started them, and the process ledger finds what a dead owner left:
real processes, real signals."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from drillbook.processes import ProcessLedger, same_process, start_ticks
from tests.helpers import wait_for

pytestmark = pytest.mark.integration

# An owner that starts a long child in its own group, writes it to the ledger, prints its pid and waits.
OWNER = textwrap.dedent("""
    import subprocess, sys, time, signal
    from pathlib import Path
    from drillbook.processes import ProcessLedger, die_with_parent
    pdeathsig = sys.argv[2] == "yes"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True,
                             preexec_fn=die_with_parent(signal.SIGTERM) if pdeathsig else None)
    ProcessLedger(Path(sys.argv[1])).started("locust", child.pid, "test")
    print(child.pid, flush=True)
    time.sleep(120)
""")


def start_owner(ledger: Path, pdeathsig: bool) -> tuple[subprocess.Popen[str], int]:
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(ledger), "yes" if pdeathsig else "no"],
                             stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    child = int(owner.stdout.readline())
    owner.stdout.close()
    return owner, child


def test_a_child_dies_with_its_owner_even_after_sigkill(tmp_path):
    owner, child = start_owner(tmp_path / "processes.jsonl", pdeathsig=True)
    ticks = start_ticks(child)
    owner.send_signal(signal.SIGKILL)
    owner.wait(10)
    wait_for(lambda: not same_process(child, ticks), timeout=10)


def test_rollback_stops_what_a_dead_owner_left_and_nothing_else(tmp_path):
    ledger = ProcessLedger(tmp_path / "processes.jsonl")
    dead_owner, orphan = start_owner(ledger.path, pdeathsig=False)
    live_owner, kept = start_owner(ledger.path, pdeathsig=False)
    orphan_ticks, kept_ticks = start_ticks(orphan), start_ticks(kept)
    try:
        dead_owner.send_signal(signal.SIGKILL)
        dead_owner.wait(10)
        assert same_process(orphan, orphan_ticks)  # without a parent-death signal it would go on
        done = ledger.stop_orphans()
        assert len(done) == 1 and f"pid {orphan}" in done[0]
        wait_for(lambda: not same_process(orphan, orphan_ticks), timeout=10)
        assert same_process(kept, kept_ticks)  # its owner still runs it
        assert [e.pid for e in ledger.open_entries()] == [kept]
        assert ledger.stop_orphans() == []  # safe to repeat
    finally:
        live_owner.kill()
        live_owner.wait(10)
        subprocess.run(["kill", "-9", str(kept)], capture_output=True)


def test_a_reused_pid_is_never_stopped(tmp_path):
    ledger = ProcessLedger(tmp_path / "processes.jsonl")
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        # an entry for the same pid but another start time: a process that is long gone
        ticks = start_ticks(bystander.pid)
        assert ticks is not None
        ledger._append({"started": {"kind": "locust", "pid": bystander.pid, "ticks": ticks - 1, "owner_pid": 1,
                                    "owner_ticks": 0, "detail": "old", "at": time.time()}})
        assert ledger.stop_orphans() == []
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait(10)
