"""Restore the agent platform's state store from a backup: the on-call procedure, and the one
the restore drill rehearses (chaos action `restore_store` calls `RestoreProcedure`).

Steps: find backups (age, size, contents), pre-check (what will be replaced), restore (dry run
by default), post-check (healthy, every restored session's chain verifies, turns newer than the
backup listed as lost). Store-wide listings exist on the sandbox; on targets whose store is
reached through profile commands, backups are named by those commands and session checks are
reported not verifiable.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from drillbook.oncall import require_confirmation
from drillbook.targets import Target
from drillbook.targets.capabilities import StoreCatalog


def _age_s(created_at: str) -> float:
    return time.time() - datetime.fromisoformat(created_at.replace("Z", "+00:00")).replace(
        tzinfo=timezone.utc).timestamp()


@dataclass
class StoreSnapshot:
    """What the live store holds: per session its turn count (None when it cannot be read)."""

    readable: bool
    sessions: dict[str, int] = field(default_factory=dict)
    broken: list[str] = field(default_factory=list)
    reason: str = ""

    @property
    def turns(self) -> int:
        return sum(self.sessions.values())


class RestoreProcedure:
    def __init__(self, target: Target) -> None:
        self.target = target

    @property
    def catalog(self) -> StoreCatalog | None:
        return self.target if isinstance(self.target, StoreCatalog) else None

    def backups(self) -> list[dict[str, Any]]:
        """Backups newest first with age and size; empty where the target cannot list them."""
        if self.catalog is None:
            return []
        found = self.catalog.backups()
        return [{"backup": b["id"], "created_at": b["created_at"], "age_s": round(_age_s(b["created_at"]), 1),
                 "size_bytes": b["size_bytes"], "sessions": b["sessions"], "turns": b["turns"]}
                for b in reversed(found)]

    def choose(self, backup: str = "latest") -> dict[str, Any] | None:
        listed = self.backups()
        if not listed:
            return None
        return listed[0] if backup == "latest" else next((b for b in listed if b["backup"] == backup), None)

    def snapshot(self) -> StoreSnapshot:
        """Every stored session's turn count and chain, where the target can list them."""
        if self.catalog is None:
            return StoreSnapshot(False, reason=f"target {self.target.name} offers no store-wide session listing")
        try:
            sessions = self.catalog.store_sessions()
        except Exception as error:  # noqa: BLE001 - a destroyed store is exactly when this runs
            return StoreSnapshot(False, reason=f"the store cannot be read: {error}")
        return StoreSnapshot(True, {s["session_id"]: s["turns"] for s in sessions},
                             [s["session_id"] for s in sessions if not s["chain_ok"]])

    def precheck(self, backup: str = "latest") -> dict[str, Any]:
        """What a restore would replace with what; touches nothing."""
        chosen = self.choose(backup)
        live = self.snapshot()
        listable = self.catalog is not None
        return {"backup": chosen, "backup_found": chosen is not None or not listable,
                "live_readable": live.readable, "live_sessions": len(live.sessions) if live.readable else None,
                "live_turns": live.turns if live.readable else None, "live_reason": live.reason,
                "store_healthy": self.target.store_healthy()}

    def plan(self, backup: str = "latest") -> list[str]:
        pre = self.precheck(backup)
        chosen = pre["backup"]
        if chosen:
            what = (f"backup {chosen['backup']} (taken {chosen['age_s'] / 60:.1f} min ago; {chosen['sessions']} "
                    f"sessions, {chosen['turns']} turns, {chosen['size_bytes']} bytes)")
        elif pre["backup_found"]:
            what = f"backup {backup!r} (the target's store commands name it)"
        else:
            return [f"NOTHING TO RESTORE: no backup {backup!r} on target {self.target.name}"]
        over = (f"the live store ({pre['live_sessions']} sessions, {pre['live_turns']} turns)" if pre["live_readable"]
                else f"the live store ({pre['live_reason']})")
        return [f"restore {what} on target {self.target.name}", f"replacing {over}",
                "then wait until the store serves, verify every session's chain, and list turns lost"]

    def restore(self, backup: str = "latest", dry_run: bool = True, confirm: str = "") -> dict[str, Any]:
        """Restore (or, in dry run, only say what would be done)."""
        if dry_run:
            return {"dry_run": True, "plan": self.plan(backup), "changed": False}
        require_confirmation(self.target.name, dry_run, confirm)
        started = time.time()
        answer = self.target.restore_store(backup)
        return {"dry_run": False, "changed": True, "answer": answer, "took_s": time.time() - started,
                "at": time.time()}

    def postcheck(self, before: StoreSnapshot | None = None, timeout_s: float = 60.0) -> dict[str, Any]:
        """Healthy again, every restored session's chain, and turns lost against the pre-restore snapshot."""
        from drillbook.polling import wait_until

        healthy = wait_until(self.target.store_healthy, timeout_s, 0.2)
        after = self.snapshot() if healthy else StoreSnapshot(False, reason="the store did not become healthy")
        result: dict[str, Any] = {"healthy": healthy, "sessions_verifiable": after.readable,
                                  "sessions": len(after.sessions) if after.readable else None,
                                  "turns": after.turns if after.readable else None,
                                  "broken_chains": len(after.broken) if after.readable else None,
                                  "reason": after.reason}
        if before is not None and before.readable and after.readable:
            lost = {sid: count - after.sessions.get(sid, 0) for sid, count in before.sessions.items()
                    if count > after.sessions.get(sid, 0)}
            result.update(turns_lost=sum(lost.values()), sessions_with_lost_turns=lost)
        else:
            result.update(turns_lost=None, sessions_with_lost_turns={})
        return result


def judge(run: Any, before: StoreSnapshot, pre: dict[str, Any], outcome: dict[str, Any],
          post: dict[str, Any] | None) -> None:
    """Record what the restore did and judge it: there was a backup to restore; a dry run
    changed nothing; a real one left a healthy store whose every session verifies (turns newer
    than the backup are reported as lost, not judged: a restore loses them by design)."""
    run.record("dry_run", outcome["dry_run"])
    run.check("a backup to restore exists", int(pre["backup_found"]), ">=", 1)
    for line in outcome.get("plan", []):
        run.event("plan", line=line)
    if outcome["dry_run"]:
        after = RestoreProcedure(run.workload()).snapshot()
        unchanged = before.readable == after.readable and before.sessions == after.sessions
        run.record("plan", outcome["plan"])
        run.check("dry run changed nothing", 0 if unchanged else 1, "<=", 0)
        return
    assert post is not None
    run.record("restored_backup", (outcome.get("answer") or {}).get("restored"))
    run.record("restore_took_s", outcome.get("took_s"), "s")
    run.record("sessions_after", post["sessions"])
    run.record("turns_lost", post["turns_lost"])
    run.record("sessions_with_lost_turns", post["sessions_with_lost_turns"])
    run.check("store serving after the restore", int(post["healthy"]), ">=", 1)
    run.check("restored sessions with a broken chain", post["broken_chains"], "<=", 0)
