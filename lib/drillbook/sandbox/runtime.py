"""What one running sandbox is: its configuration, secrets and file layout, shared by every process.

`drillbook sandbox up` writes it once (mode 0600) into the state directory; the supervisor and
every service replica read it from there.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from drillbook.config import Defect, SandboxConfig
from drillbook.sandbox.store import StateStore, open_store


class KubernetesDiscovery(BaseModel):
    """Where the gateway finds its tiers when the platform runs on Kubernetes: desired replicas
    from each tier's Deployment (which the activator patches to scale from zero) and ready
    addresses from the pods its selector matches."""

    model_config = ConfigDict(frozen=True)

    server: str
    token: str
    ca_file: str
    namespace: str
    deployments: dict[str, str] = {"agent": "agent", "model": "model-server"}  # tier -> Deployment and Service


class Runtime(BaseModel):
    model_config = ConfigDict(frozen=True)

    config: SandboxConfig
    state_dir: Path
    control_token: str
    internal_token: str
    tenant_keys: dict[str, str]
    gateway_port: int
    kubernetes: KubernetesDiscovery | None = None

    @classmethod
    def create(cls, config: SandboxConfig, state_dir: Path, gateway_port: int) -> "Runtime":
        return cls(
            config=config,
            state_dir=state_dir,
            control_token=secrets.token_urlsafe(24),
            internal_token=secrets.token_urlsafe(24),
            tenant_keys={tenant: "dbk_" + secrets.token_urlsafe(18) for tenant in config.tenants},
            gateway_port=gateway_port,
        )

    # -- layout ------------------------------------------------------------------------------
    @property
    def runtime_file(self) -> Path:
        return self.state_dir / "runtime.json"

    @property
    def store_path(self) -> Path:
        return self.state_dir / "store" / "state.db"

    @property
    def backups_dir(self) -> Path:
        return self.state_dir / "backups"

    @property
    def events_file(self) -> Path:
        return self.state_dir / "events.jsonl"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def gateway_url(self) -> str:
        return f"http://127.0.0.1:{self.gateway_port}"

    def open_store(self) -> StateStore:
        return open_store(
            self.config.store,
            sqlite_path=self.store_path,
            dsn=self.config.dsn,
            idempotency=not self.config.has(Defect.NO_IDEMPOTENCY),
        )

    def write(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        partial = self.runtime_file.with_suffix(".partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(self.model_dump_json(indent=2))
        os.replace(partial, self.runtime_file)

    @classmethod
    def read(cls, path: Path) -> "Runtime":
        return cls.model_validate(json.loads(Path(path).read_text()))
