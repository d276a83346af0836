"""The reference platform's delivery verifiers: its sessions read back through the gateway, or
from sessions already in hand, every hash of the chain recomputed (`drillbook.sandbox.chain`).
The entry point ``reference`` of the ``drillbook.verifiers`` group.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx

from drillbook.errors import DeliveryError
from drillbook.sandbox.chain import verify_chain
from drillbook.sandbox.store import Turn

if TYPE_CHECKING:
    from drillbook.profile import LoadedProfile


class ReferenceVerifier:
    """The reference platform's read-back: GET /v1/sessions/{id} through the gateway."""

    def __init__(self, gateway_url: str, tenant_keys: dict[str, str], timeout: float = 30.0) -> None:
        self._http = httpx.Client(base_url=gateway_url, timeout=timeout)
        self._keys = tenant_keys

    def close(self) -> None:
        self._http.close()

    def read(self, tenant: str, session_id: str) -> list[Turn] | None:
        response = self._http.get(f"/v1/sessions/{session_id}",
                                  headers={"Authorization": f"Bearer {self._keys[tenant]}"})
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise DeliveryError(f"reading session {session_id} back failed: HTTP {response.status_code}")
        return [Turn(**turn) for turn in response.json()["turns"]]

    def chain_ok(self, session_id: str, turns: list[Turn]) -> bool:
        return verify_chain(session_id, turns).ok


class StoredSessionsVerifier:
    """Read-back from sessions already in hand (an export, a dump, a test's own data), chains
    checked the reference platform's way."""

    def __init__(self, sessions: dict[str, list[Turn]]) -> None:
        self.sessions = sessions

    def read(self, tenant: str, session_id: str) -> list[Turn] | None:
        return self.sessions.get(session_id)

    def chain_ok(self, session_id: str, turns: list[Turn]) -> bool:
        return verify_chain(session_id, turns).ok


def reference_verifier(gateway_url: str, tenant_keys: dict[str, str], profile: "LoadedProfile") -> "ReferenceVerifier":
    """Entry point ``reference``: the reference platform, every hash recomputed."""
    return ReferenceVerifier(gateway_url, tenant_keys)
