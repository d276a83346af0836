"""`drillbook target check`: can drillbook reach this target, and which runbooks may it run there?

Read-only. It reaches the gateway, checks every tenant key with a read (a session that does not
exist must be answered "not found", not "unauthorised"), asks the workload for each tier's
status, and on kubernetes asks the API server (SelfSubjectAccessReview) whether the runner may
do what each runbook needs in the namespaces where it acts. Nothing is created, changed or deleted.
"""

from __future__ import annotations

import shlex
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from drillbook.profile import LoadedProfile

# The rights each action a scenario declares (drillbook.scenarios, `needs`) takes on Kubernetes:
# (verb, group, resource), asked in the namespace of the tier it acts on (the profile's unless the
# tier names one), or of every tenant for "tenants". These are the calls drillbook and
# chaostoolkit-kubernetes make: pods listed for readiness and deleted by terminate_pods,
# Deployments read for their desired count and patched by scale_deployment, quotas replaced by a shed.
KUBERNETES_RIGHTS: dict[str, list[tuple[str, str, str]]] = {
    "status": [("get", "apps", "deployments"), ("list", "", "pods")],
    "kill": [("list", "", "pods"), ("delete", "", "pods")],
    "scale": [("get", "apps", "deployments"), ("patch", "apps", "deployments"), ("list", "", "pods")],
    "pods": [("list", "", "pods")],
    "limit": [("get", "", "resourcequotas"), ("update", "", "resourcequotas")],
}
STORE = "store"  # backup, restore and destroy run the profile's store commands, with their own credentials
OPTIONAL_TIERS = ("inference",)  # a workload without one has nothing there to act on (cold start scales if present)


def declared_needs() -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    """Every declared runbook with what it does to a target: drills first, then on-call runbooks."""
    from drillbook.scenarios import REGISTRY

    return [(s.name, s.needs) for s in sorted(REGISTRY.values(), key=lambda s: s.oncall)]


@dataclass
class Finding:
    subject: str
    ok: bool
    detail: str


@dataclass
class TargetReport:
    """What the check found: reachability and keys, and per runbook whether it can run and why not."""

    profile: str
    kind: str
    reachability: list[Finding] = field(default_factory=list)
    runbooks: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.reachability) and all(f.ok for f in self.runbooks)

    def runbook(self, name: str) -> Finding:
        return next(f for f in self.runbooks if f.subject == name)


def check_tenant_keys(gateway: str, keys: dict[str, str], profile: LoadedProfile) -> list[Finding]:
    """One read per tenant of a session that cannot exist: 404 means the key was accepted."""
    api, path = profile.spec.api, profile.spec.delivery.readback_path
    findings = []
    with httpx.Client(base_url=gateway, timeout=10.0) as http:
        for tenant, key in keys.items():
            probe = path.replace("{session}", f"drillbook-check-{uuid.uuid4().hex[:8]}")
            try:
                status = http.get(probe, headers=api.auth(key)).status_code
            except httpx.HTTPError as error:
                findings.append(Finding(f"tenant {tenant}", False, f"no answer: {type(error).__name__}"))
                continue
            if status in (401, 403):
                findings.append(Finding(f"tenant {tenant}", False, f"key refused (HTTP {status})"))
            elif status in (200, 404):
                findings.append(Finding(f"tenant {tenant}", True, f"key accepted (HTTP {status} for an unknown session)"))
            else:
                findings.append(Finding(f"tenant {tenant}", False, f"unexpected HTTP {status} on {probe}"))
    return findings


def _command_found(line: str, folder: Path) -> str | None:
    """None when the command's program exists, else why not."""
    program = shlex.split(line)[0]
    if "/" in program:
        path = (folder / program) if not Path(program).is_absolute() else Path(program)
        return None if path.exists() else f"{program} does not exist"
    return None if shutil.which(program) else f"{program} is not on PATH"


