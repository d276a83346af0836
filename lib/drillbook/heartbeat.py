"""The heartbeat that keeps a run's fault leases alive while its process lives: a daemon thread,
so that it dies with the process, and the leases then run out where they are held (the sandbox's
supervisor, the watchdog beside a run, the annotations in a Kubernetes cluster)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


class LeaseHeartbeat:
    """Renews, every third of the lease, the leases on the faults this process made and has not
    undone, for as long as the process lives: a daemon thread, which dies with it (and then the
    leases run out and whoever holds them undoes the faults). It stops when no fault is held.
    renew(runs) pushes back the leases of those runs; an OSError or ControlApiError from it is a
    platform away for a moment, and the next beat tries again."""

    def __init__(self, renew: Callable[[list[str]], Any], seconds: float,
                 away: tuple[type[BaseException], ...] = (OSError,)) -> None:
        self.renew, self.seconds, self.away = renew, seconds, away
        self.held: dict[str, str] = {}  # fault id -> its run
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def hold(self, fault: str, run: str) -> None:
        with self.lock:
            self.held[fault] = run
            if self.thread is None:
                self.thread = threading.Thread(target=self._beat, name="drillbook-fault-lease-heartbeat", daemon=True)
                self.thread.start()

    def release(self, fault: str) -> None:
        with self.lock:
            self.held.pop(fault, None)

    def _beat(self) -> None:
        while True:
            time.sleep(self.seconds / 3)
            with self.lock:
                runs = sorted(set(self.held.values()))
                if not runs:
                    self.thread = None
                    return
            try:
                self.renew(runs)
            except self.away:
                continue


__all__ = ["LeaseHeartbeat"]
