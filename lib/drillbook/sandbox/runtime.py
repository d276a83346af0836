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

from drillbook.config import Defect, InCluster, SandboxConfig, ServiceEnvironment, build
from drillbook.sandbox.store import StateStore, open_store


class KubernetesDiscovery(InCluster):
    """Where the gateway finds its tiers when the platform runs on Kubernetes (the API as
    config.InCluster reaches it): desired replicas from each tier's Deployment (which the activator
    patches to scale from zero) and ready addresses from the pods its selector matches."""

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
    inference_url: str | None = None  # where agents ask for generations; else the local gateway's route
    gateway: str | None = None  # the gateway's address when it is not this machine's (a container's Service)

    @classmethod
    def from_environment(cls, env: ServiceEnvironment) -> "Runtime":
        """One service's runtime in a container (deploy/platform), from its DRILLBOOK_* variables:
        no supervisor, no control API, no other replica's files."""
        settings: dict[str, object] = dict(env.settings)
        for listed in ("tenants", "defects"):
            if isinstance(settings.get(listed), str):
                settings[listed] = [item.strip() for item in str(settings[listed]).split(",") if item.strip()]
        if env.tenant_keys and "tenants" not in settings:
            settings["tenants"] = sorted(env.tenant_keys)
        discovery = KubernetesDiscovery(**env.kubernetes.model_dump()) if env.kubernetes else None
        return cls(config=build(SandboxConfig, **settings), state_dir=env.state_dir, control_token="",
                   internal_token=env.internal_token or secrets.token_urlsafe(24), tenant_keys=env.tenant_keys,
                   gateway_port=0, kubernetes=discovery, inference_url=env.inference_url, gateway=env.gateway_url)

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
        return self.gateway or f"http://127.0.0.1:{self.gateway_port}"

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
