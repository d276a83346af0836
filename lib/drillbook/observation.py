"""What drillbook saw of a target, each reading stamped with when it was taken.

A fault is judged by what was observed, never by what the call that made it answered, so every
reading carries the moment it started and the moment its answer came back: a reading that
started before an event can only say something about the world before that event. Readings are
plain frozen values, kept raw in the evidence (observations/*.jsonl) and fed to the pure
functions of drillbook.measure.
"""

from __future__ import annotations

import socket
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable

from drillbook import jsonl


@dataclass(frozen=True)
class ReplicaObservation:
    """One reading of a role's replicas: how many it wants, how many are ready, and which
    (identities of the ready replicas — pid, pod uid — where the target can tell; empty where it
    cannot). `stopping`: replicas told to stop that still exist (pods with a deletion timestamp,
    which keep their node's CPU and GPU until gone; 0 where the target cannot tell). `error`
    says why a reading got no answer (then it counts as not ready). `answering`: of the
    replicas watched across a kill (those whose own address answered just before it), the ones
    whose address still accepted a connection at this reading, probed from where drillbook
    runs; None where nothing was probed."""

    started: float
    ended: float
    desired: int = 0
    ready: int = 0
    ids: tuple[str, ...] = ()
    error: str = ""
    stopping: int = 0
    answering: tuple[str, ...] | None = None

    @property
    def full(self) -> bool:
        """Every replica the role wants is ready (and it wants at least one)."""
        return not self.error and 0 < self.desired <= self.ready

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ids": list(self.ids),
                "answering": None if self.answering is None else list(self.answering)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ReplicaObservation":
        answering = data.get("answering")
        return cls(**{**data, "ids": tuple(data.get("ids") or ()),
                      "answering": None if answering is None else tuple(answering)})

    def probed(self, watched: dict[str, str], held: dict[str, str], timeout_s: float = 0.5) -> "ReplicaObservation":
        """This reading with `answering` filled in for the watched replicas (identity -> host:port)
        and `ended` moved to when the probes were done. A watched address that the platform now
        gives to another replica (`held`: the addresses of the replicas it lists now, by
        identity) does not answer for the watched one: the platform gave it out again, so the
        old replica no longer holds it."""
        reused = {address for identity, address in held.items() if identity not in watched}
        answering = tuple(sorted(identity for identity, address in watched.items()
                                 if address not in reused and accepts_connections(address, timeout_s)))
        return replace(self, answering=answering, ended=time.time())


def accepts_connections(address: str, timeout_s: float = 0.5) -> bool:
    """Whether something accepts a TCP connection at host:port now (a refusal, a timeout or an
    unreachable network all say no)."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def observe_replicas(read: Callable[[], tuple[int, int, Iterable[str]] | tuple[int, int, Iterable[str], int]]
                     ) -> ReplicaObservation:
    """Take one reading with `read` (returning desired, ready, ready identities and, where the
    target can tell, how many are still stopping), stamped with when it started and ended; a
    failed reading is kept with its error."""
    started = time.time()
    try:
        desired, ready, ids, *stopping = read()
    except Exception as error:  # noqa: BLE001 - an unanswered reading is an observation too
        return ReplicaObservation(started, time.time(), error=f"{type(error).__name__}: {error}"[:200])
    return ReplicaObservation(started, time.time(), int(desired), int(ready), tuple(sorted(str(i) for i in ids)),
                              stopping=int(stopping[0]) if stopping else 0)


@dataclass(frozen=True)
class StoreObservation:
    """One reading of the state store: whether it answered healthy, and how many of the sessions
    known to have been written could be read back (None when not asked)."""

    started: float
    ended: float
    healthy: bool
    sessions_read: int | None = None
    sessions_known: int | None = None
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TierObservation:
    """One reading of a shared tier's per-tenant counters (the model server's, summed over its
    replicas): for each tenant the slot-seconds it has held (`gpu_seconds`), and the time its
    chunks of generation waited for a slot and how many there were (`queue_wait_sum`,
    `queue_wait_count`). The counters run from each replica's start, so only the change between
    two readings says what happened between them. `error` says why a reading got no answer."""

    started: float
    ended: float
    usage: dict[str, dict[str, float]] = field(default_factory=dict)
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "TierObservation":
        return cls(data["started"], data["ended"], {tenant: dict(counters) for tenant, counters in
                                                    (data.get("usage") or {}).items()}, data.get("error", ""))


def observe_tier(read: Callable[[], dict[str, dict[str, float]]]) -> TierObservation:
    """Take one reading of a shared tier's per-tenant counters with `read`, stamped with when it
    started and ended; a failed reading, or one that found no counters at all, is kept with why."""
    started = time.time()
    try:
        usage = read()
    except Exception as error:  # noqa: BLE001 - an unanswered reading is an observation too
        return TierObservation(started, time.time(), error=f"{type(error).__name__}: {error}"[:200])
    if not usage:
        return TierObservation(started, time.time(), error="no per-tenant counters answered")
    return TierObservation(started, time.time(), {tenant: dict(counters) for tenant, counters in usage.items()})


@dataclass
class ObservationLog:
    """Readings appended to a JSONL file as they are taken (a run cut short keeps them)."""

    path: Path | None
    entries: list[Any] = field(default_factory=list)

    def add(self, observation: Any) -> Any:
        self.entries.append(observation)
        if self.path is not None:
            jsonl.append(self.path, observation.to_json())
        return observation


def read_replica_observations(path: Path) -> list[ReplicaObservation]:
    """The readings a run kept, in the order taken."""
    return [ReplicaObservation.from_json(record) for record in jsonl.read(path)]
