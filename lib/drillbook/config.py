"""Parameter and configuration models, and drillbook's own environment variables (state and
project folders, PostgreSQL DSN, CI, the reference platform's services in containers). Variables
that belong to something else are read where it is used: tenant keys named by a profile
(profile), the object store's credentials (evidence.objectstore), the kernel's environment
(kernel, load), a store's DSN in the sandbox (sandbox.store), the kubeconfig (targets.kubernetes)
and the values redaction must hide (evidence.redact).

Everything a user can set is validated here by pydantic before anything is started; a
validation failure becomes one ConfigError line that names the field.
"""

from __future__ import annotations

import enum
import os
import re
from pathlib import Path
from typing import Annotated, Literal, TypeVar, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from drillbook.errors import ConfigError

ENV_STATE_DIR = "DRILLBOOK_STATE_DIR"
ENV_PG_DSN = "DRILLBOOK_PG_DSN"
ENV_CI = "CI"


class Defect(str, enum.Enum):
    """Faults built into the reference platform so that a runbook can be shown to fail."""

    NO_FAIR_SHARING = "no-fair-sharing"  # model server serves tenants first come, first served
    NO_RETRIES = "no-retries"  # gateway never retries a failed upstream call
    NO_IDEMPOTENCY = "no-idempotency"  # agent applies a retried turn again
    SLOW_MODEL_LOAD = "slow-model-load"  # model server takes SLOW_MODEL_LOAD_S to become ready
    NO_BACKUPS = "no-backups"  # backup requests are accepted but nothing is written
    # Defects that lie: the platform answers as if it had done the thing, and did not.
    NOOP_KILL = "noop-kill"  # the control API says it killed replicas (or a code sandbox); nothing dies
    NOOP_DESTROY = "noop-destroy"  # the disaster is acknowledged; the store is untouched
    NOOP_RESTORE = "noop-restore"  # a restore reports success; nothing is restored
    EMPTY_BACKUPS = "empty-backups"  # backups are written, claim the store's counts, and hold an empty store
    SLOW_RESTART = "slow-restart"  # a killed replica comes back only after SLOW_RESTART_S
    STALE_STATUS = "stale-status"  # the status answers what it saw up to STALE_STATUS_S ago
    NOOP_FLOOD = "noop-flood"  # the aggressor starts and reports ready; it sends nothing
    # Streams that do not outlive their client.
    NO_STREAM_RESUME = "no-stream-resume"  # a reconnect starts the turn again: tokens repeated, the turn stored twice
    TURN_DIES_WITH_CLIENT = "turn-dies-with-client"  # a dropped connection cancels the turn it was streaming
    # Code sandboxes that do not hold.
    NO_ISOLATION = "no-isolation"  # code runs as a plain subprocess of the sandbox service
    NO_WARM_POOL = "no-warm-pool"  # no sandbox is kept warm: every claim boots one
    WORKSPACE_LOST = "workspace-lost"  # a session's workspace dies with its sandbox


SLOW_MODEL_LOAD_S = 8.0
SLOW_RESTART_S = 9.0
STALE_STATUS_S = 2.0

TENANT_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")

NonNegativeInt = Annotated[int, Field(ge=0)]


