"""The restore procedure a profile describes with commands, for stores drillbook does not know.

Each command runs without a shell (split like a shell would), in the profile's folder, bounded
by the profile's timeout; placeholders such as {backup} are filled in. A command that fails is a
StoreUnavailable naming the command and its last line of output.
"""

from __future__ import annotations

import shlex
import subprocess
import time
from pathlib import Path
from typing import Any

from drillbook.errors import StoreUnavailable
from drillbook.profile import ROLES, LoadedProfile, StoreCommands


def run_command(line: str, cwd: Path, timeout_s: float, what: str, **fields: Any) -> str:
    """Run one profile command; its stdout, or StoreUnavailable/ConfigError-style failure lines."""
    for name, value in fields.items():  # a filled-in value is a word, never an option to the user's command
        if isinstance(value, str) and value.startswith("-"):
            raise StoreUnavailable(f"{what}: {{{name}}} {value[:60]!r} looks like an option; refused")
    argv = [part.format(**fields) for part in shlex.split(line)]
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except FileNotFoundError:
        raise StoreUnavailable(f"{what}: command {argv[0]!r} not found") from None
    except subprocess.TimeoutExpired:
        raise StoreUnavailable(f"{what}: {argv[0]} did not finish within {timeout_s:g}s") from None
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or [""]
        raise StoreUnavailable(f"{what}: {argv[0]} exited {done.returncode}: {last[0][:200]}")
    return done.stdout


class CommandStore:
    """backup / restore / destroy / recreate / healthy of a state store, from a profile's workload.store."""

    def __init__(self, profile: LoadedProfile) -> None:
        self.profile = profile
        self.commands: StoreCommands | None = profile.spec.workload.store

    def _run(self, field: str, what: str, **fields: Any) -> str:
        """Run workload.store.<field>; a profile without it is a StoreUnavailable naming the field."""
        line = getattr(self.commands, field) if self.commands is not None else None
        if not line:
            raise StoreUnavailable(f"{what}: target profile {self.profile.name} has no workload.store.{field} command")
        assert self.commands is not None
        return run_command(line, self.profile.folder, self.commands.timeout_s, what, **fields)

    def backup(self) -> dict[str, Any]:
        started = time.time()
        lines = [line for line in self._run("backup", "backup").splitlines() if line.strip()]
        return {"created": True, "backup": lines[-1].strip() if lines else "latest", "took_s": time.time() - started}

    def restore(self, backup: str = "latest") -> dict[str, Any]:
        started = time.time()
        self._run("restore", "restore", backup=backup)
        return {"restored": backup, "took_s": time.time() - started}

    def destroy(self) -> None:
        self._run("destroy", "destroying the store")

    def recreate(self) -> None:
        self._run("recreate", "re-creating the store")

    def healthy(self) -> bool | None:
        """True/False from the healthy command; None when the profile has none."""
        if self.commands is None or not self.commands.healthy:
            return None
        try:
            self._run("healthy", "store health")
            return True
        except StoreUnavailable:
            return False


class ProfileTarget:
    """What every target a profile describes in full (kubernetes, commands) shares: gateway and
    tenant keys from the profile, and the restore procedure from its store commands. Subclasses
    give kind, has, ready and the rest of the Target protocol."""

    kind = ""

    def __init__(self, profile: LoadedProfile) -> None:
        self.profile = profile
        self.name = profile.name
        self.api = profile.spec.api
        self.store = CommandStore(profile)

    def has(self, role: str) -> bool:
        raise NotImplementedError

    def ready(self, role: str) -> int:
        raise NotImplementedError

    def backup_store(self) -> dict[str, Any]:
        return self.store.backup()

    def restore_store(self, backup: str = "latest") -> dict[str, Any]:
        return self.store.restore(backup)

    def destroy_store(self) -> None:
        self.store.destroy()

    def recreate_store(self) -> None:
        self.store.recreate()

    def store_healthy(self) -> bool:
        healthy = self.store.healthy()
        if healthy is not None:
            return healthy
        if not self.has("state_store"):
            raise StoreUnavailable(f"target profile {self.name} gives no way to check the store "
                                   "(workload.store.healthy or a state_store tier)")
        return self.ready("state_store") > 0

    def events(self) -> list[dict[str, Any]]:
        return []

    def gateway(self) -> tuple[str, dict[str, str]]:
        return str(self.profile.spec.workload.gateway_url), self.profile.tenant_keys()

    def secrets(self) -> list[str]:
        tokens = [self.profile.metrics_token(role) for role in ROLES]
        return [*self.profile.tenant_keys().values(), *filter(None, tokens)]
