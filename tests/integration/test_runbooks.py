"""Runbooks executed through Papermill on the sandbox, asserting on the values they recorded, and
each shown to FAIL against the matching defect."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from drillbook.errors import ConfigError
from drillbook.evidence import verify_path
from drillbook.execute import execute
from drillbook.parameters import available_runbooks, runbook_path, validate_parameters
from drillbook.runbook import recorded

pytestmark = pytest.mark.integration


def replicas(handle) -> dict[str, int]:
    with handle.control() as control:
        return {name: s["desired"] for name, s in control.status()["services"].items()}


def run_recorded(bundle: Path) -> dict:
    return recorded(bundle / "runbook.ipynb")


@pytest.mark.parametrize("name", available_runbooks(oncall=True))
def test_committed_notebooks_are_thin_and_have_no_outputs(name):
    notebook = nbformat.read(str(runbook_path(name)), as_version=4)
    nbformat.validate(notebook)
    assert notebook.metadata["kernelspec"]["name"] == "python3"
    assert notebook.cells[0].cell_type == "markdown" and "PASS means" in notebook.cells[0].source
    tagged = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1
    for line in tagged[0].source.splitlines():
        assert "=" in line and "#" in line, f"parameter line without help: {line!r}"
    # papermill's own reading (--help-notebook) sees every parameter, typed
    from papermill.inspection import inspect_notebook

    inspected = inspect_notebook(str(runbook_path(name)))
    assert len(inspected) == len(tagged[0].source.splitlines())
    assert {p["inferred_type_name"] for p in inspected.values()} <= {"int", "float", "str", "bool"}
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
            assert "def " not in cell.source and "import locust" not in cell.source


def test_cold_start_passes_and_records_its_figures(sandbox_factory, tmp_path):
    handle = sandbox_factory(tokens_per_second=200, model_load_delay_s=0.3)
    before = replicas(handle)
    executed = execute("cold-start", overrides={"trials": "2", "idle_s": "0.2"}, results=tmp_path / "results",
                       sandbox_state=handle.state_dir)
    assert executed.verdict == "PASS", executed.explain()
    values = run_recorded(executed.bundle)
    assert values["verdict"] == "PASS" and values["values"]["trials_completed"] == 2
    assert 0.3 <= values["values"]["cold_start_p95_s"] < 5.0  # at least the model's load delay
    assert values["values"]["phase_means_s"]["model_load"] >= 0.25
    assert (executed.bundle / "plots" / "cold-start-phases.png").exists()
    assert (executed.bundle / "runbook.html").exists()
    assert verify_path(tmp_path / "results").ok
    assert replicas(handle) == before
    assert_figures_follow_from_the_observations(executed.bundle, "cold_start_p95_s")


def test_cold_start_fails_with_a_slow_model_load_and_an_slo_below_it(sandbox_factory, tmp_path):
    handle = sandbox_factory(tokens_per_second=200, defects=["slow-model-load"])
    executed = execute("cold-start", overrides={"trials": "1", "idle_s": "0.1", "slo_p95_s": "3.0"},
                       results=tmp_path / "results", sandbox_state=handle.state_dir)
    assert executed.verdict == "FAIL"
    assert run_recorded(executed.bundle)["values"]["cold_start_p95_s"] > 8.0


def test_restore_drill_passes_with_rto_rpo_and_integrity(sandbox_factory, tmp_path):
    handle = sandbox_factory(tokens_per_second=0)
    executed = execute("restore-drill", results=tmp_path / "results", sandbox_state=handle.state_dir)
    assert executed.verdict == "PASS", executed.explain()
    values = run_recorded(executed.bundle)["values"]
    assert values["rpo_turns"] == 6 and values["integrity"] == 1.0 and 0 < values["rto_s"] < 30
    assert values["backup_created"] is True


def test_restore_drill_fails_when_backups_are_disabled(sandbox_factory, tmp_path):
    handle = sandbox_factory(tokens_per_second=0, defects=["no-backups"])
    executed = execute("restore-drill", overrides={"restore_timeout_s": "3"}, results=tmp_path / "results",
                       sandbox_state=handle.state_dir)
    assert executed.verdict == "FAIL"
    values = run_recorded(executed.bundle)["values"]
    assert values["backup_created"] is False and values["rto_s"] is None
    with handle.control() as control:
        assert control.store()["healthy"] is True  # the rollback left a working (empty) store


@pytest.mark.parametrize(("overrides", "message"), [
    ({"trails": "2"}, "unknown parameter 'trails'"),
    ({"trials": "two"}, "invalid trials"),
    ({"trials": "1.5"}, "invalid trials"),
    ({"idle_s": "-1"}, "must not be negative"),
])
def test_bad_parameters_are_refused_before_a_kernel_starts(overrides, message):
    with pytest.raises(ConfigError, match=message):
        validate_parameters(runbook_path("cold-start"), overrides)


def test_bad_parameters_through_the_cli_are_one_line_and_exit_2(tmp_path):
    env = {**os.environ, "DRILLBOOK_STATE_DIR": str(tmp_path / "state")}
    for args in (["run", "cold-start", "-p", "trials=many"], ["run", "no-such-runbook"]):
        result = subprocess.run([sys.executable, "-m", "drillbook", *args], env=env, capture_output=True, text=True,
                                timeout=60)
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_failing_cell_is_error_with_the_cell_named_and_the_target_rolled_back(sandbox_factory, tmp_path):
    handle = sandbox_factory(tokens_per_second=0)
    before = replicas(handle)
    notebook = nbformat.read(str(runbook_path("cold-start")), as_version=4)
    breaking = nbformat.v4.new_code_cell(
        "from drillbook.chaos.actions import scale_service\n"
        "configuration = {**run.target_configuration(), 'drillbook_run_id': 'broken', 'drillbook_run_dir': '.'}\n"
        "scale_service('agent', 0, configuration=configuration)\n"
        "raise RuntimeError('the runbook broke mid-fault')")
    notebook.cells = [notebook.cells[0], notebook.cells[1],
                      nbformat.v4.new_code_cell("from drillbook import runbook\nrun = runbook.Run.begin('broken', 'ha', "
                                                "target, {}, drillbook_work_dir, drillbook_state_dir)"), breaking]
    for index, cell in enumerate(notebook.cells):
        cell["id"] = f"c{index}"
    path = tmp_path / "broken.ipynb"
    nbformat.write(notebook, str(path))
    executed = execute(str(path), results=tmp_path / "results", sandbox_state=handle.state_dir)
    assert executed.verdict == "ERROR"
    # Papermill injects the run's parameters as a cell of its own: the breaking cell is the 5th.
    assert "cell 5 failed: RuntimeError: the runbook broke mid-fault" in executed.summary["reason"]
    assert replicas(handle) == before
    manifest = json.loads((executed.bundle / "manifest.json").read_text())
    assert "runbook.ipynb" in manifest["files"]


def test_ha_passes_on_a_healthy_sandbox_and_audits_delivery(sandbox_factory, tmp_path):
    handle = sandbox_factory(tokens_per_second=200)
    executed = execute("ha-replica-loss", overrides={"users": "6", "duration_s": "12", "kill_after_s": "3",
                                                     "max_recovery_s": "7"},
                       results=tmp_path / "results", sandbox_state=handle.state_dir)
    assert executed.verdict == "PASS", executed.explain()
    values = run_recorded(executed.bundle)["values"]
    assert values["lost_turns"] == 0 and values["acknowledged_turns"] > 20 and values["error_rate_fault"] == 0
    assert values["recovery_time_s"] is not None and values["replicas_recovered_s"] > 0
    assert (executed.bundle / "load" / "locust.json").exists()
    assert (executed.bundle / "plots" / "latency-errors.png").exists()
    assert_figures_follow_from_the_observations(executed.bundle, "recovery_time_s")


def assert_figures_follow_from_the_observations(bundle: Path, edited: str) -> None:
    """verify --recompute derives every judged figure again and agrees; a summary.json whose
    figure was edited (as a forger who re-seals it would) disagrees, by name."""
    import shutil

    from drillbook.evidence.recompute import recompute_bundle

    figures = recompute_bundle(bundle)
    assert len(figures) >= 5 and all(f.agrees for f in figures), [f.describe() for f in figures if not f.agrees]
    forged = bundle.parent.parent / "forged" / bundle.name
    shutil.copytree(bundle, forged)
    summary = json.loads((forged / "summary.json").read_text())
    summary["metrics"][edited] = (summary["metrics"][edited] or 0) / 2 + 0.001
    (forged / "summary.json").write_text(json.dumps(summary))
    assert [f.figure for f in recompute_bundle(forged) if not f.agrees] == [edited]


def test_ha_with_load_workers_audits_every_workers_turns(sandbox_factory, tmp_path):
    handle = sandbox_factory(tokens_per_second=200)
    executed = execute("ha-replica-loss", overrides={"users": "6", "duration_s": "12", "kill_after_s": "3",
                                                     "max_recovery_s": "7", "load_workers": "2"},
                       results=tmp_path / "results", sandbox_state=handle.state_dir)
    assert executed.verdict == "PASS", executed.explain()
    receipts = [p for p in (executed.bundle / "load").glob("receipts-*.jsonl") if p.stat().st_size]
    assert len(receipts) == 2  # one file per worker
    values = run_recorded(executed.bundle)["values"]
    assert values["acknowledged_turns"] == sum(len(p.read_text().splitlines()) for p in receipts)
    assert values["lost_turns"] == 0


def test_ha_fails_when_the_gateway_does_not_retry(sandbox_factory, tmp_path):
    handle = sandbox_factory(tokens_per_second=100, defects=["no-retries"])
    executed = execute("ha-replica-loss", overrides={"users": "10", "duration_s": "8", "kill_after_s": "3",
                                                     "max_recovery_s": "3", "think_time_s": "0.0"},
                       results=tmp_path / "results", sandbox_state=handle.state_dir)
    assert executed.verdict == "FAIL"
    assert run_recorded(executed.bundle)["values"]["error_rate_fault"] > 0


def test_noisy_neighbour_passes_with_fair_sharing_and_fails_without(sandbox_factory, tmp_path):
    fast: dict[str, str] = {}  # the runbook's own windows: a 3 s burst let a busy machine dilute the flood
    fair = sandbox_factory(tokens_per_second=200)
    passed = execute("noisy-neighbour", overrides=fast, results=tmp_path / "fair", sandbox_state=fair.state_dir)
    assert passed.verdict == "PASS", passed.explain()
    values = run_recorded(passed.bundle)["values"]
    assert values["victim_p95_ratio"] < 3.0
    # The aggressor really flooded: fair sharing gives it at most half of the burst, and the
    # share counts the victim's baseline too, so a real burst is over a fifth (0.5 measured).
    assert values["slot_share"]["tenant-b"] > 0.2
    unfair = sandbox_factory(tokens_per_second=200, defects=["no-fair-sharing"])
    failed = execute("noisy-neighbour", overrides=fast, results=tmp_path / "unfair", sandbox_state=unfair.state_dir)
    assert failed.verdict == "FAIL"
    assert run_recorded(failed.bundle)["values"]["victim_p95_ratio"] > 3.0
