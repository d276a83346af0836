"""Target profiles: how drillbook finds and drives one agent workload, read from YAML.

A profile (``targets/<name>.yaml``) says where the workload runs (kind ``sandbox``,
``kubernetes`` or ``commands``), how to reach its gateway and speak its agent API, which
tenants exist (by the NAME of the environment variable holding each key, never a key), how to
reach its agent, inference and state-store tiers, how to back up and restore its store, how to
read its sessions back for the delivery audit, and the SLO thresholds each runbook judges by.
Nothing of the reference platform is assumed: its defaults live in ``targets/sandbox.yaml``.

Kinds:
- ``sandbox``: the local reference platform, driven through its supervisor.
- ``kubernetes``: Deployments and pod selectors in allow-listed contexts and namespaces.
- ``commands``: a workload operated through the user's own commands (compose, systemd, a VM
  script): one command per operation, contract in docs/commands-target.md.

Every problem is one ConfigError line naming the field, raised before anything is touched.
"""

from __future__ import annotations

import ipaddress
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from drillbook import project
from drillbook.agentapi import AgentApi, ReadBack
from drillbook.config import StrictModel, validation_line
from drillbook.errors import ConfigError
from drillbook.target_kinds import BUILT_IN, check_kind

ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")


def env_name(name: str) -> str:
    """name, if it is an environment variable's name (upper case, digits, '_'); else ValueError."""
    if not ENV_NAME.match(name):
        shown = repr(name) if len(name) <= 60 else f"{name[:40]!r}… ({len(name)} characters)"
        raise ValueError(f"{shown} is not an environment variable name (upper case, digits, '_')")
    return name


ROLES = ("agent", "inference", "state_store", "aggressor")  # aggressor: floods inference as one tenant (noisy neighbour)
PositiveSeconds = Annotated[float, Field(gt=0, le=86_400)]


def parse_tenant_keys(text: str) -> dict[str, str]:
    """Tenant keys in the `tenant=key,...` form handed to Locust (a secret environment variable)."""
    pairs = [item.split("=", 1) for item in text.split(",") if item.strip()]
    if any(len(pair) != 2 or not pair[0].strip() or not pair[1].strip() for pair in pairs):
        raise ConfigError("invalid tenant keys: use tenant=key pairs separated by commas")
    return {name.strip(): key.strip() for name, key in pairs}


def format_tenant_keys(keys: dict[str, str]) -> str:
    """The `tenant=key,...` form parse_tenant_keys reads."""
    return ",".join(f"{tenant}={key}" for tenant, key in keys.items())


class TenantRef(StrictModel):
    """A tenant, by the environment variable that holds its API key."""

    key_env: str = Field(description="name of the environment variable holding this tenant's key")
    namespace: str | None = Field(None, description="kubernetes: the tenant's namespace (shedding patches its quota)")
    quota: str = Field("inference", description="kubernetes: the tenant namespace's ResourceQuota to shed with")

    @field_validator("key_env")
    @classmethod
    def _env_name(cls, name: str) -> str:
        return env_name(name)


def command_placeholders(line: str) -> list[str]:
    """The {names} a profile command asks to be filled in, or ValueError: a command that does not
    split like a shell line, a placeholder with attribute or index access ({backup.__class__}),
    or a format spec or conversion (only plain names are filled in, as whole words)."""
    import shlex
    import string

    try:
        parts = shlex.split(line)
    except ValueError as error:
        raise ValueError(f"{line!r} does not split like a shell line: {error}") from None
    names = []
    for part in parts:
        try:
            parsed = list(string.Formatter().parse(part))
        except ValueError as error:
            raise ValueError(f"{line!r}: {error} (write {{{{ and }}}} for literal braces)") from None
        for _, name, spec, conversion in parsed:
            if name is None:
                continue
            if not re.fullmatch(r"[a-z_]+", name) or spec or conversion:
                raise ValueError(f"{line!r}: placeholder {{{name}{'!' + conversion if conversion else ''}"
                                 f"{':' + spec if spec else ''}}} is not a plain name")
            names.append(name)
    return names


def _fills(allowed: dict[str, tuple[str, ...]]):  # noqa: ANN202 - a pydantic model validator
    """A model validator: each command field's placeholders are among those filled in for it."""
    def check(model: BaseModel) -> BaseModel:
        for field, names in allowed.items():
            line = getattr(model, field)
            if line is None:
                continue
            unknown = sorted(set(command_placeholders(line)) - set(names))
            if unknown:
                raise ValueError(f"{field}: {{{unknown[0]}}} is not filled in for this command (it fills in "
                                 + (", ".join(f"{{{n}}}" for n in names) or "nothing") + ")")
        return model
    return model_validator(mode="after")(check)


