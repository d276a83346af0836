"""Which runs take their target's run lock (drillbook.runlock): those that may change it."""

from __future__ import annotations

from contextlib import nullcontext

from drillbook.profile import builtin_sandbox
from drillbook.runlock import TargetLock, changes_target, run_lock


def test_read_only_runbooks_and_dry_runs_take_no_lock():
    assert changes_target("ha-replica-loss", {}) and changes_target("restore-drill", {})
    assert not changes_target("agent-latency-triage", {})
    assert not changes_target("shed-noisy-tenant", {"dry_run": True})
    assert changes_target("shed-noisy-tenant", {"dry_run": False})
    assert changes_target("a-notebook-of-my-own", {})  # declares nothing: taken to change its target
    assert isinstance(run_lock(builtin_sandbox(), "agent-latency-triage", {}), nullcontext)
    assert isinstance(run_lock(builtin_sandbox(), "cold-start", {}), TargetLock)
