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
from drillbook.profile import LoadedProfile, StoreCommands


def run_command(line: str, cwd: Path, timeout_s: float, what: str, **fields: Any) -> str:
    """Run one profile command; its stdout, or StoreUnavailable/ConfigError-style failure lines."""
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
    """backup / restore / destroy / healthy of a state store, from a profile's workload.store."""

    def __init__(self, profile: LoadedProfile) -> None:
        self.profile = profile
        self.commands: StoreCommands | None = profile.spec.workload.store

    def _need(self, what: str) -> StoreCommands:
        if self.commands is None:
            raise StoreUnavailable(f"{what}: target profile {self.profile.name} has no workload.store commands")
        return self.commands

    def _run(self, line: str, what: str, **fields: Any) -> str:
        return run_command(line, self.profile.folder, self._need(what).timeout_s, what, **fields)

    def backup(self) -> dict[str, Any]:
        started = time.time()
        output = self._run(self._need("backup").backup, "backup")
        lines = [line for line in output.splitlines() if line.strip()]
        return {"created": True, "backup": lines[-1].strip() if lines else "latest", "took_s": time.time() - started}

    def restore(self, backup: str = "latest") -> dict[str, Any]:
        started = time.time()
        self._run(self._need("restore").restore, "restore", backup=backup)
        return {"restored": backup, "took_s": time.time() - started}

    def destroy(self) -> None:
        commands = self._need("destroying the store")
        if not commands.destroy:
            raise StoreUnavailable(f"destroying the store: target profile {self.profile.name} has no "
                                   "workload.store.destroy command")
        self._run(commands.destroy, "destroying the store")

    def recreate(self) -> None:
        commands = self._need("re-creating the store")
        if not commands.recreate:
            raise StoreUnavailable(f"re-creating the store: target profile {self.profile.name} has no "
                                   "workload.store.recreate command")
        self._run(commands.recreate, "re-creating the store")

    def healthy(self) -> bool | None:
        """True/False from the healthy command; None when the profile has none."""
        if self.commands is None or not self.commands.healthy:
            return None
        try:
            self._run(self.commands.healthy, "store health")
            return True
        except StoreUnavailable:
            return False
