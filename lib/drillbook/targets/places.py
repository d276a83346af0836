"""Where a runbook's needs act on each kind of target, in that kind's own terms, read from the
profile alone (nothing is asked of the target): for `drillbook run --dry-run` (drillbook.blast).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from drillbook.profile import LoadedProfile

READ_ONLY = {"status", "pods"}


def place(profile: "LoadedProfile", where: str, action: str) -> str:
    """Where one need acts on this profile's target, in its own terms; "" when the profile does not
    describe it."""
    spec = profile.spec
    if where == "tenants":
        if profile.kind == "kubernetes":
            namespaces = sorted(str(ref.namespace) for ref in spec.tenants.values() if ref.namespace)
            return f"a tenant (its ResourceQuota, in one of {', '.join(namespaces)})" if namespaces else ""
        return "a tenant (its rate limit at the gateway)"
    if where == "sandboxes":
        if profile.kind == "sandbox":
            return "code sandboxes of sandbox service codebox"
        spec = profile.spec.workload.sandboxes
        line = {"kill": spec.kill, "claim": spec.claim, "run": spec.run}.get(action) if spec is not None else None
        return ("code sandboxes, by the command `" + line + "`" if action == "kill" else
                f"code sandboxes, through {line}") if line else ""
    if where == "store":
        if profile.kind == "sandbox":
            return "the sandbox's state store, through its supervisor"
        store = spec.workload.store
        line = getattr(store, action, None) if store is not None else None
        return f"the store, by the command `{line}`" if line else ""
    if profile.kind == "sandbox":
        from drillbook.targets.sandbox import SANDBOX_SERVICES

        role = spec.workload.agent if where == "agent" else spec.workload.inference if where == "inference" else None
        name = (role.service if role is not None and role.service else None) or SANDBOX_SERVICES.get(where, where)
        return f"sandbox service {name}"
    role = getattr(spec.workload, where, None)
    if role is None:
        return ""
    if profile.kind == "kubernetes":
        assert spec.kubernetes is not None
        namespace = role.namespace or spec.kubernetes.namespace
        return (f"deployment {namespace}/{role.deployment} (pods {role.selector}) in context "
                f"{spec.kubernetes.context}") if role.deployment else ""
    if profile.kind == "commands" and role.commands is not None:
        line = getattr(role.commands, "status" if action in READ_ONLY else action, None)
        return f"{where}, by the command `{line}`" if line else ""
    return f"{where} (target kind {profile.kind})"


def rights_taken(profile: "LoadedProfile", where: str, action: str) -> str:
    """The Kubernetes rights one need takes on a kubernetes target ("" elsewhere, and for the store,
    which the profile's own commands act on)."""
    if profile.kind != "kubernetes" or where == "store":
        return ""
    from drillbook.targets.kubernetes import kubernetes_rights

    return ", ".join(f"{verb} {resource}" for verb, _, resource in kubernetes_rights(action))


__all__ = ["place", "rights_taken"]