class RoleCommands(StrictModel):
    """How a `commands` target operates one tier. {count}, {signal} and {replicas} are filled in."""

    status: str = Field(description='prints JSON {"desired": n, "ready": n, "replicas": n}')
    kill: str | None = Field(None, description="kills {count} replicas with {signal}; prints their names")
    scale: str | None = Field(None, description="sets the desired replica count to {replicas}")

    placeholders_filled = _fills({"status": (), "kill": ("count", "signal"), "scale": ("replicas",)})


class Role(StrictModel):
    """One tier of the workload: a Deployment and pod selector (kubernetes) or commands."""

    deployment: str | None = None
    selector: str | None = None
    namespace: str | None = Field(None, description="kubernetes: the tier's namespace, if not the profile's")
    commands: RoleCommands | None = None
    service: str | None = Field(None, description="the sandbox service name (sandbox kind only)")
    metrics_token_env: str | None = Field(
        None, description="name of the environment variable holding the token the tier's /metrics asks before it "
                          "shows per-tenant series (the reference platform: its internal token); without it they "
                          "are summed over tenants")

    @field_validator("metrics_token_env")
    @classmethod
    def _env_name(cls, name: str | None) -> str | None:
        return None if name is None else env_name(name)


class StoreCommands(StrictModel):
    """The restore drill's procedure on a store drillbook does not know (pg_dump, velero, a script).

    Commands run without a shell, in the profile's folder, with {backup} filled in for restore.
    backup prints the backup's name (last line); healthy exits 0 when the store serves.
    """

    backup: str
    restore: str
    destroy: str | None = Field(None, description="the drill's disaster; without it the drill cannot run")
    healthy: str | None = None
    recreate: str | None = Field(None, description="an empty, working store when no backup can be restored")
    timeout_s: PositiveSeconds = 600.0

    placeholders_filled = _fills({"backup": (), "restore": ("backup",), "destroy": (), "healthy": (), "recreate": ()})


class EscapeTarget(StrictModel):
    """Something a code sandbox must not reach: a loopback port, a file to read, a folder to write."""

    name: str = Field(min_length=1, max_length=80)
    kind: Literal["tcp", "read", "write"]
    address: str = Field(min_length=1, description="tcp: 127.0.0.1:PORT (loopback only); read, write: a path")

    @model_validator(mode="after")
    def _loopback_only(self) -> "EscapeTarget":
        if self.kind == "tcp":
            host, _, port = self.address.rpartition(":")
            try:
                loopback = ipaddress.ip_address(host.strip("[]")).is_loopback
            except ValueError:
                loopback = host == "localhost"
            if not loopback or not port.isdigit():
                raise ValueError(f"escape target {self.name!r}: {self.address!r} is not a loopback address and port "
                                 "(probes aim at this machine's loopback only)")
        return self


class SandboxCommands(StrictModel):
    """A workload's code sandboxes, for the sandbox drills (docs/code-sandboxes.md). The tenant's
    calls go through the gateway with its key ({session} filled in); the operator's side is your
    commands, run without a shell in the profile's folder ({sandbox} filled in)."""

    claim: str = Field("/v1/sessions/{session}/sandbox", description="POST: claim the session's sandbox")
    run: str = Field("/v1/sessions/{session}/sandbox/runs", description='POST {"code", "language", "timeout_s"}')
    release: str = Field("/v1/sessions/{session}/sandbox", description="DELETE: release it")
    fleet: str = Field(description='prints {"pool": {"size": n, "warm": n}, "sandboxes": [{"id", "session", '
                                   '"state", "running"}]}')
    kill: str = Field(description="kills sandbox {sandbox}")
    alive: str = Field(description="prints true while sandbox {sandbox} runs, false once it is gone")
    kill_service: str | None = Field(None, description="kills the sandbox service itself (sandbox-loss)")
    limits_enforced: bool = Field(True, description="false: the memory, process and CPU probes are reported "
                                                    "'not enforced on this platform'")
    escape_targets: list[EscapeTarget] = Field(default_factory=list,
                                               description="what a sandbox must not reach (the isolation probes)")

    placeholders_filled = _fills({"fleet": (), "kill": ("sandbox",), "alive": ("sandbox",), "kill_service": ()})