class StrictModel(BaseModel):
    """A model that refuses unknown fields, so a typo is an error and not a silent default."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class SandboxConfig(StrictModel):
    """How `drillbook sandbox up` builds the reference agent platform."""

    agents: NonNegativeInt = Field(2, description="agent service replicas")
    models: NonNegativeInt = Field(1, description="model server replicas")
    gateways: Annotated[int, Field(ge=1, le=8)] = Field(1, description="gateway replicas (share one port)")
    gpu_slots: Annotated[int, Field(ge=1, le=1024)] = Field(4, description="concurrent generations per model replica")
    tokens_per_second: Annotated[float, Field(ge=0)] = Field(
        200.0, description="token streaming rate per generation; 0 streams without delay"
    )
    max_tokens: Annotated[int, Field(ge=1, le=4096)] = Field(16, description="default tokens per turn")
    chunk_tokens: Annotated[int, Field(ge=1, le=4096)] = Field(
        4, description="tokens generated per slot hold (iteration-level scheduling)"
    )
    model_load_delay_s: Annotated[float, Field(ge=0, le=3600)] = Field(
        0.3, description="time from model server start to ready (simulated weight loading)"
    )
    post_commit_delay_s: Annotated[float, Field(ge=0, le=60)] = Field(
        0.0, description="time an agent spends after persisting a turn before answering (indexing it)"
    )
    store: Literal["sqlite", "postgres"] = Field("sqlite", description="state store kind")
    dsn: str | None = Field(None, description="PostgreSQL DSN, required when store is postgres")
    tenants: list[str] = Field(["tenant-a", "tenant-b"], description="tenant names")
    rate_limit_rps: Annotated[float, Field(gt=0)] = Field(
        1000.0, description="per-tenant request rate limit at the gateway"
    )
    rate_limit_burst: Annotated[int, Field(ge=1)] = Field(200, description="per-tenant burst size")
    gateway_port: Annotated[int, Field(ge=0, le=65535)] = Field(0, description="gateway port; 0 picks a free one")
    restart_backoff_s: Annotated[float, Field(gt=0, le=60)] = Field(0.2, description="first restart delay")
    restart_backoff_max_s: Annotated[float, Field(gt=0, le=600)] = Field(10.0, description="restart delay cap")
    activation_timeout_s: Annotated[float, Field(gt=0, le=3600)] = Field(
        60.0, description="how long the gateway holds a request while a service starts"
    )
    codeboxes: Annotated[int, Field(ge=0, le=1)] = Field(1, description="code sandbox service replicas (0 or 1)")
    codebox_pool: Annotated[int, Field(ge=0, le=64)] = Field(10, description="code sandboxes kept warm")
    codebox_boot_s: Annotated[float, Field(ge=0, le=600)] = Field(
        1.0, description="time a code sandbox takes to boot (simulated image and runtime start)")
    codebox_boot_concurrency: Annotated[int, Field(ge=1, le=64)] = Field(
        2, description="code sandboxes booting at once (a node starts so many at a time)")
    codebox_idle_s: Annotated[float, Field(gt=0, le=86400)] = Field(
        300.0, description="an idle claim is released after this long")
    codebox_memory_mib: Annotated[int, Field(ge=16, le=65536)] = Field(256, description="memory per code sandbox")
    codebox_pids: Annotated[int, Field(ge=8, le=65536)] = Field(64, description="processes per code sandbox")
    codebox_cpus: Annotated[float, Field(gt=0, le=64)] = Field(0.5, description="CPUs per code sandbox")
    defects: list[Defect] = Field(default_factory=list, description="built-in defects to switch on")
    aggressor_tenant: str | None = Field(None, description="tenant the aggressor service floods as (default: last)")
    aggressor_concurrency: Annotated[int, Field(ge=1, le=256)] = Field(
        32, description="sessions per aggressor: eight times the default slots, so a first-come-first-served "
        "tier queues a victim's every chunk behind seven rounds of the flood")
    aggressor_tokens: Annotated[int, Field(ge=1, le=4096)] = Field(64, description="tokens per aggressor turn")
    aggressor_max_s: Annotated[float, Field(gt=0, le=3600)] = Field(300.0, description="aggressor flood time bound")

    @field_validator("tenants")
    @classmethod
    def _tenant_names(cls, tenants: list[str]) -> list[str]:
        if not tenants:
            raise ValueError("at least one tenant is needed")
        for name in tenants:
            if not TENANT_NAME.match(name):
                raise ValueError(f"tenant name {name!r} must be lower-case letters, digits and '-'")
        if len(set(tenants)) != len(tenants):
            raise ValueError("tenant names must be unique")
        return tenants

    @model_validator(mode="after")
    def _store_needs_dsn(self) -> "SandboxConfig":
        if self.aggressor_tenant is not None and self.aggressor_tenant not in self.tenants:
            raise ValueError(f"aggressor tenant {self.aggressor_tenant!r} is not one of the tenants")
        if self.store == "postgres" and not self.dsn:
            raise ValueError(f"store 'postgres' needs a DSN (--dsn or {ENV_PG_DSN})")
        if self.store == "sqlite" and self.dsn:
            raise ValueError("a DSN is only used with store 'postgres'")
        if self.store != "sqlite" and Defect.EMPTY_BACKUPS in self.defects:
            raise ValueError("the empty-backups defect is built for store 'sqlite' only")
        return self

    def has(self, defect: Defect) -> bool:
        return defect in self.defects

    @property
    def effective_model_load_delay_s(self) -> float:
        if self.has(Defect.SLOW_MODEL_LOAD):
            return max(self.model_load_delay_s, SLOW_MODEL_LOAD_S)
        return self.model_load_delay_s


M = TypeVar("M", bound=BaseModel)


def validation_line(error: ValidationError, names: dict[str, str] | None = None) -> str:
    """One line naming the first invalid field and why; names: what the user typed for a field
    (its command-line option), where that differs from the field's own name."""
    first = error.errors()[0]
    parts = [str(part) for part in first["loc"]]
    if parts and parts[0] in (names or {}):  # an option the user typed: its name, not the field's or an index
        parts = [(names or {})[parts[0]], *(part for part in parts[1:] if not part.isdigit())]
    location = ".".join(parts) or "input"
    message = first["msg"].removeprefix("Value error, ")
    extra = f" ({len(error.errors()) - 1} more)" if len(error.errors()) > 1 else ""
    return f"invalid {location}: {message}{extra}"


