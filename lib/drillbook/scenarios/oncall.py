"""The on-call runbooks: triage, restore agent state, shed a noisy tenant."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field, field_validator

from drillbook.scenarios.limits import Count, OnCall, Rate, Seconds, Wait
from drillbook.scenarios.registry import Scenario, register

if TYPE_CHECKING:
    from drillbook.targets import Target


class TriageParameters(OnCall):
    window_s: Seconds = 10.0


class RestoreAgentStateParameters(OnCall):
    backup: str = Field("latest", min_length=1, max_length=255, description="a backup's name as the store lists it")
    dry_run: bool = True
    confirm: str = ""
    timeout_s: Seconds = 60.0

    @field_validator("backup")
    @classmethod
    def _a_name_not_an_option(cls, backup: str) -> str:
        if backup.startswith("-") or any(c.isspace() for c in backup):
            raise ValueError(f"{backup[:60]!r} is not a backup's name: it must not begin with '-' (the restore "
                             "command would take it for an option) or hold spaces")
        return backup


class ShedNoisyTenantParameters(OnCall):
    tenant: str = ""
    rps: Rate = 5.0
    burst: Count = 5
    quota: str = ""
    measure_s: Wait = 5.0  # 0: change without measuring (a target with no tenant metrics)
    undo: bool = False
    dry_run: bool = True
    confirm: str = ""


def _tenant_is_known(parameters: ShedNoisyTenantParameters, target: "Target") -> str | None:
    """The tenant to shed is one of the target's tenants (read-only: the target's tenant keys),
    found before a kernel starts, not in its third cell. (A tenant not given at all is refused
    earlier, with the parameters: drillbook.parameters.)"""
    _, keys = target.gateway()
    if parameters.tenant and parameters.tenant not in keys:
        return f"tenant {parameters.tenant!r} is not a tenant of the target ({', '.join(sorted(keys))})"
    return None


TRIAGE = register(Scenario(
    name="agent-latency-triage", control="oncall-triage", parameters=TriageParameters, oncall=True,
    needs=(("agent", "status"), ("inference", "status")),
    summary="read-only findings in plain words, naming the runbook to run next"))
RESTORE = register(Scenario(
    name="restore-agent-state", control="oncall-restore", parameters=RestoreAgentStateParameters, oncall=True,
    needs=(("store", "restore"),),
    summary="restore the state store from a backup, with pre- and post-checks (dry run by default)"))
SHED = register(Scenario(
    name="shed-noisy-tenant", control="oncall-shed", parameters=ShedNoisyTenantParameters, oncall=True,
    needs=(("tenants", "limit"),), target_check=_tenant_is_known,
    summary="lower one tenant's limit and measure the others before and after (dry run by default)"))
