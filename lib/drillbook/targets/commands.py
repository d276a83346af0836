"""A workload operated through the user's own commands (compose, systemd, a VM script).

Per role the profile gives a status command printing JSON ``{"desired": n, "ready": n,
"replicas": n}``, a kill command ({count}, {signal}; prints killed replica names, one per
line) and a scale command ({replicas}). See docs/commands-target.md.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path
from typing import Any

from drillbook.errors import ConfigError, TargetUnreachable
from drillbook.observation import ReplicaObservation, observe_replicas
from drillbook.profile import ROLES, RoleCommands
from drillbook.targets.capabilities import OPTIONAL_TIERS, SANDBOXES, STORE, TargetCheck, Needs
from drillbook.targets.store import ProfileTarget, run_command

COMMAND_TIMEOUT_S = 60.0
NO_SANDBOXES = "no workload.sandboxes (code sandboxes)"
HALT_WAIT_S = 120.0  # how long `drillbook halt` waits for the watchdog to undo the leased faults


def sandbox_command_problems(profile: Any, needs: Needs) -> list[str]:
    """Why the profile's sandbox commands cannot run, where a runbook needs code sandboxes."""
    spec = profile.spec.workload.sandboxes
    if spec is None or not any(where == SANDBOXES for where, _ in needs):
        return []
    lines = [("fleet", spec.fleet), ("kill", spec.kill), ("alive", spec.alive), ("kill_service", spec.kill_service)]
    return [f"sandboxes {name}: {problem}" for name, line in lines
            if line and (problem := command_found(line, profile.folder)) is not None]


def command_found(line: str, folder: Path) -> str | None:
    """None when the command's program exists, else why not."""
    program = shlex.split(line)[0]
    if "/" in program:
        path = (folder / program) if not Path(program).is_absolute() else Path(program)
        return None if path.exists() else f"{program} does not exist"
    return None if shutil.which(program) else f"{program} is not on PATH"


