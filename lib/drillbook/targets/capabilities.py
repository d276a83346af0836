"""What a target may offer beyond its replicas and its store, as small protocols.

A drill or on-call runbook that needs one asks with ``isinstance(target, TenantMetrics)`` (the
protocols are runtime-checkable) and never reaches around the target for its internals; a
target that does not offer it simply lacks the methods. Where the figures come from (the
reference platform's model-server metrics, the gateway's rate limits, a namespace's
ResourceQuota) stays inside the target that knows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

STORE = "store"  # where a scenario acts on the state store (backup, restore, destroy: the store commands)
SANDBOXES = "sandboxes"  # where a scenario acts on code sandboxes (claim, run, kill: the CodeSandboxes capability)
OPTIONAL_TIERS = ("inference",)  # a workload without one has nothing there to act on (cold start scales if present)
Needs = tuple[tuple[str, str], ...]  # what a runbook does to a target (drillbook.scenarios.Scenario.needs)


@dataclass
class TargetCheck:
    """One row of `drillbook target check`: what was checked, whether it holds, and what was seen."""

    subject: str
    ok: bool
    detail: str


@runtime_checkable
class OwnPlatform(Protocol):
    """A target whose platform drillbook runs itself (the sandbox), which can say whether the very
    platform it opened still runs. One that stopped holds no fault: a platform starts clean."""

    def platform_running(self) -> bool: ...


@runtime_checkable
class FaultLeases(Protocol):
    """A target whose platform holds a lease on each fault a run makes and undoes the fault itself
    once the run stops renewing it (its runner killed, its machine gone): the sandbox's supervisor.
    The fault ledger leases each fault before it is applied and releases it once undone."""

    def lease_fault(self, fault: Any) -> None: ...

    def release_fault(self, fault: Any) -> None: ...


@runtime_checkable
class TenantMetrics(Protocol):
    """Per tenant, summed over the inference replicas: GPU-seconds and queue-wait sum and count."""

    def tenant_metrics(self) -> dict[str, dict[str, float]]: ...


@runtime_checkable
class TenantLimits(Protocol):
    """Each tenant's limit on shared inference, which an on-call engineer may lower and restore."""

    def tenant_limits(self) -> dict[str, dict[str, Any]]: ...

    def lowered_limit(self, current: dict[str, Any], rps: float, burst: int, quota: str) -> dict[str, Any]:
        """The limit to set instead of current, from the runbook's parameters (one ConfigError line
        when they do not describe one for this target)."""

    def set_tenant_limit(self, tenant: str, limit: dict[str, Any]) -> None: ...


@runtime_checkable
class Diagnostics(Protocol):
    """The platform's own signals over a window, for triage: per tenant requests, failures,
    throttling, p95, slot share and queue wait; replica restarts by role; recent notable events;
    the slowest recent requests; and the names of the signals it could not read."""

    def diagnose(self, window_s: float, notable: set[str]) -> dict[str, Any]: ...


@runtime_checkable
class ReplicaAddresses(Protocol):
    """Where each ready replica of a role serves, as host:port by its identity (the ids of
    `observe`), so that a kill can be seen from outside the platform's own API: a replica whose
    address still answers after the kill was not killed, whatever the API says of it."""

    def replica_addresses(self, role: str) -> dict[str, str]: ...


@runtime_checkable
class StoreCatalog(Protocol):
    """The state store's backups and stored sessions, listed."""

    def backups(self) -> list[dict[str, Any]]:
        """Oldest first: id, created_at, size_bytes, sessions, turns."""

    def store_sessions(self) -> list[dict[str, Any]]:
        """Every stored session: session_id, turns, chain_ok."""


@runtime_checkable
class CodeSandboxes(Protocol):
    """Code sandboxes for sessions (the sandbox drills): a tenant's new session with its sandbox
    client, the operator's view of every sandbox, killing one, and what an escape from one would
    reach (the platform's own loopback ports and files, for the isolation probes)."""

    def sandbox_session(self, tenant: str) -> Any:
        """A new session of the tenant's (drillbook.codeboxes.SandboxSession)."""

    def sandbox_fleet(self) -> dict[str, Any]:
        """{"at", "pool": {"size", "warm"}, "sandboxes": [{"id", "pid", "state", "session", ...}],
        "isolation": {"namespaces", "limits", "why_not"}, "events": [...]}, read now."""

    def kill_sandbox(self, sandbox_id: str, signal: str = "SIGKILL") -> dict[str, Any]: ...

    def kill_sandbox_service(self) -> None:
        """Kill the service that runs the sandboxes (a ConfigError where the profile has no way)."""

    def sandbox_service_killable(self) -> bool:
        """Whether kill_sandbox_service has a way to do it."""

    def sandbox_alive(self, sandbox: dict[str, Any]) -> bool | None:
        """Whether a sandbox of the fleet still runs, seen apart from the platform's own word
        (its process, here); None where the target cannot tell."""

    def escape_targets(self, tenant: str, session: str) -> list[dict[str, Any]]:
        """What an escape from a sandbox would reach: {"name", "kind": "tcp" | "read" | "write",
        "address"} each; a tenant's session names whose kept workspace counts as another's."""


@runtime_checkable
class Halting(Protocol):
    """A halt kept where every runner of the target looks (the sandbox: its supervisor), so that
    one operator stops every drill on it from anywhere that reaches it (drillbook.halt)."""

    def halt_state(self) -> dict[str, Any]:
        """{"halted": false}, or {"halted": true, "operator", "reason", "at", "at_utc"}."""

    def halt(self, operator: str, reason: str) -> dict[str, Any]:
        """Halt the target: its leased faults are undone at once; runs see it and stop."""

    def lift_halt(self) -> dict[str, Any]: ...
