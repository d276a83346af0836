"""The auditor's report over real runs that passed, failed, were interrupted and were killed."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from drillbook.evidence.bundle import read_ledger
from drillbook.evidence.report import render_report
from tests.integration.test_interrupts import HA, Runner, fault_injected
from tests.helpers import wait_for

pytestmark = pytest.mark.integration


def section(html: str, heading_id: str) -> str:
    start = html.index(f'<h2 id="{heading_id}">')
    return html[start:html.index("<h2", start + 4)]


def test_the_report_counts_every_run_under_its_control_whatever_its_verdict(sandbox, tmp_path):
    results = tmp_path / "results"
    env = {**os.environ, "DRILLBOOK_STATE_DIR": str(sandbox.state_dir), "COLUMNS": "200",
           "XDG_CONFIG_HOME": str(tmp_path / "config")}  # no signing key of this machine's
    env.pop("DRILLBOOK_SIGNING_KEY", None)

    def drillbook(*args: str, state=sandbox.state_dir) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "drillbook", *args], env={**env, "DRILLBOOK_STATE_DIR": str(state)},
                              capture_output=True, text=True, timeout=300)

    cold = ["run", "cold-start", "-p", "trials=1", "-p", "idle_s=0.1", "--results", str(results)]
    assert drillbook(*cold).returncode == 0
    failed = drillbook(*cold, "-p", "slo_p95_s=0.0001")
    assert failed.returncode == 1 and "FAIL" in failed.stdout
    interrupted = Runner(HA, sandbox.state_dir, results)
    interrupted.wait_for_child("locust")
    wait_for(lambda: fault_injected(sandbox), timeout=60)
    interrupted.process.send_signal(signal.SIGINT)
    assert interrupted.finish()[0] == 130
    killed = Runner(HA, sandbox.state_dir, results)
    killed.wait_for_child("locust")
    killed.process.send_signal(signal.SIGKILL)
    killed.finish()
    wait_for(lambda: killed.left_over() == [], timeout=15)
    assert drillbook("rollback").returncode == 0  # seals the killed run's bundle as ERROR
    smoke = drillbook("sandbox", "smoke", "--sessions", "2", "--turns", "2", "--results", str(results),
                      state=tmp_path / "smoke-state")
    assert smoke.returncode == 0, smoke.stderr
    states = sorted(entry.status for entry in read_ledger(results))
    assert states == ["complete", "complete", "complete", "interrupted", "killed"]

    html = render_report(results)
    ha, cold_start = section(html, "ha"), section(html, "cold-start")
    assert "2 runs in the period, 1 passed." in cold_start
    assert 'verdict PASS">1 PASS' in html and 'verdict FAIL">1 FAIL' in html
    assert "cold-start P95 time to first token" in cold_start and "FAIL" in cold_start
    assert "2 runs in the period, 0 passed." in ha  # no PASS of HA left to show
    assert 'verdict ERROR">1 ERROR' in html and 'verdict INTERRUPTED">1 INTERRUPTED' in html
    assert re.search(r'Latest run: <span class="verdict ERROR">ERROR</span>.*runner killed', ha, re.S)
    assert '<p class="score">25.0 / 100</p>' in html  # cold start 1 of 2, HA 0 of 2
    smoke_id = next(e.bundle for e in read_ledger(results) if "sandbox-smoke" in e.bundle).rsplit("_", 1)[-1]
    assert smoke_id not in ha and smoke_id in section(html, "other")  # a smoke run is no control
    assert cold_start.count("<img") == 1 and ha.count("<img") == 3  # one chart per figure with a threshold
    assert "from the first to the last bundle in the results folder" in html
    signed = sum(1 for entry in read_ledger(results)  # the runners signed with the session's key, the others not
                 if json.loads((results / entry.bundle / "manifest.json").read_text())["signing"])
    assert f"Signatures were not checked against a trusted key (none was given): {signed} of 5 sealed bundles" in html
    for entry in read_ledger(results):  # each digest once, in the list of bundles
        assert html.count(entry.manifest_sha256) == 1
