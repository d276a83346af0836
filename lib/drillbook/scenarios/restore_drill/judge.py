"""Judging the restore drill from what its experiment measured: pure functions a test can feed traps.

RTO, RPO (the data-loss window, in seconds) and the integrity of the restored sessions are each
held to their targets; a figure that could not be measured fails, and says which of the drill's
steps did not happen (no backup, a backup holding less than the store, a failed restore, a store
that did not serve again, or served without the data).
"""

from __future__ import annotations

from typing import Any

from drillbook.measure import Judgement, check


def restore_reason(verdict: str, reasons: list[str], backup: dict[str, Any], measured: dict[str, Any]) -> str:
    """Why the restore drill could not measure a figure, told apart: no backup taken, a backup
    that holds less than the store had, the restore failed, the store did not serve again, or it
    served without the data."""
    held = (backup.get("store_before") or {}).get("sessions_read")
    claimed = (backup.get("backup") or {}).get("sessions") if isinstance(backup.get("backup"), dict) else None
    restore_failed = next((r for r in reasons if "restore-the-latest-backup" in r), None)
    missing = measured.get("missing_before_backup") or {}
    if backup and not backup.get("created"):
        return "no backup was taken before the disaster"
    if held is not None and claimed is not None and claimed < held:
        return f"the backup held {claimed} sessions; the store had {held}"
    if restore_failed:
        return f"the restore failed: {restore_failed.split('failed: ', 1)[-1][:120]}"
    if not measured:
        return f"the restore experiment ended {verdict} before it measured anything"
    if missing.get("turns"):
        return (f"the store served again, but {missing['turns']} of {missing['acknowledged']} turns acknowledged "
                "before the backup were missing")
    if not measured.get("served"):
        return "the store did not serve again within restore_timeout_s"
    return "the restored store could not be read back"


def judge_restore(verdict: str, reasons: list[str], backup: dict[str, Any], measured: dict[str, Any],
                  max_rto_s: float, max_rpo_s: float) -> Judgement:
    """The restore drill's checks from the experiment's verdict and reasons, its backup
    measurement and its restore measurement (rto_s, rpo_s, integrity, backup_created...)."""
    why = restore_reason(verdict, reasons, backup, measured)
    return Judgement((
        check("RTO", measured.get("rto_s"), "<=", max_rto_s, "s", missing=why),
        check("RPO (data-loss window)", measured.get("rpo_s"), "<=", max_rpo_s, "s",
              missing="no backup was taken before the disaster" if not measured.get("backup_created") else why),
        check("integrity of restored sessions", measured.get("integrity"), ">=", 1.0, missing=why),
    ))


__all__ = ["judge_restore", "restore_reason"]
