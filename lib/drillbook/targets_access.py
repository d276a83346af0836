"""Where a workload's gateway is and which tenant keys reach it, for the target a command names.

Until target profiles exist this knows two targets: the running sandbox, and a URL with keys
from DRILLBOOK_TENANT_KEYS (``tenant=key,...``).
"""

from __future__ import annotations

import socket
from pathlib import Path
from urllib.parse import urlsplit

from drillbook.errors import ConfigError, TargetUnreachable


def parse_tenant_keys(text: str) -> dict[str, str]:
    pairs = [item.split("=", 1) for item in text.split(",") if item.strip()]
    if any(len(pair) != 2 or not pair[0].strip() or not pair[1].strip() for pair in pairs):
        raise ConfigError("invalid DRILLBOOK_TENANT_KEYS: use tenant=key pairs separated by commas")
    return {name.strip(): key.strip() for name, key in pairs}


def format_tenant_keys(keys: dict[str, str]) -> str:
    """The `tenant=key,...` form parse_tenant_keys reads (and the locustfiles' --tenant-keys)."""
    return ",".join(f"{tenant}={key}" for tenant, key in keys.items())


def check_reachable(url: str, timeout: float = 3.0) -> None:
    """Raise TargetUnreachable unless something accepts TCP connections at the URL's host and port."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=timeout):
            pass
    except OSError as error:
        raise TargetUnreachable(f"cannot reach {url}: {error.strerror or error}") from None


def gateway_and_keys(target: str, host: str | None, sandbox_state: Path, keys_text: str) -> tuple[str, dict[str, str]]:
    if target == "sandbox":
        if host:
            raise ConfigError("--host is only used with --target url")
        from drillbook.sandbox import launcher

        handle = launcher.find(sandbox_state)
        if handle is None:
            raise TargetUnreachable(f"no sandbox is running on {sandbox_state}; start one with `drillbook sandbox up`")
        check_reachable(handle.gateway_url)
        return handle.gateway_url, handle.tenant_keys
    if target == "url":
        if not host:
            raise ConfigError("--target url needs --host")
        keys = parse_tenant_keys(keys_text)
        if not keys:
            raise ConfigError("--target url needs tenant keys in DRILLBOOK_TENANT_KEYS")
        check_reachable(host)
        return host.rstrip("/"), keys
    raise ConfigError(f"unknown target {target!r}; use sandbox or url")
