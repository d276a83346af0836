"""verify --recompute compares only what a run claimed: a figure summary.json never recorded (a
run cut short) is not a disagreement; a recorded figure that the kept observations do not give is."""

from __future__ import annotations

import json
from pathlib import Path

from drillbook.evidence.recompute import recompute_bundle


def _bundle(folder: Path, metrics: dict, trials: list[dict]) -> Path:
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps({"runbook": "cold-start", "metrics": metrics}))
    for index, first in enumerate(trials, start=1):
        kept = folder / "chaos" / f"{index:02d}-cold-start"
        kept.mkdir(parents=True)
        (kept / "measurements.json").write_text(json.dumps({"cold_start": [first]}))
    return folder


def test_a_figure_never_recorded_is_not_compared(tmp_path):
    cut_short = _bundle(tmp_path / "cut", {"trial_1_experiment_verdict": "ERROR"}, [])
    assert recompute_bundle(cut_short) == []


def test_a_recorded_figure_the_observations_do_not_give_disagrees(tmp_path):
    trial = {"sent": 10.0, "first_token": 12.5}
    honest = _bundle(tmp_path / "honest", {"trial_1_experiment_verdict": "PASS", "trials_completed": 1,
                                            "cold_start_p95_s": 2.5}, [trial])
    assert [(f.figure, f.agrees) for f in recompute_bundle(honest)] == [("trials_completed", True),
                                                                        ("cold_start_p95_s", True)]
    claimed = _bundle(tmp_path / "claimed", {"trial_1_experiment_verdict": "PASS", "trials_completed": 3,
                                             "cold_start_p95_s": 1.0}, [trial])
    assert [f.describe() for f in recompute_bundle(claimed) if not f.agrees] == [
        "trials_completed: summary.json says 3, the observations give 1",
        "cold_start_p95_s: summary.json says 1.0, the observations give 2.5"]
