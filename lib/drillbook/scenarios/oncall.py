"""The on-call runbooks: triage, restore agent state, shed a noisy tenant."""

from __future__ import annotations

from pydantic import Field, field_validator

from drillbook.scenarios.limits import Count, OnCall, Rate, Seconds, Wait
from drillbook.scenarios.registry import Scenario, register


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
    needs=(("tenants", "limit"),),
    summary="lower one tenant's limit and measure the others before and after (dry run by default)"))