def build(model: type[M], names: dict[str, str] | None = None, **values: object) -> M:
    """Validate values into a model, turning a pydantic error into one ConfigError line (naming a
    field by the option in `names` that set it, where given)."""
    try:
        return model.model_validate(values)
    except ValidationError as error:
        raise ConfigError(validation_line(error, names)) from None


def state_dir(explicit: Path | None = None) -> Path:
    """Where a sandbox keeps its runtime files, event log, store and logs."""
    if explicit is not None:
        return explicit.expanduser().resolve()
    configured = os.environ.get(ENV_STATE_DIR)
    if configured:
        return Path(configured).expanduser().resolve()
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "state"
    return (base / "drillbook" / "sandbox").resolve()


def default_pg_dsn() -> str | None:
    return os.environ.get(ENV_PG_DSN) or None


ENV_FAULT_LEASE_S = "DRILLBOOK_FAULT_LEASE_S"
DEFAULT_FAULT_LEASE_S = 30.0


def fault_lease_s() -> float:
    """How long a fault's lease lives without its run's heartbeat, where the platform holds leases
    (the sandbox): DRILLBOOK_FAULT_LEASE_S, default 30 s; the run renews every third of it."""
    text = os.environ.get(ENV_FAULT_LEASE_S, "").strip()
    if not text:
        return DEFAULT_FAULT_LEASE_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 1.0 <= seconds <= 3600.0:
        raise ConfigError(f"{ENV_FAULT_LEASE_S}={text[:40]!r}: a fault lease is 1 to 3600 seconds")
    return seconds


def running_in_ci() -> bool:
    return os.environ.get(ENV_CI, "").lower() in {"1", "true", "yes"}


# -- a reference-platform service in a container (deploy/platform) ----------------------------

ENV_INTERNAL_TOKEN = "DRILLBOOK_INTERNAL_TOKEN"
HEADER_INTERNAL_TOKEN = "X-Drillbook-Internal-Token"  # how the platform's services (and drillbook) show it
ENV_TENANT_KEYS_FILE = "DRILLBOOK_TENANT_KEYS_FILE"
ENV_INFERENCE_URL = "DRILLBOOK_INFERENCE_URL"
ENV_GATEWAY_URL = "DRILLBOOK_GATEWAY_URL"
ENV_DISCOVERY = "DRILLBOOK_DISCOVERY"
ENV_PORT = "DRILLBOOK_PORT"
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
CONTAINER_STATE_DIR = Path("/var/lib/drillbook")


