"""Synchronous HTTP clients for a running sandbox: the supervisor's control API and the tenant API."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from drillbook.errors import ControlApiError, SandboxError


def _error_text(response: httpx.Response) -> str:
    try:
        return str(response.json().get("error", response.text))
    except ValueError:
        return response.text.strip()[:200]


class ControlClient:
    """The supervisor's control API: status, endpoints, events, scale, kill, store operations."""

    def __init__(self, url: str, token: str, timeout: float = 60.0) -> None:
        self.url = url
        self._http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "ControlClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as error:
            raise ControlApiError(f"control API at {self.url} unreachable: {error}") from None
        if response.status_code >= 400:
            raise ControlApiError(f"{method} {path}: {response.status_code} {_error_text(response)}")
        return response.json()

    def status(self) -> dict[str, Any]:
        return self._call("GET", "/v1/status")

    def halt_state(self) -> dict[str, Any]:
        return self._call("GET", "/v1/halt")

    def halt(self, operator: str, reason: str) -> dict[str, Any]:
        return self._call("POST", "/v1/halt", json={"operator": operator, "reason": reason})

    def lift_halt(self) -> dict[str, Any]:
        return self._call("DELETE", "/v1/halt")

    def endpoints(self) -> dict[str, Any]:
        return self._call("GET", "/v1/endpoints")

    def events(self, after: int = 0) -> list[dict[str, Any]]:
        return self._call("GET", "/v1/events", params={"after": after})["events"]

    def scale(self, service: str, replicas: int, reason: str = "drillbook", only_from: int | None = None) -> dict[str, Any]:
        """Set a tier's desired replicas (only_from: only if it is at that count now)."""
        body: dict[str, Any] = {"replicas": replicas, "reason": reason}
        if only_from is not None:
            body["only_from"] = only_from
        return self._call("POST", f"/v1/services/{service}/scale", json=body)

    def kill(self, service: str, count: int = 1, signal: str = "SIGKILL", replicas: list[str] | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"count": count, "signal": signal}
        if replicas:
            body["replicas"] = replicas
        return self._call("POST", f"/v1/services/{service}/kill", json=body)

    def store(self) -> dict[str, Any]:
        return self._call("GET", "/v1/store")

    def backups(self) -> list[dict[str, Any]]:
        return self._call("GET", "/v1/store/backups")["backups"]

    def backup(self) -> dict[str, Any]:
        return self._call("POST", "/v1/store/backup")

    def restore(self, backup: str = "latest") -> dict[str, Any]:
        return self._call("POST", "/v1/store/restore", json={"backup": backup})

    def destroy_store(self) -> dict[str, Any]:
        return self._call("POST", "/v1/store/destroy")

    def recreate_store(self) -> dict[str, Any]:
        return self._call("POST", "/v1/store/recreate")

    def store_sessions(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/v1/store/sessions")["sessions"])

    def tenant_limits(self) -> dict[str, dict[str, float]]:
        return dict(self._call("GET", "/v1/tenants")["limits"])

    def set_tenant_limit(self, tenant: str, rps: float, burst: int) -> dict[str, Any]:
        return self._call("POST", f"/v1/tenants/{tenant}/limit", json={"rps": rps, "burst": burst})

    def leases(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/v1/leases")["leases"])

    def lease(self, fault: str, run: str, what: str, undo: dict[str, Any], seconds: float) -> dict[str, Any]:
        return self._call("POST", "/v1/leases", json={"fault": fault, "run": run, "what": what, "undo": undo,
                                                      "seconds": seconds})

    def renew_leases(self, runs: list[str]) -> int:
        return int(self._call("POST", "/v1/leases/renew", json={"runs": runs})["renewed"])

    def release_lease(self, fault: str) -> bool:
        return bool(self._call("DELETE", f"/v1/leases/{fault}")["released"])

    def shutdown(self) -> dict[str, Any]:
        return self._call("POST", "/v1/shutdown")


class TenantClient:
    """The public API one tenant uses through the gateway: sessions and turns."""

    def __init__(self, gateway_url: str, api_key: str | None, timeout: float = 60.0) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key is not None else {}
        self._http = httpx.Client(base_url=gateway_url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "TenantClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return self._http.request(method, path, **kwargs)

    def create_session(self, idempotency_key: str | None = None) -> str:
        """Open a session under an idempotency key (a new one unless given), so that the gateway
        may retry the open on another replica."""
        response = self.request("POST", "/v1/sessions", headers={"Idempotency-Key": idempotency_key or uuid.uuid4().hex})
        self._expect(response, 201)
        return str(response.json()["session_id"])

    def turn(self, session_id: str, text: str, idempotency_key: str | None = None, max_tokens: int | None = None) -> dict[str, Any]:
        """Run one turn; a new idempotency key is made unless one is given (pass it again to retry)."""
        key = idempotency_key or uuid.uuid4().hex
        body: dict[str, Any] = {"input": text}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        response = self.request("POST", f"/v1/sessions/{session_id}/turns", json=body, headers={"Idempotency-Key": key})
        self._expect(response, 200)
        return response.json()

    def read_session(self, session_id: str) -> dict[str, Any]:
        response = self.request("GET", f"/v1/sessions/{session_id}")
        self._expect(response, 200)
        return response.json()

    @staticmethod
    def _expect(response: httpx.Response, status: int) -> None:
        if response.status_code != status:
            raise SandboxError(f"{response.request.method} {response.request.url.path}: "
                               f"{response.status_code} {_error_text(response)}")
