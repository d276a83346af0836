"""Steps every drill can use: its raw readings kept in the evidence, and a readiness watch.

A scenario's own steps live in its package (drillbook.scenarios.<name>.drill); this module holds
what more than one of them needs.
"""

from __future__ import annotations

import json
from typing import Any

from drillbook.runbook import Run

OBSERVATIONS = "observations"  # a run's raw readings, kept for `drillbook verify --recompute`


def keep_observations(run: Run, name: str, rows: list[dict[str, Any]]) -> None:
    """Keep raw observations in the run's evidence (observations/<name>, one JSON object a line)."""
    folder = run.work_dir / OBSERVATIONS
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(json.dumps(row, default=str) + "\n" for row in rows))


class ReadinessWatch:
    """Reads a role's replicas in a thread while something happens, each reading stamped with
    when it started and ended and kept raw in the evidence (observations/readiness-<role>.jsonl);
    for targets that keep no replica events. Precision: the sampling interval."""

    def __init__(self, run: Run, role: str, interval_s: float = 0.25) -> None:
        import threading

        from drillbook.observation import ObservationLog

        self.run, self.role, self.interval_s = run, role, interval_s
        self.log = ObservationLog(run.work_dir / OBSERVATIONS / f"readiness-{role}.jsonl")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    @property
    def samples(self) -> list[Any]:
        return list(self.log.entries)

    def _sample(self) -> None:
        target = self.run.workload()
        while not self._stop.is_set():
            self.log.add(target.observe(self.role))
            self._stop.wait(self.interval_s)

    def __enter__(self) -> "ReadinessWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


__all__ = ["OBSERVATIONS", "ReadinessWatch", "keep_observations"]
