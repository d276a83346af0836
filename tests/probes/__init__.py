"""Probe families: drillbook tried as a hostile and unlucky user would, through the real CLI.

Each family is a list of probes; a probe does one hostile or unlucky thing to a fresh copy of
what it needs and says whether drillbook held (caught the tamper, refused the bad input in one
line with exit 2 and touched nothing). Every family starts with a control probe, the same thing
left untouched, which must come out clean: a family whose control fails is not judged, so a
harness that would call anything "caught" cannot pass.

The families: tamper, bad input, secrets, interrupts, concurrency (one module each). Run them and
print the table: ``python -m tests.probes [--family NAME]`` (from the checkout). The integration
test tests/integration/test_probe_families.py runs the first three, each probe as its own test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

# Variables of the developer's shell that would change what drillbook does under a probe.
_OWN_SETTINGS = ("DRILLBOOK_SIGNING_KEY", "DRILLBOOK_TRUSTED_KEYS", "DRILLBOOK_WITNESS", "DRILLBOOK_RESULTS",
                 "DRILLBOOK_STATE_DIR")


@dataclass(frozen=True)
class Probe:
    """One hostile or unlucky act and its judge: `act(workspace)` returns None when drillbook held,
    else what it let through, in one line."""

    family: str
    name: str
    act: Callable[[Path], str | None]


@dataclass(frozen=True)
class Outcome:
    probe: Probe
    missed: str | None  # None: drillbook held

    @property
    def held(self) -> bool:
        return self.missed is None


def drillbook(args: Sequence[str | Path], env: dict[str, str] | None = None, cwd: Path | None = None,
              timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The real CLI in a new process, without the caller's own drillbook settings."""
    environment = {key: value for key, value in os.environ.items() if key not in _OWN_SETTINGS}
    environment.update({"COLUMNS": "250", **(env or {})})
    return subprocess.run([sys.executable, "-m", "drillbook", *map(str, args)], env=environment, capture_output=True,
                          text=True, timeout=timeout, cwd=cwd, stdin=subprocess.DEVNULL)


def run_family(probes: Sequence[Probe], workspace: Path) -> list[Outcome]:
    """Each probe in a folder of its own under workspace."""
    outcomes = []
    for index, probe in enumerate(probes):
        folder = workspace / f"{index:03d}"
        folder.mkdir(parents=True)
        outcomes.append(Outcome(probe, probe.act(folder)))
    return outcomes


def table(outcomes: Sequence[Outcome]) -> str:
    """Held / probes per family, then one line per probe that was let through."""
    families: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        families.setdefault(outcome.probe.family, []).append(outcome)
    lines = [f"{'family':<12} {'held':>9}"]
    for family, done in families.items():
        lines.append(f"{family:<12} {sum(o.held for o in done):>4} / {len(done):<4}")
    lines += [f"MISSED {o.probe.family}/{o.probe.name}: {o.missed}" for o in outcomes if not o.held]
    return "\n".join(lines)


__all__ = ["Outcome", "Probe", "drillbook", "run_family", "table"]