class CommandsTarget(ProfileTarget):
    kind = "commands"
    granted = "commands found"
    _status_problem: str | None = None  # the agent's status is asked once per target check

    def __init__(self, profile: Any, state_dir: Path | None = None, ledger: Path | None = None) -> None:
        """ledger: the target's fault ledger (drillbook.targets.run_paths), beside which its
        watchdog keeps its folder."""
        super().__init__(profile)
        self.state_dir = state_dir
        self.ledger = ledger
        self._leases: Any = None  # drillbook.watchdog.WatchdogLeases, once a fault is leased

    # FaultLeases: each scale and store destruction is leased to a watchdog started beside the run
    # (drillbook.watchdog), which undoes it through these same commands once the run stops renewing
    def lease_fault(self, fault: Any) -> None:
        from drillbook.sandbox.leases import UNDO_FIELDS

        if fault.undo.get("op") not in UNDO_FIELDS:
            return  # a kill needs no undo: the workload replaces its replicas, and readiness is awaited
        self._watchdog().lease(fault, dict(fault.undo))

    def release_fault(self, fault: Any) -> None:
        if self._leases is not None:
            self._leases.release(fault)

    def _watchdog(self) -> Any:
        if self._leases is None:
            from drillbook.config import fault_lease_s
            from drillbook.watchdog import WatchdogLeases

            self._leases = WatchdogLeases(self._folder(), self.profile.path, self._ledger(), self.state_dir,
                                          fault_lease_s())
        return self._leases

    def _ledger(self) -> Path:
        if self.ledger is None:
            raise ConfigError(f"target {self.name}: no fault ledger was given (open it with drillbook.targets."
                              "target_for)")
        return self.ledger

    def _folder(self) -> Path:
        """The watchdog's folder for this target: beside its fault ledger."""
        return self._ledger().parent.parent / "watchdogs" / self.profile.name

    # Halting: the halt is kept in the watchdog's folder, where every run on this machine looks, and
    # the watchdog undoes every fault it holds at once
    def halt_state(self) -> dict[str, Any]:
        from drillbook import watchdog

        return watchdog.halt_state(self._folder())

    def halt(self, operator: str, reason: str) -> dict[str, Any]:
        """Halt, and return once the watchdog has undone every leased fault (or HALT_WAIT_S)."""
        from drillbook import watchdog
        from drillbook.polling import wait_until

        folder = self._folder()
        state = watchdog.request_halt(folder, operator, reason)
        leased = watchdog.held_leases(folder)
        if leased:
            watchdog.ensure_running(folder, self.profile.path, self.state_dir)
            wait_until(lambda: not watchdog.held_leases(folder), HALT_WAIT_S, 0.1)
        # Each fault held at the halt was undone by the watchdog, or by its own run, which saw the
        # halt first and rolled back (its lease released), or is not undone yet.
        by_watchdog = {event["fault"]: event["undone"] for event in watchdog.watchdog_events(folder)
                       if event.get("kind") == "fault_undone_by_halt" and event.get("restored")}
        left = {lease["fault"]["id"] for lease in watchdog.held_leases(folder)}
        undone = [by_watchdog.get(lease["fault"]["id"], f"{lease['fault']['kind']}: undone by its own run's rollback")
                  for lease in leased if lease["fault"]["id"] not in left]
        return {**state, "undone": undone + ([f"{len(left)} leased fault(s) NOT undone yet"] if left else [])}

    def lift_halt(self) -> dict[str, Any]:
        from drillbook import watchdog

        return watchdog.lift_halt(self._folder())

    def events(self) -> list[dict[str, Any]]:
        """What the watchdog beside the runs undid (fault_undone_by_watchdog, _by_halt), with when."""
        from drillbook.watchdog import watchdog_events

        return watchdog_events(self._folder())

    def _line(self, where: str, action: str) -> str | None:
        if where == STORE:
            return getattr(self.profile.spec.workload.store, action, None)
        spec = self.profile.role(where)
        return getattr(spec.commands, action, None) if spec is not None else None

    def _asked(self, needs: Needs) -> list[tuple[str, str]]:
        """The needs a command answers (pod metrics and absent optional tiers leave figures empty)."""
        return [(where, action) for where, action in needs
                if action != "pods" and not (where in OPTIONAL_TIERS and self.profile.role(where) is None)]

    def undeclared(self, needs: Needs) -> list[str]:
        why = []
        for where, action in self._asked(needs):
            if where == SANDBOXES:
                if self.profile.spec.workload.sandboxes is None and NO_SANDBOXES not in why:
                    why.append(NO_SANDBOXES)
            elif action == "limit":
                why.append("a commands target offers no tenant limits")
            elif not self._line(where, action):
                why.append(f"no {where} {action} command")
        return why

    def refusals(self, needs: Needs) -> list[str]:
        """A command for every action, its program found; the agent's status answering."""
        why = self.undeclared(needs)
        for where, action in self._asked(needs):
            line = self._line(where, action) if action != "limit" and where != SANDBOXES else None
            if line and (problem := command_found(line, self.profile.folder)) is not None:
                why.append(f"{where} {action}: {problem}")
        why += sandbox_command_problems(self.profile, needs)
        if any(where == "agent" for where, _ in needs) and self._line("agent", "status"):
            if self._status_problem is None:
                try:
                    self.ready("agent")
                    self._status_problem = ""
                except Exception as error:  # noqa: BLE001 - reported, not raised: this is a check
                    self._status_problem = f"agent status: {error}"
            if self._status_problem:
                why.append(self._status_problem)
        return why

    def readings(self) -> list[Any]:
        """Each tier's status command and the store's healthy command, with what they printed."""
        found = []
        lines = [(f"{role} status", spec.commands.status) for role in ROLES
                 if (spec := self.profile.role(role)) is not None and spec.commands is not None]
        store = self.profile.spec.workload.store
        lines += [("store healthy", store.healthy)] if store is not None and store.healthy else []
        for label, line in lines:
            try:
                output = self._run(line, label).strip()
                found.append(TargetCheck(label, True, f"{line} -> {output.splitlines()[-1][:160] if output else 'exit 0'}"))
            except TargetUnreachable as error:
                found.append(TargetCheck(label, False, f"{line} -> {error}"[:300]))
        return found

    def has(self, role: str) -> bool:
        spec = self.profile.role(role)
        return spec is not None and spec.commands is not None

    def _commands(self, role: str) -> RoleCommands:
        spec = self.profile.role(role)
        if spec is None or spec.commands is None:
            raise ConfigError(f"target profile {self.name} has no commands for workload.{role}")
        return spec.commands

    def _run(self, line: str, what: str, **fields: Any) -> str:
        try:
            return run_command(line, self.profile.folder, COMMAND_TIMEOUT_S, what, **fields)
        except Exception as error:  # noqa: BLE001 - one kind of error for a failed workload command
            raise TargetUnreachable(str(error)) from None

    def _status(self, role: str) -> dict[str, Any]:
        """One run of the status command: desired, ready and replicas, and `ids` (the ready
        replicas' identities, such as pids) when the command prints them."""
        output = self._run(self._commands(role).status, f"{role} status")
        try:
            status = json.loads(output.strip().splitlines()[-1])
            counts: dict[str, Any] = {k: int(status[k]) for k in ("desired", "ready", "replicas")}
            ids = status.get("ids") or []
            if not isinstance(ids, list):
                raise TypeError("ids")
            counts["ids"] = [str(i) for i in ids]
            return counts
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            raise TargetUnreachable(f"{role} status: expected JSON with desired, ready and replicas "
                                    f"(and optionally a list ids), got {output.strip()[:120]!r}") from None

    def observe(self, role: str) -> ReplicaObservation:
        """One run of the status command, stamped with when it started and ended."""
        def read() -> tuple[int, int, list[str]]:
            status = self._status(role)
            return status["desired"], status["ready"], status["ids"]

        return observe_replicas(read)

    def kill(self, role: str, count: int, signal: str) -> list[str]:
        line = self._commands(role).kill
        if not line:
            raise ConfigError(f"target profile {self.name} has no kill command for workload.{role}")
        output = self._run(line, f"{role} kill", count=count, signal=signal)
        return [name.strip() for name in output.splitlines() if name.strip()]

    def desired(self, role: str) -> int:
        return self._status(role)["desired"]

    def ready(self, role: str) -> int:
        return self._status(role)["ready"]

    def scale(self, role: str, replicas: int) -> None:
        line = self._commands(role).scale
        if not line:
            raise ConfigError(f"target profile {self.name} has no scale command for workload.{role}")
        self._run(line, f"{role} scale", replicas=replicas)

    def settled(self, role: str) -> bool:
        status = self._status(role)
        return status["desired"] == status["ready"] == status["replicas"]
