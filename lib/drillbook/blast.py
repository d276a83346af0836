"""What a run would act on, said before anything is touched: its blast radius (`drillbook run
RUNBOOK --dry-run`).

It is read from three things only, and asks the target nothing: what the scenario declares it
does to a target (`needs`: a role, the store or the tenants, and an action), the parameters as
validated (how many replicas, which signal, how long, how many sessions), and the profile (where
each role is: a sandbox service, a Deployment with its pods and namespace and the rights each
action takes there, or the user's own command). A need the profile does not describe is said so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from drillbook.runspec import RunSpec

# Each action in words; what changes the target is in capitals, so that it stands out.
ACTIONS = {"status": "read the status of", "pods": "read the metrics of", "kill": "KILL replicas of",
           "scale": "SCALE", "backup": "BACK UP", "restore": "RESTORE", "destroy": "DESTROY",
           "limit": "LOWER the limit of", "claim": "CLAIM", "run": "RUN CODE in"}


def _ha(values: dict[str, Any]) -> dict[tuple[str, str], str]:
    return {("agent", "kill"): f"{values.get('kill_count')} replica(s) with {values.get('kill_signal')}, "
                               f"{values.get('kill_after_s')}s into the load"}


def _continuity(values: dict[str, Any]) -> dict[tuple[str, str], str]:
    if not values.get("kill_count"):
        return {("agent", "kill"): "none: kill_count 0 (the faults are the clients' own dropped streams)"}
    return {("agent", "kill"): f"{values.get('kill_count')} replica(s) with {values.get('kill_signal')}, "
                               f"{values.get('kill_after_s')}s into the load, while turns stream; clients drop "
                               f"{values.get('drop_rate')} of their streams and resume them"}


def _cold(values: dict[str, Any]) -> dict[tuple[str, str], str]:
    said = f"to 0 and back, {values.get('trials')} time(s), idle {values.get('idle_s')}s each"
    return {("agent", "scale"): said, ("inference", "scale"): said}


def _noisy(values: dict[str, Any]) -> dict[tuple[str, str], str]:
    return {("aggressor", "scale"): f"up for {values.get('burst_s')}s, beside {values.get('victim_sessions')} "
                                    f"session(s) of {values.get('victim_tenant')}"}


def _restore(values: dict[str, Any]) -> dict[tuple[str, str], str]:
    return {("store", "destroy"): f"once {values.get('sessions')} session(s) of {values.get('turns_before')} "
                                  "turn(s) were written and backed up; restored within "
                                  f"{values.get('restore_timeout_s')}s"}


def _restore_agent_state(values: dict[str, Any]) -> dict[tuple[str, str], str]:
    mode = "only shows what it would restore (dry_run)" if values.get("dry_run") else "restores"
    return {("store", "restore"): f"backup {values.get('backup')!r}: the runbook {mode}"}


def _shed(values: dict[str, Any]) -> dict[tuple[str, str], str]:
    mode = "only shows the change (dry_run)" if values.get("dry_run") else "applies the change"
    change = "puts back the limit it replaced" if values.get("undo") else (
        f"rps {values.get('rps')}, burst {values.get('burst')}" + (f", quota {values.get('quota')}" if values.get("quota")
                                                                  else ""))
    return {("tenants", "limit"): f"{values.get('tenant')!r} ({change}): the runbook {mode}"}


def _claim_burst(values: dict[str, Any]) -> dict[tuple[str, str], str]:
    return {("sandboxes", "claim"): f"the warm pool's size plus {values.get('beyond_pool')} at once, beside "
                                    f"{values.get('working_sessions')} working session(s); all released at the end"}


def _sandbox_loss(values: dict[str, Any]) -> dict[tuple[str, str], str]:
    service = "; then KILL the sandbox service itself (every tenant's sandboxes die with it)" \
        if values.get("kill_service") else ""
    return {("sandboxes", "kill"): f"{values.get('sandbox_kills')} of {values.get('sessions')} session(s)' "
                                   f"sandboxes, each mid-run{service}",
            ("sandboxes", "claim"): f"{values.get('sessions')} session(s), each writing {values.get('files')} file(s)"}


def _isolation(values: dict[str, Any]) -> dict[tuple[str, str], str]:
    return {("sandboxes", "run"): f"escape probes in one tenant's sandbox (loopback ports and the platform's "
                                  f"files only; {values.get('memory_mib')} MiB, {values.get('processes')} processes, "
                                  f"{values.get('cpu_workers')} busy processes for {values.get('cpu_s')}s)"}


DETAILS: dict[str, Callable[[dict[str, Any]], dict[tuple[str, str], str]]] = {
    "ha-replica-loss": _ha, "cold-start": _cold, "noisy-neighbour": _noisy, "restore-drill": _restore,
    "restore-agent-state": _restore_agent_state, "shed-noisy-tenant": _shed, "session-continuity": _continuity,
    "sandbox-claim-burst": _claim_burst, "sandbox-loss": _sandbox_loss, "sandbox-isolation": _isolation}
LOAD = {"ha-replica-loss": ("users", "duration_s"), "noisy-neighbour": ("victim_sessions", "burst_s"),
        "session-continuity": ("users", "duration_s")}


def blast_radius(spec: "RunSpec") -> list[str]:
    """The lines `drillbook run --dry-run` prints: the run, then each thing it would act on."""
    from drillbook.scenarios import scenario
    from drillbook.targets.capabilities import OPTIONAL_TIERS
    from drillbook.targets.places import place, rights_taken

    declared = scenario(spec.runbook)
    profile = spec.profile
    lines = [f"{spec.runbook} on {profile.name} (kind {profile.kind}): a dry run, nothing is touched"]
    if declared is None:
        return [*lines, "  this runbook declares nothing it does to a target: its notebook's own steps decide"]
    values = spec.parameters
    details = DETAILS.get(spec.runbook, lambda _: {})(values)
    for where, action in declared.needs:
        found = place(profile, where, action)
        if not found:
            lines.append(f"  no {where} tier in this profile: left alone" if where in OPTIONAL_TIERS else
                         f"  {where} ({action}) is not described by this profile: the run would be refused")
            continue
        detail = details.get((where, action))
        verb = "KILL" if (where, action) == ("sandboxes", "kill") else ACTIONS.get(action, action.upper())
        lines.append(f"  {verb} {found}" + (f": {detail}" if detail else ""))
        rights = rights_taken(profile, where, action)
        if rights:
            lines.append(f"      with the rights: {rights}")
    if spec.runbook in LOAD:
        sessions, seconds = LOAD[spec.runbook]
        tenants = ", ".join(sorted(profile.spec.tenants)) or "the sandbox's tenants"
        lines.append(f"  load: {values.get(sessions)} session(s) for {values.get(seconds)}s through the gateway, "
                     f"as {tenants}")
    return lines


__all__ = ["blast_radius"]