def _commands_runbooks(profile: LoadedProfile, target: Any) -> list[Finding]:
    def line(tier: str, name: str) -> str | None:
        if tier == "store":
            return getattr(profile.spec.workload.store, name, None)
        spec = profile.role(tier)
        return getattr(spec.commands, name, None) if spec is not None else None

    status_problem = None
    if line("agent", "status"):
        try:
            target.ready("agent")
        except Exception as error:  # noqa: BLE001 - reported, not raised: this is a check
            status_problem = f"agent status: {error}"
    findings = []
    for runbook, needs in declared_needs():
        why = []
        for tier, name in needs:
            if name == "pods" or tier in OPTIONAL_TIERS and profile.role(tier) is None:
                continue  # metrics a commands target does not offer leave their figures empty
            if name == "limit":
                why.append("a commands target offers no tenant limits")
                continue
            command = line(tier, name)
            if not command:
                why.append(f"no {tier} {name} command")
            elif (problem := _command_found(command, profile.folder)) is not None:
                why.append(f"{tier} {name}: {problem}")
        if status_problem and any(tier == "agent" for tier, _ in needs):
            why.append(status_problem)
        findings.append(Finding(runbook, not why, "; ".join(why) or "commands found"))
    return findings


def _kubernetes_runbooks(profile: LoadedProfile) -> list[Finding]:
    from kubernetes import client

    from drillbook.targets.kubernetes import api_client

    spec = profile.spec.kubernetes
    assert spec is not None
    api = client.AuthorizationV1Api(api_client(spec.context))
    allowed: dict[tuple[str, str, str, str, str], bool] = {}

    def may(verb: str, group: str, resource: str, subresource: str, namespace: str) -> bool:
        key = (verb, group, resource, subresource, namespace)
        if key not in allowed:
            review = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=client.V1ResourceAttributes(
                    verb=verb, group=group, resource=resource, subresource=subresource or None,
                    namespace=namespace)))
            allowed[key] = bool(api.create_self_subject_access_review(review).status.allowed)
        return allowed[key]

    def namespaces(where: str) -> list[str] | str:
        """Where a need applies, or why the runbook cannot run for lack of it."""
        if where == "tenants":
            named = [ref.namespace for ref in profile.spec.tenants.values() if ref.namespace]
            return named or "no tenant names its namespace (tenants.<name>.namespace)"
        tier = profile.role(where)
        if tier is None and where in OPTIONAL_TIERS:
            return []
        return [(tier.namespace if tier else None) or spec.namespace]  # the target's defaults otherwise

    findings = []
    for runbook, needs in declared_needs():
        why: list[str] = []
        for where, action in needs:
            if where == STORE:
                if profile.spec.workload.store is None and "no workload.store commands" not in why:
                    why.append("no workload.store commands")
                continue
            found = namespaces(where)
            if isinstance(found, str):
                if found not in why:
                    why.append(found)
                continue
            for verb, group, resource in KUBERNETES_RIGHTS[action]:
                for namespace in found:
                    refused = f"not allowed: {verb} {resource} in {namespace}"
                    if refused not in why and not may(verb, group, resource, "", namespace):
                        why.append(refused)
        findings.append(Finding(runbook, not why, "; ".join(why) if why else "allowed"))
    return findings


def check_target(profile: LoadedProfile, state_dir: Path | None = None) -> TargetReport:
    """Everything `drillbook target check` reports, touching nothing."""
    from drillbook.delivery import NOT_VERIFIABLE, available_verifiers
    from drillbook.targets import check_reachable, target_for

    report = TargetReport(profile.name, profile.kind)
    try:
        target = target_for(profile, state_dir)
        gateway, keys = target.gateway()
        check_reachable(gateway)
    except Exception as error:  # noqa: BLE001 - reported as the first finding
        report.reachability.append(Finding("gateway", False, str(error)))
        return report
    report.reachability.append(Finding("gateway", True, f"{gateway} accepts connections"))
    report.reachability.extend(check_tenant_keys(gateway, keys, profile))
    verifier = profile.spec.delivery.verifier
    if verifier == NOT_VERIFIABLE:
        report.reachability.append(Finding("delivery", False, "no verifier: delivery checks are not verifiable, "
                                                              "so no runbook can PASS on them"))
    elif verifier not in available_verifiers():
        report.reachability.append(Finding("delivery", False, f"verifier {verifier!r} is not installed "
                                                              f"(drillbook.verifiers: {', '.join(available_verifiers())})"))
    else:
        report.reachability.append(Finding("delivery", True, f"verifier {verifier!r}"))
    if profile.kind == "sandbox":
        report.runbooks = [Finding(name, True, "the reference platform") for name, _ in declared_needs()]
    elif profile.kind == "commands":
        report.runbooks = _commands_runbooks(profile, target)
    else:
        try:
            report.runbooks = _kubernetes_runbooks(profile)
        except Exception as error:  # noqa: BLE001 - an API server that does not answer is a finding
            report.reachability.append(Finding("kubernetes API", False, f"{type(error).__name__}: {error}"[:300]))
    return report