class Workload(StrictModel):
    gateway_url: str | None = Field(None, description="base URL clients use (not for the sandbox kind)")
    agent: Role | None = None
    inference: Role | None = None
    state_store: Role | None = None
    aggressor: Role | None = Field(None, description="a tier that floods inference as one tenant (noisy-neighbour drill)")
    store: StoreCommands | None = None
    sandboxes: SandboxCommands | None = Field(None, description="code sandboxes for sessions (not for the sandbox "
                                                                "kind, which has its own)")

    @field_validator("gateway_url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if url is not None and not re.match(r"^https?://[^/\s]+", url):
            raise ValueError(f"must be an http(s) URL, got {url!r}")
        return url.rstrip("/") if url else url


class Delivery(StrictModel):
    """How the delivery audit reads sessions back.

    verifier: the name of an entry point in the ``drillbook.verifiers`` group (drillbook ships
    ``reference`` and ``readback``; ``readback`` reads readback_path through ``mapping``), or ``none`` when the workload offers no read-back: the
    delivery checks are then reported not verifiable, and the verdict cannot be PASS.
    """

    verifier: str = "readback"
    readback_path: str = Field("/v1/sessions/{session}", description="GET: the session's acknowledged turns")
    mapping: ReadBack = Field(default_factory=ReadBack, description="where the read-back answer carries each "
                                                                     "stored turn and its fields (JMESPath)")
    options: dict[str, Any] = Field(default_factory=dict, description="passed to the verifier")


class Load(StrictModel):
    locustfile: str | None = Field(None, description="your own locustfile (relative to the profile) for every load run")


class KubernetesSpec(StrictModel):
    context: str
    namespace: str
    allowed_contexts: list[str] = Field(min_length=1)
    allowed_namespaces: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _allowed(self) -> "KubernetesSpec":
        if self.context not in self.allowed_contexts:
            raise ValueError(f"context {self.context!r} is not in allowed_contexts")
        if self.namespace not in self.allowed_namespaces:
            raise ValueError(f"namespace {self.namespace!r} is not in allowed_namespaces")
        return self


class PromQlSlo(StrictModel):
    """An SLO stated as PromQL: asked of the profile's Prometheus when a runbook finishes (or by an
    experiment's promql_within probe); one number, or the check fails saying why."""

    name: str = Field(min_length=1)
    query: str = Field(min_length=1, description="PromQL giving one number; $__range is the run's length (e.g. 42s)")
    comparison: Literal["<=", "<", ">=", ">", "=="] = "<="
    threshold: float
    unit: str = ""
    runbooks: list[str] = Field(default_factory=list, description="the runbooks it judges (default: every one)")


class PrometheusSpec(StrictModel):
    url: str = Field(pattern=r"^https?://", description="the Prometheus server's base URL (HTTP API)")
    timeout_s: float = Field(10.0, gt=0, le=300)
    settle_s: float = Field(0.0, ge=0, le=300, description="seconds to wait before asking, so the last scrape "
                                                             "covers the end of the run")
    slos: list[PromQlSlo] = Field(default_factory=list)

    def slos_for(self, runbook: str) -> list[PromQlSlo]:
        return [slo for slo in self.slos if not slo.runbooks or runbook in slo.runbooks]


class SandboxSpec(StrictModel):
    state_dir: str | None = Field(None, description="the sandbox's state folder (default: DRILLBOOK_STATE_DIR)")


def is_loopback(host: str) -> bool:
    """This machine's loopback: localhost, 127.0.0.0/8 or ::1."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_allowed(host: str, allowed: list[str]) -> bool:
    """Whether drillbook may dial a host: loopback always; else only a host the profile allows by
    name (exactly, or `*.suffix` for every name under a domain), by address, or by network (CIDR)."""
    if is_loopback(host):
        return True
    host = host.lower().rstrip(".")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for entry in (e.lower().rstrip(".") for e in allowed):
        if entry == host or (entry.startswith("*.") and host.endswith(entry[1:])):
            return True
        if address is not None and "/" in entry:
            try:
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                continue
    return False


class TargetProfile(StrictModel):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")
    kind: str = Field(description="sandbox, kubernetes, commands, or a kind a package adds (drillbook.target_kinds)")
    description: str = ""
    sandbox: SandboxSpec | None = None
    kubernetes: KubernetesSpec | None = None
    workload: Workload = Field(default_factory=Workload)
    tenants: dict[str, TenantRef] = Field(default_factory=dict)
    api: AgentApi = Field(default_factory=AgentApi)
    delivery: Delivery = Field(default_factory=Delivery)
    load: Load = Field(default_factory=Load)
    prometheus: PrometheusSpec | None = None
    slos: dict[str, dict[str, float | int | bool | str]] = Field(
        default_factory=dict, description="per runbook: parameter = threshold, over the notebook's defaults")
    options: dict[str, Any] = Field(default_factory=dict,
                                    description="settings read by a target kind a package adds (drillbook's own read none)")
    allowed_hosts: list[str] = Field(default_factory=list, description=(
        "hosts beyond this machine's loopback that drillbook may dial (the gateway, Prometheus): names, "
        "`*.domain`, addresses or networks (10.0.0.0/8); a URL to any other is refused when the profile is loaded"))

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, kind: str) -> str:
        return check_kind(kind)

    @model_validator(mode="after")
    def _kind_fields(self) -> "TargetProfile":
        if self.options and self.kind in BUILT_IN:
            raise ValueError(f"options are read only by target kinds a package adds, not by kind {self.kind}")
        if self.kind == "kubernetes" and self.kubernetes is None:
            raise ValueError("kind kubernetes needs a kubernetes section (context, namespace, allow-lists)")
        allowed = self.kubernetes.allowed_namespaces if self.kubernetes else []
        for where, namespace in self.namespaces():
            if namespace not in allowed:
                raise ValueError(f"{where} {namespace!r} is not in kubernetes.allowed_namespaces")
        if self.kind != "kubernetes" and self.kubernetes is not None:
            raise ValueError(f"a kubernetes section is only used with kind kubernetes, not {self.kind}")
        if self.kind != "sandbox":
            if self.sandbox is not None:
                raise ValueError(f"a sandbox section is only used with kind sandbox, not {self.kind}")
            if not self.workload.gateway_url:
                raise ValueError(f"kind {self.kind} needs workload.gateway_url")
            if not self.tenants:
                raise ValueError(f"kind {self.kind} needs at least one tenant")
        elif self.tenants or self.workload.gateway_url:
            raise ValueError("the sandbox kind takes its gateway and tenants from the running sandbox")
        elif self.workload.sandboxes is not None:
            raise ValueError("the sandbox kind has code sandboxes of its own: workload.sandboxes is for other kinds")
        if self.kind == "commands":
            for role in ROLES:
                spec = getattr(self.workload, role)
                if spec is not None and spec.commands is None and role != "state_store":
                    raise ValueError(f"kind commands needs workload.{role}.commands")
        return self

    @model_validator(mode="after")
    def _dialled_hosts_allowed(self) -> "TargetProfile":
        for where, url in self.urls():
            host = urlsplit(url).hostname
            if host and not host_allowed(host, self.allowed_hosts):
                raise ValueError(f"{where} {url} is not on this machine's loopback and {host} is not in "
                                 "allowed_hosts: add it there to let drillbook dial it")
        return self

    def urls(self) -> list[tuple[str, str]]:
        """Every URL the profile has drillbook dial, with the field that names it."""
        named = [("workload.gateway_url", self.workload.gateway_url),
                 ("prometheus.url", self.prometheus.url if self.prometheus else None)]
        return [(where, url) for where, url in named if url]

    def namespaces(self) -> list[tuple[str, str]]:
        """Every namespace the profile names outside its own, with the field that names it."""
        tiers = [(f"workload.{role}.namespace", getattr(self.workload, role).namespace) for role in ROLES
                 if getattr(self.workload, role) is not None and getattr(self.workload, role).namespace]
        return tiers + [(f"tenants.{tenant}.namespace", ref.namespace) for tenant, ref in self.tenants.items()
                        if ref.namespace]

    def role(self, role: str) -> Role | None:
        if role not in ROLES:
            raise ConfigError(f"unknown workload role {role!r}; known: {', '.join(ROLES)}")
        return getattr(self.workload, role)


class LoadedProfile:
    """A validated profile with where it came from and its tenant keys read from the environment."""

    def __init__(self, spec: TargetProfile, path: Path) -> None:
        self.spec = spec
        self.path = path

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def folder(self) -> Path:
        return self.path.parent

    def role(self, role: str) -> Role | None:
        return self.spec.role(role)

    def tenant_keys(self) -> dict[str, str]:
        """Every tenant's key from its environment variable; a missing one is a ConfigError."""
        keys = {}
        for tenant, ref in self.spec.tenants.items():
            value = os.environ.get(ref.key_env, "")
            if not value:
                raise ConfigError(f"{self.path.name}: invalid tenants.{tenant}.key_env: environment variable "
                                  f"{ref.key_env} is not set")
            keys[tenant] = value
        return keys

    def metrics_token(self, role: str) -> str | None:
        """The token a tier's /metrics asks for its per-tenant series, from the environment variable
        its metrics_token_env names; None where the profile names none, a ConfigError where it is unset."""
        spec = self.spec.role(role)
        if spec is None or spec.metrics_token_env is None:
            return None
        value = os.environ.get(spec.metrics_token_env, "")
        if not value:
            raise ConfigError(f"{self.path.name}: invalid workload.{role}.metrics_token_env: environment variable "
                              f"{spec.metrics_token_env} is not set")
        return value

    def locustfile(self) -> Path | None:
        if not self.spec.load.locustfile:
            return None
        return (self.folder / self.spec.load.locustfile).resolve()

    def state_dir(self, explicit: Path | None = None) -> Path:
        """Where this target's state lives: explicit, else the sandbox section's folder, else the
        default (DRILLBOOK_STATE_DIR); other kinds keep their fault and mitigation ledgers there."""
        from drillbook.config import state_dir

        if explicit is None and self.spec.sandbox and self.spec.sandbox.state_dir:
            explicit = (self.folder / self.spec.sandbox.state_dir)
        return state_dir(explicit)


def profile_path(name_or_path: str) -> Path:
    """A profile name from targets/ or a path to a YAML file."""
    return project.find(project.TARGETS, name_or_path)


def available_profiles() -> list[str]:
    return project.names(project.TARGETS)


def parse_profile(text: str, path: Path) -> LoadedProfile:
    """Validate a profile's YAML; the SLO sections are checked against the runbooks' parameters."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(f"{path.name} is not valid YAML: {' '.join(str(error).split())}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path.name}: a profile is a mapping of fields")
    data = with_preset(data, path)
    try:
        spec = TargetProfile.model_validate(data)
    except ValidationError as error:
        raise ConfigError(f"{path.name}: {validation_line(error)}") from None
    _check_slos(spec, path)
    return LoadedProfile(spec, path)


def with_preset(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """The profile over its preset: ``preset: NAME`` names a fragment in targets/presets/ (the
    project's own, else a shipped one: the agent APIs people run), which the profile's own fields
    override, mapping by mapping (a list or a value replaces the preset's)."""
    name = data.get("preset")
    if name is None:
        return data
    if not isinstance(name, str):
        raise ConfigError(f"{path.name}: invalid preset: a preset name, known: {', '.join(project.names(project.PRESETS))}")
    fragment_path = _preset_by_name(name, path)
    try:
        fragment = yaml.safe_load(fragment_path.read_text()) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"preset {fragment_path.name} is not valid YAML: {' '.join(str(error).split())}") from None
    if not isinstance(fragment, dict) or "preset" in fragment:
        raise ConfigError(f"preset {fragment_path.name}: a preset is a mapping of profile fields, without a preset")
    fragment.pop("about", None)  # what the preset is for; not a profile field
    own = {key: value for key, value in data.items() if key != "preset"}
    return _merged(fragment, own)


def _preset_by_name(name: str, path: Path) -> Path:
    try:
        return project.find(project.PRESETS, name)
    except ConfigError:
        known = ", ".join(project.names(project.PRESETS)) or "none"
        raise ConfigError(f"{path.name}: invalid preset: unknown preset {name!r}; known: {known}") from None


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        merged[key] = (_merged(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict)
                       else value)
    return merged


def _check_slos(spec: TargetProfile, path: Path) -> None:
    """Each SLO names a runbook's own parameter, with a value its default's type allows."""
    from drillbook.parameters import INJECTED, available_runbooks, notebook_parameters, runbook_path, typed_value

    known = available_runbooks(oncall=True)
    for runbook, thresholds in spec.slos.items():
        if runbook not in known:
            raise ConfigError(f"{path.name}: invalid slos.{runbook}: unknown runbook; known: {', '.join(known)}")
        declared = notebook_parameters(runbook_path(runbook))
        for name, value in thresholds.items():
            if name not in declared or name in INJECTED:
                raise ConfigError(f"{path.name}: invalid slos.{runbook}.{name}: not a parameter of {runbook}")
            try:
                typed_value(f"slos.{runbook}.{name}", declared[name].default, value, repr(value))
            except ConfigError as error:
                raise ConfigError(f"{path.name}: {error}") from None


@lru_cache(maxsize=32)
def _cached(path: str, mtime_ns: int) -> LoadedProfile:
    resolved = Path(path)
    return parse_profile(resolved.read_text(), resolved)


def load_profile(name_or_path: str) -> LoadedProfile:
    """Find, read and validate a profile (cached per file version: providers call this per step)."""
    path = profile_path(name_or_path)
    return _cached(str(path), path.stat().st_mtime_ns)


def builtin_sandbox() -> LoadedProfile:
    """The sandbox profile: targets/sandbox.yaml (the project's own, else the shipped one)."""
    return load_profile("sandbox")
