"""A run's timeline: what happened, in order, each event stamped with when (`t`, epoch seconds)
and what (`kind`), kept in memory and handed as it is added to the timeline's listeners.

One type for the three timelines a run has: the runbook's (drillbook.runbook.Run), each chaos
experiment's (drillbook.chaos.runner), and the sealed one in the evidence bundle
(drillbook.evidence.bundle), which merges the other two. A listener is any callable taking the
event; `written_to` writes each to a JSONL file as it happens, so a run cut short keeps what it saw.
Events may come from several threads (chaoslib runs background activities in its own).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from drillbook import jsonl

TIMELINE = "timeline.jsonl"  # a run folder's timeline, as it happens
Event = dict[str, Any]
Listener = Callable[[Event], None]


class Timeline:
    """Events in the order they were added (see the module's docstring)."""

    def __init__(self, *listeners: Listener) -> None:
        self._events: list[Event] = []
        self._listeners = list(listeners)
        self._lock = threading.Lock()

    def add(self, kind: str, **fields: Any) -> Event:
        """An event happening now."""
        return self.merge([{"t": time.time(), "kind": kind, **fields}])[0]

    def merge(self, events: Iterable[Event], **extra: Any) -> list[Event]:
        """Events stamped elsewhere (each keeps its own `t`), with `extra` fields added to each."""
        added = [{**event, **extra} for event in events]
        with self._lock:
            self._events.extend(added)
            for event in added:
                for listener in self._listeners:
                    listener(event)
        return added

    @property
    def events(self) -> list[Event]:
        with self._lock:
            return list(self._events)

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    def __len__(self) -> int:
        with self._lock:
            return len(self._events)

    def __bool__(self) -> bool:
        return len(self) > 0


def written_to(path: Path) -> Listener:
    """A listener that appends each event to a JSONL file (drillbook.jsonl) as it is added."""
    return lambda event: jsonl.append(path, event)


__all__ = ["Event", "Listener", "TIMELINE", "Timeline", "written_to"]