class InCluster(StrictModel):
    """The Kubernetes API as a pod sees it: the service's address, its service account's token."""

    server: str
    token: str
    ca_file: str
    namespace: str


class ServiceEnvironment(StrictModel):
    """How a reference-platform service runs when it is not started by the sandbox's supervisor
    but as a container (deploy/platform): everything from DRILLBOOK_* environment variables.

    DRILLBOOK_INTERNAL_TOKEN             the secret the platform's services share (all but the aggressor)
    DRILLBOOK_GATEWAY_URL                where the aggressor sends its flood (the gateway's Service)
    DRILLBOOK_TENANT_KEYS_FILE           the gateway's tenants: one `tenant=key` a line
    DRILLBOOK_INFERENCE_URL              where an agent asks for generations (the gateway's internal route)
    DRILLBOOK_PG_DSN                     the agents' PostgreSQL store (else SQLite under DRILLBOOK_STATE_DIR)
    DRILLBOOK_DISCOVERY=kubernetes       the gateway finds agent and model pods through the API
    DRILLBOOK_PORT                       the port to serve on, on every address of the pod (8080)
    DRILLBOOK_<SETTING>                  any `drillbook sandbox up` setting, e.g. DRILLBOOK_GPU_SLOTS
    """

    internal_token: str | None = Field(None, min_length=16)
    replica: str
    port: Annotated[int, Field(ge=1, le=65535)] = 8080
    state_dir: Path = CONTAINER_STATE_DIR
    tenant_keys: dict[str, str] = Field(default_factory=dict)
    inference_url: str | None = None
    gateway_url: str | None = None
    kubernetes: InCluster | None = None
    settings: dict[str, str] = Field(default_factory=dict, description="SandboxConfig fields, as given")


def _tenant_keys(path: Path) -> dict[str, str]:
    keys = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip() and not line.lstrip().startswith("#"):
            tenant, sep, key = line.partition("=")
            if not sep or not TENANT_NAME.match(tenant.strip()) or not key.strip():
                raise ConfigError(f"{ENV_TENANT_KEYS_FILE} {path} line {number}: expected tenant=key")
            keys[tenant.strip()] = key.strip()
    return keys


def service_environment(environ: dict[str, str] | None = None, internal: bool = True) -> ServiceEnvironment:
    """A container's service settings from its environment; one ConfigError line when unusable.
    internal: the service takes part in the platform's internal calls and needs the shared token."""
    env = dict(os.environ if environ is None else environ)
    token = env.get(ENV_INTERNAL_TOKEN, "")
    if internal and not token:
        raise ConfigError(f"{ENV_INTERNAL_TOKEN} is not set: the platform's services share it (a Secret)")
    values: dict[str, object] = {"internal_token": token or None, "replica": env.get("HOSTNAME") or "replica"}
    if env.get(ENV_PORT):
        values["port"] = env[ENV_PORT]
    if env.get(ENV_STATE_DIR):
        values["state_dir"] = env[ENV_STATE_DIR]
    if env.get(ENV_TENANT_KEYS_FILE):
        path = Path(env[ENV_TENANT_KEYS_FILE])
        if not path.is_file():
            raise ConfigError(f"{ENV_TENANT_KEYS_FILE} {path} is not a file")
        values["tenant_keys"] = _tenant_keys(path)
    if env.get(ENV_INFERENCE_URL):
        values["inference_url"] = env[ENV_INFERENCE_URL]
    if env.get(ENV_GATEWAY_URL):
        values["gateway_url"] = env[ENV_GATEWAY_URL]
    discovery = env.get(ENV_DISCOVERY, "")
    if discovery not in {"", "kubernetes"}:
        raise ConfigError(f"{ENV_DISCOVERY} {discovery!r}: the only discovery is 'kubernetes'")
    if discovery:
        host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT", "443")
        if not host or not (SERVICE_ACCOUNT / "token").is_file():
            raise ConfigError(f"{ENV_DISCOVERY}=kubernetes outside a pod: no KUBERNETES_SERVICE_HOST or "
                              f"service-account token in {SERVICE_ACCOUNT}")
        values["kubernetes"] = {"server": f"https://{host}:{port}", "token": (SERVICE_ACCOUNT / "token").read_text(),
                                "ca_file": str(SERVICE_ACCOUNT / "ca.crt"),
                                "namespace": (SERVICE_ACCOUNT / "namespace").read_text().strip()}
    settings = {name: env[f"DRILLBOOK_{name.upper()}"] for name in SandboxConfig.model_fields
                if f"DRILLBOOK_{name.upper()}" in env and name not in {"dsn", "store", "gateway_port"}}
    if env.get(ENV_PG_DSN):
        settings.update(store="postgres", dsn=env[ENV_PG_DSN])
    values["settings"] = settings
    return build(ServiceEnvironment, **values)


