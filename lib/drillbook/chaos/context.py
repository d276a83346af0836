"""What every provider reads from the configuration drillbook's runner injects into an experiment."""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from drillbook.chaos.ledger import FaultLedger
from drillbook.targets import Target


def wait_until(condition: Callable[[], object], timeout_s: float, interval_s: float = 0.1) -> bool:
    """Poll condition until it is truthy (True) or timeout_s passes (False); at least one try."""
    deadline = time.monotonic() + timeout_s
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)


def target_of(configuration: dict[str, Any]) -> Target:
    """The target named by the configuration drillbook's runner injected (the sandbox by default)."""
    from drillbook.profile import builtin_sandbox, load_profile
    from drillbook.targets import target_for

    path = configuration.get("drillbook_profile")
    profile = load_profile(str(path)) if path else builtin_sandbox()
    state = configuration.get("drillbook_state_dir")
    return target_for(profile, Path(state) if state else None)


_MEASUREMENTS_LOCK = threading.Lock()


@dataclass
class RunContext:
    run_id: str
    run_dir: Path
    ledger: FaultLedger
    target: Target

    @classmethod
    def of(cls, configuration: dict[str, Any]) -> "RunContext":
        return cls(str(configuration.get("drillbook_run_id", "manual")),
                   Path(configuration.get("drillbook_run_dir", ".")),
                   FaultLedger(Path(configuration["drillbook_ledger"])), target_of(configuration))

    def record_measurement(self, name: str, value: Any) -> None:
        """Keep one measurement of this run. An experiment's providers run in one process but in
        several threads (a background probe beside an action), so the read-modify-write is under
        one lock: no provider's measurement is lost to another's."""
        path = self.run_dir / "measurements.json"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with _MEASUREMENTS_LOCK:
            measurements = json.loads(path.read_text()) if path.exists() else {}
            measurements[name] = value
            partial = path.with_suffix(".partial")
            partial.write_text(json.dumps(measurements, indent=2, default=str))
            os.replace(partial, path)

    def measurement(self, name: str) -> Any:
        path = self.run_dir / "measurements.json"
        return json.loads(path.read_text()).get(name) if path.exists() else None

    def verifier(self) -> Any:
        """The delivery verifier for this target, or None when its sessions cannot be read back."""
        from drillbook.delivery import verifier_for

        gateway, keys = self.target.gateway()
        return verifier_for(self.target.profile, gateway, keys)

    def tenant_key(self, tenant: str | None) -> tuple[str, str, str]:
        gateway, keys = self.target.gateway()
        if not keys:
            raise ValueError("the target has no tenant keys")
        name = tenant if tenant else sorted(keys)[0]
        return gateway, name, keys[name]
