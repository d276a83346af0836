"""A target kind that is not drillbook's: tinyagent's replica pool driven through its admin HTTP
API, as a team would ship a kind for its own platform (entry-point group drillbook.targets).

The profile names it with `kind: tinyagent-admin` and gives the admin API's URL as
`options.admin_url`; the gateway, tenants and store commands are read from the profile as for any
kind (drillbook.targets.store.ProfileTarget). Standard library only, beside drillbook's own API.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from drillbook.errors import ConfigError, TargetUnreachable
from drillbook.observation import ReplicaObservation
from drillbook.profile import LoadedProfile
from drillbook.targets.store import ProfileTarget

ROLE = "agent"


class TinyAgentAdminTarget(ProfileTarget):
    kind = "tinyagent-admin"
    granted = "admin API answers"

    def __init__(self, profile: LoadedProfile) -> None:
        super().__init__(profile)
        admin = profile.spec.options.get("admin_url")
        if not isinstance(admin, str) or not admin.startswith("http://"):
            raise ConfigError(f"target profile {profile.name}: kind tinyagent-admin needs options.admin_url")
        self.admin = admin.rstrip("/")

    def _call(self, method: str, path: str) -> dict[str, Any]:
        request = urllib.request.Request(f"{self.admin}{path}", method=method, data=b"" if method == "POST" else None)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read() or b"{}")
        except (OSError, ValueError) as error:
            raise TargetUnreachable(f"tinyagent admin {method} {path}: {error}") from None

    def _only_agent(self, role: str) -> None:
        if role != ROLE:
            raise ConfigError(f"kind tinyagent-admin drives only the {ROLE} tier, not {role}")

    def has(self, role: str) -> bool:
        return role == ROLE

    def undeclared(self, needs: Any) -> list[str]:
        return sorted({f"kind tinyagent-admin has no {where} tier" for where, action in needs
                       if where not in (ROLE, "store") and where != "tenants"})

    def refusals(self, needs: Any) -> list[str]:
        why = self.undeclared(needs)
        try:
            self._call("GET", "/status")
        except TargetUnreachable as error:
            why.append(str(error))
        return why

    def readings(self) -> list[Any]:
        return []

    def observe(self, role: str) -> ReplicaObservation:
        self._only_agent(role)
        started = time.time()
        try:
            status = self._call("GET", "/status")
        except TargetUnreachable as error:
            return ReplicaObservation(started, time.time(), 0, 0, error=str(error)[:200])
        return ReplicaObservation(started, time.time(), int(status["desired"]), int(status["ready"]),
                                  tuple(str(i) for i in status.get("ids") or []))

    def kill(self, role: str, count: int, signal: str) -> list[str]:
        self._only_agent(role)
        return list(self._call("POST", f"/kill?count={int(count)}&signal={signal}")["killed"])

    def desired(self, role: str) -> int:
        self._only_agent(role)
        return int(self._call("GET", "/status")["desired"])

    def ready(self, role: str) -> int:
        self._only_agent(role)
        return int(self._call("GET", "/status")["ready"])

    def scale(self, role: str, replicas: int) -> None:
        self._only_agent(role)
        self._call("POST", f"/scale?replicas={int(replicas)}")

    def settled(self, role: str) -> bool:
        self._only_agent(role)
        status = self._call("GET", "/status")
        return status["desired"] == status["ready"] == status["replicas"]


def tinyagent_admin(profile: LoadedProfile, state_dir: Path | None = None) -> TinyAgentAdminTarget:
    """The entry point: a profile of kind tinyagent-admin, built into its target."""
    return TinyAgentAdminTarget(profile)
