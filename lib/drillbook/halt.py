"""The halt button: one operator stops every drill on a target, from any machine that reaches it.

The halt is kept by the target itself (the Halting capability: the sandbox's supervisor), not by
any runner: `drillbook halt` sets it and the target undoes every leased fault at once; each run
on the target looks at it twice a second (HaltWatch) and, on seeing it, stops as SIGTERM would
stop it (kernel interrupted, faults rolled back, evidence sealed), its verdict ABORTED "halted by
OPERATOR: REASON"; a new run is refused until `drillbook halt --lift`.
"""

from __future__ import annotations

import threading
from typing import Any

from drillbook.errors import ConfigError

HALT_LOOK_S = 0.5  # how often a run looks at its target's halt


class TargetHalted(ConfigError):
    """A run asked for on a halted target."""


def refuse_if_halted(target: Any) -> None:
    """One line, before anything is touched, when the target is halted."""
    from drillbook.targets.capabilities import Halting

    if not isinstance(target, Halting):
        return
    state = target.halt_state()
    if state.get("halted"):
        raise TargetHalted(f"target {target.name} is halted by {state.get('operator')} since {state.get('at_utc')}: "
                           f"{state.get('reason') or 'no reason given'}; `drillbook halt --lift` lets runs start again")


class HaltWatch:
    """Looks at the target's halt while a run holds the target; on a halt, stops this process's
    run through drillbook.shutdown (only where it handles signals: a CLI command)."""

    def __init__(self, target: Any, interval_s: float = HALT_LOOK_S) -> None:
        self.target = target
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._look, name="halt-watch", daemon=True)

    def __enter__(self) -> "HaltWatch":
        from drillbook.targets.capabilities import Halting

        if isinstance(self.target, Halting):
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _look(self) -> None:
        from drillbook.shutdown import SHUTDOWN

        while not self._stop.wait(self.interval_s):
            try:
                state = self.target.halt_state()
            except Exception:  # noqa: BLE001 - a target that does not answer now may answer at the next look
                continue
            if state.get("halted"):
                SHUTDOWN.stop_for_halt(state)
                return


__all__ = ["HALT_LOOK_S", "HaltWatch", "TargetHalted", "refuse_if_halted"]
