"""Chaos Toolkit integration: experiments run through chaoslib with rollbacks always, and the
actions and probes those experiments name, acting through the run's target (drillbook.targets).

- `runner`: run (validate, run, verdict from the journal), plan (dry run), rollback_all and
  rollback_profile (`drillbook rollback`: a gone sandbox's faults closed, any other target's undone)
- `control`: the drillbook control chaoslib calls around an experiment; `context`: RunContext
- `actions`, `probes`: the python providers; undo by fault kind (actions.UNDO)
- `ledger`: every fault written down, with its undo, before it is applied
- `traffic`: client traffic the probes drive through a fault
"""

from drillbook.chaos.runner import ChaosResult, plan, rollback_all, run, verdict_of

__all__ = ["ChaosResult", "plan", "rollback_all", "run", "verdict_of"]
