"""Where the workload runs, as one interface the chaos providers and drills call.

A target is built from a target profile (drillbook.profile) and acts on the workload's roles:
``agent``, ``inference`` and ``state_store`` (the sandbox also knows its own service names,
such as ``aggressor``).

- `sandbox`: the local reference platform, through its supervisor's control API
- `kubernetes`: Deployments and pods in allow-listed contexts and namespaces, through
  chaostoolkit-kubernetes and the kubernetes client
- `commands`: a workload operated through the user's own commands
- any kind a package adds through the entry-point group `drillbook.targets` (drillbook.target_kinds)
- `store`: the restore procedure from a profile's backup and restore commands (any kind)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from drillbook.agentapi import AgentApi
from drillbook.observation import ReplicaObservation
from drillbook.profile import LoadedProfile
from drillbook.targets.capabilities import Needs


class AccessChecks(Protocol):
    """What `drillbook target check` and the runner ask before anything is touched (read-only)."""

    granted: str  # what `target check` says of a runbook this target lets drillbook run

    def refusals(self, needs: Needs) -> list[str]:
        """Why this target cannot do what a runbook needs, one reason each; empty when it can.
        Read-only: a target asks only what it would have to do (rights, commands, status)."""

    def undeclared(self, needs: Needs) -> list[str]:
        """What a runbook needs that the profile does not describe at all (a tier's command, the
        store's procedure): such a runbook is not offered by this profile, rather than refused."""

    def readings(self) -> list[Any]:
        """What each read-only operation returns now (each tier's status, the store's health), as
        access.TargetCheck rows for `target check`; a failing one is a finding, not an error."""


class WorkloadOperations(Protocol):
    """The workload's roles (agent, inference, ...): read their replicas, kill and scale them."""

    def has(self, role: str) -> bool: ...

    def kill(self, role: str, count: int, signal: str) -> list[str]: ...

    def desired(self, role: str) -> int: ...

    def ready(self, role: str) -> int: ...

    def observe(self, role: str) -> ReplicaObservation:
        """One reading of the role's replicas (desired, ready, the ready replicas' identities),
        stamped with when it started and ended; a reading that failed keeps its error."""

    def scale(self, role: str, replicas: int) -> None: ...

    def settled(self, role: str) -> bool:
        """True when the role runs exactly the replicas it wants, all ready, none stopping."""

    def events(self) -> list[dict[str, Any]]:
        """The workload's own replica lifecycle events (scheduled, started, ready), where it has them."""


class StoreOperations(Protocol):
    """The state store, through the profile's procedure (or the platform's own): the restore drill
    and the on-call restore."""

    def backup_store(self) -> dict[str, Any]: ...

    def restore_store(self, backup: str = "latest") -> dict[str, Any]: ...

    def destroy_store(self) -> None: ...

    def recreate_store(self) -> None: ...

    def store_healthy(self) -> bool: ...


class Target(AccessChecks, WorkloadOperations, StoreOperations, Protocol):
    """A target as the runner, the chaos providers and the drills hold it: what it is (its profile,
    agent API and tenants) and the three capabilities above. Optional capabilities (tenant
    metrics, tenant limits, replica addresses, a platform of drillbook's own...) are further
    protocols in drillbook.targets.capabilities, asked with isinstance."""

    name: str
    kind: str
    api: AgentApi
    profile: LoadedProfile

    def gateway(self) -> tuple[str, dict[str, str]]: ...

    def secrets(self) -> list[str]:
        """Values that must never appear in evidence (tenant keys, tokens)."""


def target_for(profile: LoadedProfile, state_dir: Path | None = None) -> Target:
    """The target a profile describes (a sandbox target needs the sandbox to be running)."""
    if profile.kind == "sandbox":
        from drillbook.targets.sandbox import SandboxTarget

        return SandboxTarget(profile.state_dir(state_dir), profile)
    from drillbook.targets.sandboxes import with_sandboxes

    if profile.kind == "kubernetes":
        from drillbook.targets.kubernetes import KubernetesTarget

        return with_sandboxes(KubernetesTarget(profile))
    if profile.kind == "commands":
        from drillbook.targets.commands import CommandsTarget

        return with_sandboxes(CommandsTarget(profile, state_dir, run_paths(profile, state_dir)[1]))
    from drillbook.target_kinds import added_factory

    return added_factory(profile.kind)(profile, state_dir)


def run_paths(profile: LoadedProfile, state_dir: Path | None = None) -> tuple[Path, Path]:
    """Where runs on this target keep their state and their fault ledger: a sandbox's own folder,
    with its ledger in it; for other kinds the default state folder, one ledger per profile."""
    if profile.kind == "sandbox":
        state = profile.state_dir(state_dir)
        return state, state / "faults.jsonl"
    from drillbook.config import state_dir as default_state_dir

    state = default_state_dir(state_dir)
    return state, state.parent / "ledgers" / f"{profile.name}.jsonl"


def target_identity(profile: LoadedProfile, state_dir: Path | None = None) -> str:
    """What a target is, for locking (drillbook.runlock): a sandbox by its state folder, Kubernetes by
    context and namespace, any other kind by its profile file; one platform under two profile names
    is one target."""
    if profile.kind == "sandbox":
        return f"sandbox {profile.state_dir(state_dir).resolve()}"
    if profile.kind == "kubernetes" and profile.spec.kubernetes is not None:
        spec = profile.spec.kubernetes
        return f"kubernetes context {spec.context} namespace {spec.namespace}"
    where = profile.path.resolve() if profile.path.is_file() else profile.name
    return f"{profile.kind} profile {where}"


def run_lock_path(profile: LoadedProfile, state_dir: Path | None = None) -> Path:
    """The file of a target's run lock: in a sandbox's own folder; for other kinds beside the
    ledgers (run_paths), named by the target's identity, not the profile's name."""
    import hashlib

    state, ledger = run_paths(profile, state_dir)
    if profile.kind == "sandbox":
        return state / "run.lock"
    digest = hashlib.sha256(target_identity(profile).encode()).hexdigest()[:16]
    return ledger.parent.parent / "locks" / f"{digest}.lock"


class OwnedPlatform(Protocol):
    """A platform drillbook itself can start and stop (the sandbox), for a game day that finds it down."""

    state_dir: Path

    def running(self) -> bool: ...

    def start(self) -> None: ...

    def stop(self) -> None:
        """Stop what start() started (nothing when it was not started here)."""


def owned_platform(profile: LoadedProfile, state_dir: Path | None = None) -> OwnedPlatform | None:
    """The platform behind the profile when drillbook runs it itself; None when someone else does."""
    if profile.kind != "sandbox":
        return None
    from drillbook.targets.sandbox import SandboxPlatform

    return SandboxPlatform(profile.state_dir(state_dir))


def check_reachable(url: str, timeout: float = 3.0) -> None:
    """Raise TargetUnreachable unless something accepts TCP connections at the URL's host and port."""
    import socket
    from urllib.parse import urlsplit

    from drillbook.errors import TargetUnreachable

    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=timeout):
            pass
    except OSError as error:
        raise TargetUnreachable(f"cannot reach {url}: {error.strerror or error}") from None


def open_target(name_or_path: str | LoadedProfile, state_dir: Path | None = None) -> Target:
    """Load the profile (unless given), build its target and check that its gateway answers;
    refuses with one line."""
    from drillbook.errors import TargetUnreachable
    from drillbook.profile import load_profile

    profile = name_or_path if isinstance(name_or_path, LoadedProfile) else load_profile(name_or_path)
    if profile.kind == "sandbox":
        from drillbook.sandbox import launcher

        state = profile.state_dir(state_dir)
        if launcher.find(state) is None:
            raise TargetUnreachable(f"no sandbox is running on {state}; start one with `drillbook sandbox up`")
    target = target_for(profile, state_dir)
    gateway, _ = target.gateway()  # a missing tenant key variable is refused here
    check_reachable(gateway)
    return target