ENV_HOME = "DRILLBOOK_HOME"
DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?$")


def parse_duration(text: str, what: str = "duration") -> float:
    """'90', '90s', '2m', '1h30m', '1.5s' -> seconds; anything else is a ConfigError."""
    match = DURATION.match(text.strip())
    if not text.strip() or not match or not any(match.groups()):
        raise ConfigError(f"invalid {what}: {text!r} (use for example 30s, 2m, 1h30m)")
    hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def project_dir() -> Path:
    """The user's project folder, searched before drillbook's shipped files (drillbook.project):
    $DRILLBOOK_HOME, else the current folder."""
    configured = os.environ.get(ENV_HOME)
    if configured:
        return Path(configured).expanduser().resolve()
    return Path.cwd().resolve()


class LoadOptions(StrictModel):
    """How one Locust run is shaped and bounded."""

    host: str = Field(description="base URL of the workload's gateway")
    users: Annotated[int, Field(ge=1, le=100_000)] = 10
    spawn_rate: Annotated[float, Field(gt=0)] = 10.0
    run_time_s: Annotated[float, Field(gt=0, le=86_400)] = 30.0
    stop_timeout_s: Annotated[float, Field(ge=0, le=600)] = 5.0
    workers: Annotated[int, Field(ge=0, le=64)] = Field(0, description="Locust workers under a master (0: one "
                                                               "process runs the users itself)")
    remote_workers: bool = Field(False, description="the workers are started elsewhere (pods pointing at the "
                                                    "master), not by drillbook")
    master_bind: str = Field("127.0.0.1", description="where the master listens for its workers")
    master_port: Annotated[int, Field(ge=0, le=65535)] = Field(0, description="the master's port (0: a free one)")
    env: dict[str, str] = Field(default_factory=dict, description="extra DRILLBOOK_* settings for the locustfile")

    @field_validator("host")
    @classmethod
    def _http_url(cls, host: str) -> str:
        if not re.match(r"^https?://[^/\s]+", host):
            raise ValueError(f"host must be an http(s) URL, got {host!r}")
        return host.rstrip("/")

    @model_validator(mode="after")
    def _workers(self) -> "LoadOptions":
        if self.remote_workers and not self.workers:
            raise ValueError("remote workers need a count (--workers N): the master waits for that many")
        if self.remote_workers and not self.master_port:
            raise ValueError("remote workers need the master's port (--master-port), the one they are pointed at")
        return self


ENV_RESULTS = "DRILLBOOK_RESULTS"
ENV_SIGNING_KEY = "DRILLBOOK_SIGNING_KEY"


def usable_folder(path: Path, what: str, make: bool = True) -> Path:
    """path made absolute and (make) the folder made with its parents where it is not there yet, or one
    ConfigError line when it cannot be a folder: a file in its place, a symlink loop, a name too
    long, a place where nothing can be created (/proc, a read-only mount, no permission)."""
    try:
        resolved = path.expanduser().resolve()
    except (RuntimeError, OSError) as error:  # RuntimeError: a symlink loop
        raise ConfigError(f"{what} {path} cannot be used: {error.strerror if isinstance(error, OSError) else error}"
                          ) from None
    try:
        if resolved.exists() and not resolved.is_dir():
            raise ConfigError(f"{what} {path} is a file, not a folder")
        if make:
            resolved.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"{what} {path} cannot be made: {error.strerror or error}") from None
    return resolved


