"""Chaos Toolkit integration: experiments run through chaoslib with rollbacks always, and the
actions and probes those experiments name, dispatching to the sandbox or a Kubernetes namespace.

- `runner`: run (validate, run, verdict from the journal), plan (dry run), rollback_all
- `actions`, `probes`: the python providers; `targets`: sandbox and kubernetes
- `ledger`: every fault written down before it is applied; `scenarios`: typed parameters
- `traffic`: client traffic the probes drive through a fault
"""

from drillbook.chaos.runner import ChaosResult, plan, rollback_all, run, verdict_of

__all__ = ["ChaosResult", "plan", "rollback_all", "run", "verdict_of"]
