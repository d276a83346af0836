"""A workload operated through the user's own commands (compose, systemd, a VM script).

Per role the profile gives a status command printing JSON ``{"desired": n, "ready": n,
"replicas": n}``, a kill command ({count}, {signal}; prints killed replica names, one per
line) and a scale command ({replicas}). See docs/commands-target.md.
"""

from __future__ import annotations

import json
from typing import Any

from drillbook.errors import ConfigError, TargetUnreachable
from drillbook.profile import RoleCommands
from drillbook.targets.store import ProfileTarget, run_command

COMMAND_TIMEOUT_S = 60.0


class CommandsTarget(ProfileTarget):
    kind = "commands"

    def has(self, role: str) -> bool:
        spec = self.profile.role(role)
        return spec is not None and spec.commands is not None

    def _commands(self, role: str) -> RoleCommands:
        spec = self.profile.role(role)
        if spec is None or spec.commands is None:
            raise ConfigError(f"target profile {self.name} has no commands for workload.{role}")
        return spec.commands

    def _run(self, line: str, what: str, **fields: Any) -> str:
        try:
            return run_command(line, self.profile.folder, COMMAND_TIMEOUT_S, what, **fields)
        except Exception as error:  # noqa: BLE001 - one kind of error for a failed workload command
            raise TargetUnreachable(str(error)) from None

    def _status(self, role: str) -> dict[str, int]:
        output = self._run(self._commands(role).status, f"{role} status")
        try:
            status = json.loads(output.strip().splitlines()[-1])
            return {k: int(status[k]) for k in ("desired", "ready", "replicas")}
        except (ValueError, KeyError, IndexError, TypeError):
            raise TargetUnreachable(f"{role} status: expected JSON with desired, ready and replicas, "
                                    f"got {output.strip()[:120]!r}") from None

    def kill(self, role: str, count: int, signal: str) -> list[str]:
        line = self._commands(role).kill
        if not line:
            raise ConfigError(f"target profile {self.name} has no kill command for workload.{role}")
        output = self._run(line, f"{role} kill", count=count, signal=signal)
        return [name.strip() for name in output.splitlines() if name.strip()]

    def desired(self, role: str) -> int:
        return self._status(role)["desired"]

    def ready(self, role: str) -> int:
        return self._status(role)["ready"]

    def scale(self, role: str, replicas: int) -> None:
        line = self._commands(role).scale
        if not line:
            raise ConfigError(f"target profile {self.name} has no scale command for workload.{role}")
        self._run(line, f"{role} scale", replicas=replicas)

    def settled(self, role: str) -> bool:
        status = self._status(role)
        return status["desired"] == status["ready"] == status["replicas"]
