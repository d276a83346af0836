"""What one experiment run knows while it runs, handed to every provider as a value.

A run's context is made once, when the run starts (by drillbook's runner, or by the drillbook
control an experiment declares when plain `chaos run` runs it), and travels in the run's own
configuration under `drillbook_context`: chaoslib hands that one configuration to every control
and (as a shallow copy) to every provider of the run, so each gets the same object back from it,
and no module-level registry is needed to find it: the target (its profile loaded once), the
fault ledger, the phase the experiment is in, the client traffic windows being driven, and the
measurements made so far. Providers run in one process but in several threads (a background
probe beside an action, a safeguard beside both), so changes are made under one lock.

Nothing is read back from a file. Each measurement is appended to `measurements.jsonl` as it is
made, so that a run stopped halfway still leaves its figures in the evidence; when the run
ends, `measurements.json` and one `traffic-<window>.json` per window are written once.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drillbook import jsonl
from drillbook.chaos.ledger import FaultLedger

if TYPE_CHECKING:
    from drillbook.chaos.traffic import TrafficWindow
    from drillbook.targets import Target

# The phases of an experiment, as the drillbook control sees them (drillbook.chaos.control).
BEFORE = "before"  # the steady-state hypothesis before the method
METHOD = "method"
AFTER = "after"  # the steady-state hypothesis after the method
ROLLBACKS = "rollbacks"
MEASUREMENTS = "measurements.json"
MEASUREMENT_JOURNAL = "measurements.jsonl"


class ContextError(RuntimeError):
    """A provider was called where no drillbook run context can serve it."""


def target_of(configuration: dict[str, Any]) -> "Target":
    """The target named by the configuration drillbook's runner injected (the sandbox by default)."""
    from drillbook.profile import builtin_sandbox, load_profile
    from drillbook.targets import target_for

    path = configuration.get("drillbook_profile")
    profile = load_profile(str(path)) if path else builtin_sandbox()
    state = configuration.get("drillbook_state_dir")
    return target_for(profile, Path(state) if state else None)


CONTEXT = "drillbook_context"  # the configuration key a followed run's context travels under


@dataclass(eq=False)
class RunContext:
    """One experiment run as its providers see it (see the module's docstring)."""

    run_id: str
    run_dir: Path
    ledger: FaultLedger
    target: "Target"
    phase: str | None = None  # None: no drillbook control follows this run's phases
    measurements: dict[str, Any] = field(default_factory=dict)
    windows: dict[str, "TrafficWindow"] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    started_at: float = field(default_factory=time.time)

    @classmethod
    def of(cls, configuration: dict[str, Any], target: "Target | None" = None) -> "RunContext":
        """The context the configuration carries (a run being followed), else a new one, not yet
        followed (for a rollback or a dry run, which judge nothing, or for the runner or the
        control to follow). target: when the caller holds it already (a runbook's run), so that
        the profile is not read again."""
        opened = configuration.get(CONTEXT)
        if isinstance(opened, RunContext):
            return opened
        run_id = str(configuration.get("drillbook_run_id", "manual"))
        if "drillbook_ledger" not in configuration:
            raise ContextError("this experiment's configuration names no drillbook target (drillbook_ledger is "
                               "missing): run it with `drillbook chaos run`, or give it drillbook's target "
                               "configuration (drillbook.chaos.runner.target_configuration)")
        from drillbook.targets.capabilities import FaultLeases

        target = target or target_of(configuration)
        leases = target if isinstance(target, FaultLeases) else None
        return cls(run_id, Path(configuration.get("drillbook_run_dir", ".")),
                   FaultLedger(Path(configuration["drillbook_ledger"]), leases), target)

    def follow(self, configuration: dict[str, Any]) -> "RunContext":
        """Carry this context in the run's configuration (the one chaoslib hands to the run's
        controls and providers), or return the one it carries already: the runner and the
        control follow the same run."""
        context = configuration.setdefault(CONTEXT, self)
        if not isinstance(context, RunContext):
            raise ContextError(f"the configuration's {CONTEXT} is not a drillbook run context")
        with context.lock:
            if context.phase is None:
                context.phase = BEFORE
        context.run_dir.mkdir(parents=True, exist_ok=True)
        return context

    def enter(self, phase: str) -> None:
        with self.lock:
            self.phase = phase

    def judging_after_method(self) -> bool:
        """True in the hypothesis after the method (judge what the method recorded), False before
        it (take a fresh sample). A run whose phases nobody follows cannot tell the two apart."""
        if self.phase is None:
            raise ContextError("drillbook's judging probes need the drillbook control "
                               "(controls: - name: drillbook, provider: {type: python, module: "
                               "drillbook.chaos.control}) so that they know whether the method has run")
        return self.phase in (AFTER, ROLLBACKS)

    # -- measurements -------------------------------------------------------------------------
    def record_measurement(self, name: str, value: Any) -> None:
        """Keep one measurement of this run (it replaces one of the same name)."""
        with self.lock:
            self.measurements[name] = value
            self._journal(name, value)

    def append_measurement(self, name: str, value: Any) -> None:
        """Add one item to a list measurement (a trial, say)."""
        with self.lock:
            items = [*self.measurements.get(name, []), value]
            self.measurements[name] = items
            self._journal(name, items)

    def merge_measurement(self, name: str, key: str, value: Any) -> None:
        """Set one key of a dict measurement (receipts by phase, say)."""
        with self.lock:
            merged = {**self.measurements.get(name, {}), key: value}
            self.measurements[name] = merged
            self._journal(name, merged)

    def measurement(self, name: str) -> Any:
        with self.lock:
            return self.measurements.get(name)

    def _journal(self, name: str, value: Any) -> None:
        jsonl.append(self.run_dir / MEASUREMENT_JOURNAL, {"t": time.time(), "name": name, "value": value})

    # -- traffic windows ----------------------------------------------------------------------
    def publish_window(self, window: "TrafficWindow") -> None:
        """A window being driven: safeguards and judging probes read it as it fills."""
        with self.lock:
            self.windows[window.name] = window

    def window(self, name: str) -> "TrafficWindow | None":
        with self.lock:
            return self.windows.get(name)

    # -- the end ------------------------------------------------------------------------------
    def close(self) -> dict[str, Any]:
        """Write the run's measurements and windows; return the measurements. Safe to repeat (the
        control closes a run at its end, the runner again in case it was cut short)."""
        with self.lock:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            (self.run_dir / MEASUREMENTS).write_text(json.dumps(self.measurements, indent=2, default=str))
            for window in self.windows.values():
                (self.run_dir / f"traffic-{window.name}.json").write_text(json.dumps(asdict(window), default=str))
            return dict(self.measurements)

    # -- the target, as providers use it ------------------------------------------------------
    def verifier(self) -> Any:
        """The delivery verifier for this target in a with block (None when its sessions cannot
        be read back)."""
        from drillbook.delivery import open_verifier

        gateway, keys = self.target.gateway()
        return open_verifier(self.target.profile, gateway, keys)

    def tenant_key(self, tenant: str | None) -> tuple[str, str, str]:
        gateway, keys = self.target.gateway()
        if not keys:
            raise ValueError("the target has no tenant keys")
        name = tenant if tenant else sorted(keys)[0]
        return gateway, name, keys[name]
