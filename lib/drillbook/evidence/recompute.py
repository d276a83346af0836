"""Every judged figure of a bundle derived again from the raw observations it keeps, with the
same pure functions the drill used (`drillbook verify --recompute`).

A figure in summary.json is only as good as what it was computed from: this reads the bundle's
readings (observations/), the experiment's measurements (chaos/*/measurements.json) and the
load's request log (load/requests-*.csv), computes each figure again and names any that
disagree with summary.json. A digest proves a file was not changed; this proves the figure
follows from what was seen.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drillbook import jsonl

TOLERANCE = 1e-6


@dataclass(frozen=True)
class Recomputed:
    """One figure: what summary.json says and what the observations give."""

    figure: str
    recorded: Any
    recomputed: Any

    @property
    def agrees(self) -> bool:
        if isinstance(self.recorded, (int, float)) and isinstance(self.recomputed, (int, float)):
            if math.isnan(self.recorded) and math.isnan(self.recomputed):
                return True
            return abs(float(self.recorded) - float(self.recomputed)) <= TOLERANCE * max(1.0, abs(self.recomputed))
        return self.recorded == self.recomputed

    def describe(self) -> str:
        return f"{self.figure}: summary.json says {self.recorded!r}, the observations give {self.recomputed!r}"


def _measurements(folder: Path, experiment: str) -> list[dict[str, Any]]:
    found = sorted((folder / "chaos").glob(f"*-{experiment}/measurements.json"))
    return [json.loads(path.read_text()) for path in found]


def _ha(folder: Path, metrics: dict[str, Any]) -> list[Recomputed]:
    from drillbook.load import read_request_log
    from drillbook.measure import (READY_FROM_EVENTS, SUSTAIN_READINGS, ha_figures, kill_landing, recovered_at,
                                   replicas_ready_at)
    from drillbook.observation import ReplicaObservation, read_replica_observations
    from drillbook.scenarios.ha_replica_loss import HOLD_S

    measured = _measurements(folder, "ha-replica-loss")
    fault = (measured[0] if measured else {}).get("fault_injected") or {}
    fault_at = fault.get("at")
    if not fault_at or "before" not in fault:
        return []
    readings = [ReplicaObservation.from_json(o) for o in fault.get("observations") or []]
    landing = kill_landing(ReplicaObservation.from_json(fault["before"]), readings, fault_at)
    found = [Recomputed("kill seen to land", (fault.get("landed") or {}).get("landed"), landing.landed)]
    if not landing.landed:
        return found
    if metrics.get("replicas_ready_from") == READY_FROM_EVENTS:
        events = jsonl.read(folder / "observations" / "target-events.jsonl")
        ready_at = replicas_ready_at(events, fault.get("replicas", []), fault_at)
    else:
        watched = read_replica_observations(folder / "observations" / "readiness-agent.jsonl")
        ready_at = recovered_at([*readings, *watched], landing.at, SUSTAIN_READINGS)
    requests = read_request_log(sorted((folder / "load").glob("requests-*.csv")))
    turns = requests[requests["name"] == "turn"]
    figures = ha_figures(turns, fault_at, ready_at, tolerance=2.0, hold_s=HOLD_S).to_json()
    return found + [Recomputed(name, metrics.get(name), value) for name, value in figures.items() if name in metrics]


def _cold_start(folder: Path, metrics: dict[str, Any]) -> list[Recomputed]:
    from drillbook.measure import ColdStartTrial, cold_start_summary

    trials = []
    for index, measured in enumerate(_measurements(folder, "cold-start")):
        if metrics.get(f"trial_{index + 1}_experiment_verdict") not in ("PASS", "FAIL"):
            continue
        first = next(iter(measured.get("cold_start") or []), None)
        if first is not None:
            trials.append(ColdStartTrial(first["sent"], first["sent"], first["sent"], first["sent"],
                                         first["first_token"]))
    summary = cold_start_summary(trials)
    # A figure the run never recorded (a run cut short) is no claim, and is not compared.
    found = [Recomputed("trials_completed", metrics["trials_completed"], len(trials))] \
        if "trials_completed" in metrics else []
    return found + [Recomputed(f"cold_start_{name}", metrics.get(f"cold_start_{name}"), summary[name])
                    for name in ("p50_s", "p95_s", "p99_s", "max_s") if f"cold_start_{name}" in metrics]


RECOMPUTERS = {"ha-replica-loss": _ha, "cold-start": _cold_start}


def recompute_bundle(folder: Path) -> list[Recomputed]:
    """Each figure of the bundle's runbook that can be derived again (none for a runbook that
    keeps no raw observations of its own, or a bundle without a summary)."""
    summary_path = folder / "summary.json"
    if not summary_path.exists():
        return []
    summary = json.loads(summary_path.read_text())
    recompute = RECOMPUTERS.get(summary.get("runbook", ""))
    return recompute(folder, summary.get("metrics") or {}) if recompute else []
