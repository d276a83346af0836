"""On-call runbooks' procedures: the same code the drills rehearse.

- `restore`: restore the state store from a backup, with pre- and post-checks (the restore drill
  calls the same procedure)
- `triage`: read-only signals and findings in plain words, naming the runbook to run next
- `shed`: lower one tenant's limit, measure the others before and after, undo on request

A procedure that changes something runs only with ``dry_run=False`` and ``confirm`` set to the
target's name; in dry-run it says exactly what it would do and touches nothing.
"""

from __future__ import annotations

from drillbook.errors import ConfigError

def require_confirmation(target_name: str, dry_run: bool, confirm: str) -> None:
    """Refuse a real change unless confirm names the target (dry runs need nothing)."""
    if not dry_run and confirm != target_name:
        raise ConfigError(f"a real run changes target {target_name!r}: set confirm={target_name} "
                          f"(got {confirm!r}), or keep dry_run=True to see what it would do")