@overload
def output_file(path: Path, what: str) -> Path: ...


@overload
def output_file(path: None, what: str) -> None: ...


def output_file(path: Path | None, what: str) -> Path | None:
    """path made absolute, or one ConfigError line when a file cannot be written there (a folder
    in its place, a parent that is a file); asked before any work is done. None (the option was
    not given) stays None."""
    if path is None:
        return None
    try:
        resolved = path.expanduser().resolve()
    except (RuntimeError, OSError) as error:
        raise ConfigError(f"{what} {path} cannot be used: {error}") from None
    if resolved.is_dir():
        raise ConfigError(f"{what} {path} is a folder, not a file")
    parent = next((p for p in resolved.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise ConfigError(f"{what} {path} cannot be written: {parent} is a file")
    if parent is not None and not os.access(parent, os.W_OK):
        raise ConfigError(f"{what} {path} cannot be written: {parent} is not writable")
    _can_make_folders(resolved.parent, parent, f"{what} {path}")
    return resolved


def _can_make_folders(folder: Path, existing: Path | None, what: str) -> None:
    """One ConfigError line when the folders between `existing` and `folder` cannot be made (a
    place such as /proc, a name too long); tried by making them and taking them away again."""
    made: list[Path] = []
    try:
        for missing in reversed([p for p in [folder, *folder.parents] if existing is None or p not in
                                 (existing, *existing.parents)]):
            missing.mkdir()
            made.append(missing)
    except OSError as error:
        raise ConfigError(f"{what} cannot be written: {error.strerror or error}") from None
    finally:
        for folder_made in reversed(made):
            folder_made.rmdir()


def results_dir(explicit: Path | None = None, make: bool = True) -> Path:
    """Where evidence bundles go: --results, else $DRILLBOOK_RESULTS, else results/ of the project
    folder (the current folder unless $DRILLBOOK_HOME names another); made unless only read (make)."""
    if explicit is not None:
        return usable_folder(explicit, "results folder", make)
    configured = os.environ.get(ENV_RESULTS)
    return usable_folder(Path(configured) if configured else project_dir() / "results",
                         f"results folder (${ENV_RESULTS})" if configured else "results folder", make)


ENV_WITNESS = "DRILLBOOK_WITNESS"
ENV_TRUSTED_KEYS = "DRILLBOOK_TRUSTED_KEYS"


def witness_file() -> Path | None:
    """Where each sealed bundle's signed ledger head is also appended, outside the results
    folder ($DRILLBOOK_WITNESS), so that a cut tail of the history can be seen; None: nowhere."""
    configured = os.environ.get(ENV_WITNESS)
    return Path(configured).expanduser().resolve() if configured else None


def trusted_keys_files() -> list[Path]:
    """Public keys an auditor trusts, besides --public-key: $DRILLBOOK_TRUSTED_KEYS, one file of
    PEM public keys (or several files separated by ':'). Never a private key found on the machine."""
    configured = os.environ.get(ENV_TRUSTED_KEYS, "")
    return [Path(part).expanduser() for part in configured.split(os.pathsep) if part]


def default_signing_key_path() -> Path:
    xdg = os.environ.get("XDG_CONFIG_HOME")
    return (Path(xdg) if xdg else Path.home() / ".config") / "drillbook" / "signing-key.pem"


def signing_key() -> Path | None:
    """The Ed25519 key that signs manifests: $DRILLBOOK_SIGNING_KEY, else the default key if it exists."""
    configured = os.environ.get(ENV_SIGNING_KEY)
    if configured:
        path = Path(configured).expanduser()
        if not path.exists():
            raise ConfigError(f"{ENV_SIGNING_KEY} names {path}, which does not exist")
        return path
    default = default_signing_key_path()
    return default if default.exists() else None


def evidence_settings() -> dict[str, object]:
    """How every bundle of this process is sealed: signing key, witness file, project root (for git)."""
    return {"signing_key": signing_key(), "witness": witness_file(), "project_root": project_dir()}

