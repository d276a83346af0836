"""replica-restart and one-replica-left: scenarios that ship as a package of their own, not as
part of drillbook.

Kills one replica of the agent tier (drillbook's kill action: the kill must be seen to land) and
passes when every replica the tier wants is seen ready again within max_ready_s. Its declaration
and drill are here; its notebook is runbooks/replica-restart.ipynb and its experiment
experiments/replica-restart.yaml beside this module, found by drillbook through the entry point
`replica-restart = drillbook_replica_restart` in the group drillbook.scenarios.

one-replica-left brings a fault drillbook does not ship (faults.py: the action, its undo and its
Kubernetes rights, all in that one module): it squeezes the agent tier to one replica, and passes
when the rollback has the tier whole again within max_ready_s.
"""

from __future__ import annotations

from typing import Any, Literal

from drillbook.scenarios import Figure, Scenario, register
from drillbook.scenarios.limits import Parameters, Seconds


class ReplicaRestartParameters(Parameters):
    """The runbook's parameters and the experiment's configuration alike."""

    kill_signal: Literal["SIGKILL", "SIGTERM"] = "SIGKILL"
    max_ready_s: Seconds = 20.0


def replica_restart(run: Any, kill_signal: str, max_ready_s: float) -> None:
    """Kill one agent replica; PASS when the experiment saw the tier full again within max_ready_s."""
    result = run.chaos("replica-restart", kill_signal=kill_signal, max_ready_s=max_ready_s)
    run.record("experiment_verdict", result.verdict)
    held = {"PASS": 1.0, "FAIL": 0.0}.get(result.verdict)
    run.check("every agent replica ready again within max_ready_s", held, ">=", 1.0,
              missing=f"the experiment ended {result.verdict}")


SCENARIO = register(Scenario(
    name="replica-restart", control="replica-restart", parameters=ReplicaRestartParameters,
    drill="drillbook_replica_restart:replica_restart", experiment="replica-restart",
    experiment_parameters=ReplicaRestartParameters,
    needs=(("agent", "status"), ("agent", "kill")),
    summary="kill one agent replica: every replica ready again within max_ready_s",
    title="Replica restart (a scenario package)",
    figures=(Figure("experiment_verdict", "experiment verdict"),)))


class OneReplicaLeftParameters(Parameters):
    max_ready_s: Seconds = 30.0


def one_replica_left(run: Any, max_ready_s: float) -> None:
    """Squeeze the agent tier to one replica (this package's own fault); PASS when the experiment
    saw the tier whole again within max_ready_s after its rollback."""
    result = run.chaos("one-replica-left", max_ready_s=max_ready_s)
    run.record("experiment_verdict", result.verdict)
    run.record("squeezed_from", (result.measurements.get("squeezed") or {}).get("from"))
    held = {"PASS": 1.0, "FAIL": 0.0}.get(result.verdict)
    run.check("the agent tier whole again within max_ready_s after the squeeze", held, ">=", 1.0,
              missing=f"the experiment ended {result.verdict}")


ONE_REPLICA_LEFT = register(Scenario(
    name="one-replica-left", control="one-replica-left", parameters=OneReplicaLeftParameters,
    drill="drillbook_replica_restart:one_replica_left", experiment="one-replica-left",
    experiment_parameters=OneReplicaLeftParameters,
    needs=(("agent", "status"), ("agent", "squeeze")),
    summary="squeeze the agent tier to one replica (a fault of this package's own): whole again in time",
    title="One replica left (a scenario package with its own fault)",
    figures=(Figure("experiment_verdict", "experiment verdict"),)))
