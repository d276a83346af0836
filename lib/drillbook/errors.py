"""Every failure drillbook shows a user is one of these: one clear line and an exit code.

The tree::

    DrillbookError                    exit 1: something went wrong while running
    ├── InvalidInput                  exit 2: bad input, refused before anything is touched
    │   ├── ConfigError               a parameter or option fails validation (names the field)
    │   ├── PortInUse                 a port asked for is already bound on 127.0.0.1
    │   ├── SandboxAlreadyRunning     a second `sandbox up` on the same state dir
    │   ├── StoreUnreachable          a PostgreSQL DSN that cannot be connected to
    │   ├── TargetUnreachable         the workload's gateway does not accept connections
    │   ├── BundleExists              an evidence bundle folder that is already there
    │   └── TargetInUse               a second run that changes a target another run holds
    ├── SandboxError                  the reference platform misbehaved
    │   ├── SandboxNotRunning         a command needs a running sandbox and there is none
    │   ├── SandboxStartFailed        a service did not become ready in time
    │   └── ControlApiError           the supervisor's control API refused or failed a request
    ├── StoreError                    the state store failed an operation
    │   ├── StoreUnavailable          the store is gone (destroyed) or cannot be reached
    │   └── BackupError               a backup or restore did not complete
    ├── DeliveryError                 read-back shows acknowledged turns lost, duplicated or broken
    ├── FaultNotLanded                a fault was not observed to take effect (the run is ERROR)
    ├── LoadRunOverran                Locust outlived its bound and was killed with its children
    └── EvidenceError                 a bundle could not be written as evidence must be

    KeyboardInterrupt
    └── Interrupted (drillbook.shutdown)  exit 128 + signal: SIGINT or SIGTERM stopped the run; it
                                      says what was rolled back and which bundle was sealed

The CLI catches DrillbookError and Interrupted at its edge and prints ``drillbook: <message>``;
nothing else reaches the user as a traceback. Interrupted is a KeyboardInterrupt, not a
DrillbookError, so that no ``except Exception`` swallows it and chaoslib rolls back on it.
"""

from __future__ import annotations


class DrillbookError(Exception):
    """Base of every user-facing failure; ``str(error)`` is the one line shown."""

    exit_code: int = 1


class InvalidInput(DrillbookError):
    """Input refused before anything was started or changed."""

    exit_code = 2


class ConfigError(InvalidInput):
    """A parameter, option or configuration field fails validation."""


class PortInUse(InvalidInput):
    """A port the user asked for is already bound."""


class SandboxAlreadyRunning(InvalidInput):
    """A sandbox already runs on this state directory."""


class StoreUnreachable(InvalidInput):
    """The state store named by the user cannot be connected to."""


class TargetUnreachable(InvalidInput):
    """The workload's address does not accept connections."""


class BundleExists(InvalidInput):
    """The bundle folder is already there; evidence is never overwritten."""


class TargetInUse(InvalidInput):
    """Another run that changes this target holds its lock (drillbook.runlock)."""


class SandboxError(DrillbookError):
    """The local reference platform failed."""


class SandboxNotRunning(SandboxError):
    """No sandbox runs on this state directory."""


class SandboxStartFailed(SandboxError):
    """The sandbox did not come up; the message says which service and where its log is."""


class ControlApiError(SandboxError):
    """The supervisor's control API refused or failed a request."""


class StoreError(DrillbookError):
    """The state store failed an operation."""


class StoreUnavailable(StoreError):
    """The store is destroyed or unreachable; callers turn this into HTTP 503."""


class BackupError(StoreError):
    """A backup or restore did not complete."""


class DeliveryError(DrillbookError):
    """Acknowledged turns are missing, duplicated or their hash chain is broken."""


class LoadRunOverran(DrillbookError):
    """Locust did not finish within its bound and was killed with its children."""


class EvidenceError(DrillbookError):
    """A bundle could not be written as evidence must be (overwrite, bad path, sealed)."""


LANDING_MARK = "fault did not take effect"  # how every FaultNotLanded begins (found again in journals)


class FaultNotLanded(DrillbookError):
    """A fault whose effect was not observed, independently of the call that made it, within its
    bound: nothing after it can be judged, so the run is ERROR, never PASS or FAIL."""

    def __init__(self, what: str, seen: str, bound_s: float = 0.0) -> None:
        within = f" within {bound_s:g}s" if bound_s else ""
        super().__init__(f"{LANDING_MARK}: {what}; observed {seen}{within}")
