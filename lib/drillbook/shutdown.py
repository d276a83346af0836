"""One way for a command to end early: SIGINT or SIGTERM.

The first signal is remembered and handed to whatever is running gently (a runbook's kernel is
interrupted, so its experiment rolls back and its load stops inside the cell); when nothing can be
stopped gently, or after a grace period, or on a second signal, `Interrupted` is raised in the
main thread. Cleanup (rollbacks, stopping load, sealing evidence) runs shielded: further signals
during it are noted and do not cut it short. The CLI turns `Interrupted` into one line and exit
code 128 + signal (130 for SIGINT, 143 for SIGTERM).
"""

from __future__ import annotations

import _thread
import signal
import sys
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator

GRACE_S = 30.0  # how long a gently interrupted kernel may take to roll back and stop its load
HANDLED = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """The run was stopped by a signal. A KeyboardInterrupt, so that no `except Exception` swallows
    it and chaoslib treats it as Ctrl-C (rollbacks run); `outcome` says what was done about it."""

    def __init__(self, signum: int, at: float) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum, self.at = signum, at
        self.outcome: list[str] = []
        self.bundle: Path | None = None  # the evidence sealed for the interrupted run, if any
        self.halted: dict | None = SHUTDOWN.halted  # who halted the target, when a halt sent the signal
        global _last
        _last = self  # Typer turns a KeyboardInterrupt into a bare exit code 130; the CLI asks here

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def moment(self) -> str:
        return datetime.fromtimestamp(self.at, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")

    def cause(self) -> str:
        """Why the run stopped: the operator's halt, or the signal."""
        if self.halted:
            return f"halted by {self.halted.get('operator')}: {self.halted.get('reason') or 'no reason given'}"
        return f"interrupted by {self.signal_name}"

    def line(self) -> str:
        """What the CLI prints: why it stopped, then what was done."""
        return "; ".join([self.cause(), *self.outcome])


class Shutdown:
    """The signal state of this process (one per process: `SHUTDOWN`)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.at = 0.0
        self._gentle: list[Callable[[int], bool]] = []
        self._shielded = 0
        self._timer: threading.Timer | None = None
        self.halted: dict | None = None  # the target's halt (drillbook.halt) that sent the signal

    def reset(self) -> None:
        self.signum, self.at, self.halted = None, 0.0, None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def interrupted(self) -> Interrupted:
        assert self.signum is not None
        return Interrupted(self.signum, self.at)

    def handles_signals(self) -> bool:
        """Whether SIGTERM comes here now (a CLI command is running)."""
        return signal.getsignal(signal.SIGTERM) == self._handle

    def stop_for_halt(self, state: dict) -> bool:
        """From any thread: stop this process's run as SIGTERM would, naming the halt as its cause.
        False when nothing here handles signals (then the caller's run ends on its own)."""
        if not self.handles_signals():
            return False
        self.halted = state
        import os

        os.kill(os.getpid(), signal.SIGTERM)
        return True

    def note(self, signum: int) -> None:
        """Remember a signal that someone else handles (chaoslib during an experiment)."""
        if self.signum is None:
            self.signum, self.at = signum, time.time()

    def check(self) -> None:
        """Raise Interrupted at a safe point if a signal came."""
        if self.signum is not None and not self._shielded:
            raise self.interrupted()

    @contextmanager
    def gently(self, stop: Callable[[int], bool]) -> Iterator[None]:
        """While inside, a first signal calls stop(signum) instead of raising; stop returns False
        when it could not act (then the signal raises as usual)."""
        self._gentle.append(stop)
        try:
            yield
        finally:
            self._gentle.remove(stop)

    @contextmanager
    def shielded(self) -> Iterator[None]:
        """Cleanup that no signal may cut short."""
        self._shielded += 1
        try:
            yield
        finally:
            self._shielded -= 1

    def _handle(self, signum: int, frame: object) -> None:
        first = self.signum is None
        if first:
            self.signum, self.at = signum, time.time()
        if self._shielded:
            sys.stderr.write(f"drillbook: {signal.Signals(signum).name} received; still rolling back and sealing\n")
            return
        if first and self._gentle and all(stop(signum) for stop in list(self._gentle)):
            why = (f"the target was halted by {self.halted.get('operator')}" if self.halted
                   else f"{signal.Signals(signum).name} received")
            sys.stderr.write(f"drillbook: {why}; stopping the run (rollbacks run; again to stop at once)\n")
            self._timer = threading.Timer(GRACE_S, _thread.interrupt_main, kwargs={"signum": signum})
            self._timer.daemon = True
            self._timer.start()
            return
        raise self.interrupted()


SHUTDOWN = Shutdown()
_last: Interrupted | None = None


def last_interrupted() -> Interrupted | None:
    """The most recent Interrupted of this process (what the run did about it is in its outcome)."""
    return _last


@contextmanager
def handling_signals() -> Iterator[Shutdown]:
    """SIGINT and SIGTERM go to SHUTDOWN for the duration (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield SHUTDOWN
        return
    global _last
    previous = {signum: signal.getsignal(signum) for signum in HANDLED}
    SHUTDOWN.reset()
    _last = None
    for signum in HANDLED:
        signal.signal(signum, SHUTDOWN._handle)
    try:
        yield SHUTDOWN
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        SHUTDOWN.reset()
