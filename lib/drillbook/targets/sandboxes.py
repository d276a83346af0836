"""Code sandboxes of a workload drillbook does not run, as its profile describes them
(`workload.sandboxes`: the tenant's calls through the gateway, the operator's side by commands),
offered as the CodeSandboxes capability to the sandbox drills. docs/code-sandboxes.md.
"""

from __future__ import annotations

import json
from typing import Any

from drillbook.errors import ConfigError, TargetUnreachable
from drillbook.profile import SandboxCommands
from drillbook.targets.store import run_command

SANDBOX_COMMAND_TIMEOUT_S = 60.0


class ProfileSandboxes:
    """Mixed into a target whose profile has workload.sandboxes (drillbook.targets.target_for)."""

    profile: Any
    api: Any

    @property
    def _sandboxes(self) -> SandboxCommands:
        spec = self.profile.spec.workload.sandboxes
        assert spec is not None
        return spec

    def _sandbox_command(self, line: str, what: str, **fields: Any) -> str:
        try:
            return run_command(line, self.profile.folder, SANDBOX_COMMAND_TIMEOUT_S, what, **fields)
        except Exception as error:  # noqa: BLE001 - one kind of error for a failed workload command
            raise TargetUnreachable(str(error)) from None

    def sandbox_session(self, tenant: str) -> Any:
        from drillbook.codeboxes import new_session

        gateway, keys = self.gateway()
        spec = self._sandboxes
        return new_session(gateway, self.api, keys[tenant], tenant,
                           {"claim": spec.claim, "run": spec.run, "release": spec.release})

    def sandbox_fleet(self) -> dict[str, Any]:
        output = self._sandbox_command(self._sandboxes.fleet, "sandboxes fleet")
        try:
            found = json.loads(output.strip().splitlines()[-1])
            pool, sandboxes = found["pool"], found["sandboxes"]
            if not isinstance(sandboxes, list):
                raise TypeError("sandboxes")
            size, warm = int(pool["size"]), int(pool["warm"])
        except (ValueError, KeyError, IndexError, TypeError):
            raise TargetUnreachable('sandboxes fleet: expected JSON {"pool": {"size", "warm"}, "sandboxes": [...]}, '
                                    f"got {output.strip()[:120]!r}") from None
        return {"pool": {"size": size, "warm": warm}, "sandboxes": sandboxes,
                "isolation": {"namespaces": None, "limits": self._sandboxes.limits_enforced,
                              "why_not": "" if self._sandboxes.limits_enforced else "the profile says so"}}

    def kill_sandbox(self, sandbox_id: str, signal: str = "SIGKILL") -> dict[str, Any]:
        self._sandbox_command(self._sandboxes.kill, "sandboxes kill", sandbox=sandbox_id)
        return {"sandbox_id": sandbox_id}

    def kill_sandbox_service(self) -> None:
        if not self._sandboxes.kill_service:
            raise ConfigError(f"target profile {self.profile.name} has no workload.sandboxes.kill_service command")
        self._sandbox_command(self._sandboxes.kill_service, "sandboxes kill_service")

    def sandbox_service_killable(self) -> bool:
        return bool(self._sandboxes.kill_service)

    def sandbox_alive(self, sandbox: dict[str, Any]) -> bool | None:
        """What the alive command prints: true or false; anything else is "cannot tell" (None),
        never taken for a sandbox that is gone."""
        try:
            said = self._sandbox_command(self._sandboxes.alive, "sandboxes alive", sandbox=str(sandbox["id"]))
        except TargetUnreachable:
            return None
        word = said.strip().splitlines()[-1].strip().lower() if said.strip() else ""
        return {"true": True, "false": False}.get(word)

    def escape_targets(self, tenant: str, session: str) -> list[dict[str, Any]]:
        return [target.model_dump() for target in self._sandboxes.escape_targets]


def with_sandboxes(target: Any) -> Any:
    """The target, offering CodeSandboxes when its profile describes them."""
    if target.profile.spec.workload.sandboxes is None:
        return target
    cls = type(target)
    offering = type(f"{cls.__name__}WithSandboxes", (ProfileSandboxes, cls), {})
    target.__class__ = offering
    return target


__all__ = ["ProfileSandboxes", "with_sandboxes"]
