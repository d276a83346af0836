"""Game days: a plan validated whole before anything runs, one lock per target, a summary bundle."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import yaml
from drillbook.errors import ConfigError
from drillbook.evidence import verify_path
from drillbook.errors import TargetInUse
from drillbook.gameday import load_plan, plan_path, run_gameday
from drillbook.sandbox import launcher

pytestmark = pytest.mark.integration


def test_the_default_plan_is_valid():
    plan = load_plan(plan_path(None))
    assert [r.runbook for r in plan.runbooks] == ["ha-replica-loss", "noisy-neighbour", "cold-start", "restore-drill",
                                                  "session-continuity"]


@pytest.mark.parametrize(("runbooks", "message"), [
    ([{"runbook": "cold-start"}, {"runbook": "chaos-monkey"}], "runbook 2 (chaos-monkey): unknown runbook"),
    ([{"runbook": "cold-start", "parameters": {"trials": "lots"}}], "invalid trials"),
    ([{"runbook": "cold-start", "parameters": {"colour": 1}}], "unknown parameter 'colour'"),
    ([], "runbooks"),
])
def test_a_bad_plan_is_refused_before_anything_runs(tmp_path, runbooks, message):
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"name": "bad", "target": "sandbox", "runbooks": runbooks}))
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_plan(plan)
    state = tmp_path / "state"
    env = {**os.environ, "DRILLBOOK_STATE_DIR": str(state)}
    result = subprocess.run([sys.executable, "-m", "drillbook", "gameday", str(plan), "--results",
                             str(tmp_path / "results")], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "results").exists() and not launcher.is_running(state)


def test_a_second_game_day_on_the_same_target_is_refused_naming_the_holder(tmp_path):
    state = tmp_path / "state"
    # What a running game day holds, held by another process (a process may take its own lock again).
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys; from pathlib import Path; from drillbook.profile import builtin_sandbox; "
        "from drillbook.runlock import TargetLock\n"
        f"with TargetLock(builtin_sandbox(), 'game day default', Path({str(state)!r})):\n"
        "    print('held', flush=True); sys.stdin.read()")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(TargetInUse, match=rf"target sandbox \(sandbox .*/state\) is in use by game day default "
                                              rf"\(pid {holder.pid}, since "):
            run_gameday(plan_path(None), state, tmp_path / "results")
    finally:
        holder.communicate("", timeout=30)
    assert not launcher.is_running(state) and not (tmp_path / "results").exists()


def test_a_short_game_day_starts_the_sandbox_runs_the_plan_and_stops_it(tmp_path):
    plan = tmp_path / "short.yaml"
    plan.write_text(yaml.safe_dump({"name": "short", "target": "sandbox", "runbooks": [
        # the passing runbook's SLO leaves room for a busy machine (5.8 s against the default 5 s once)
        {"runbook": "cold-start", "parameters": {"trials": 1, "idle_s": 0.1, "slo_p95_s": 30}},
        {"runbook": "restore-drill"}],
        "exercise": {"scope": "the sandbox", "objectives": ["a restore restores"]}}))
    state = tmp_path / "state"
    result = run_gameday(plan, state, tmp_path / "results",
                         exercise=load_plan(plan).exercise.merged(participants=["dana (facilitator)"]))
    assert [r for r, _, _ in result.runs] == ["cold-start", "restore-drill"]
    assert result.passed, [(runbook, verdict, str(bundle)) for runbook, verdict, bundle in result.runs]
    assert not launcher.is_running(state)  # started here, stopped here
    summary = json.loads((result.summary_bundle / "summary.json").read_text())
    assert summary["verdict"] == "PASS" and len(summary["metrics"]["runs"]) == 2
    assert verify_path(tmp_path / "results").ok
    record = {"scope": "the sandbox", "participants": ["dana (facilitator)"], "objectives": ["a restore restores"],
              "reference": ""}
    for bundle in [result.summary_bundle, *(bundle for _, _, bundle in result.runs)]:  # each sealed with the record
        assert json.loads((bundle / "manifest.json").read_text())["exercise"] == record, bundle.name
