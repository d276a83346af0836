"""Judging the sandbox-loss drill: pure functions over the kills seen to land, the sessions'
calls and their workspaces read back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from drillbook.measure import Judgement, check, percentile


@dataclass(frozen=True)
class Kill:
    """One kill: what was killed, when it was asked, and when it was first seen to have landed
    (the sandbox's process gone, observed apart from the platform's answer); None if never."""

    what: str  # "sandbox" or "service"
    asked: float
    landed: float | None
    sessions: tuple[str, ...]  # the sessions whose sandboxes it took


def recovery_seconds(kill: Kill, calls: list[dict[str, Any]], session: str) -> float | None:
    """From the kill's landing to the end of the session's first working run that began after
    it. A run that began before the landing says nothing of the recovery, however it ended."""
    if kill.landed is None:
        return None
    after = [c for c in calls if c["session"] == session and c["op"] == "run" and c["started"] >= kill.landed]
    working = [c for c in sorted(after, key=lambda c: c["started"]) if c["ok"]]
    return working[0]["ended"] - kill.landed if working else None


def files_lost(expected: dict[str, dict[str, str]], read_back: dict[str, dict[str, str] | None]) -> int:
    """Files a session wrote before the kills that it does not find again, or finds changed."""
    lost = 0
    for session, files in expected.items():
        found = read_back.get(session) or {}
        lost += sum(found.get(name) != digest for name, digest in files.items())
    return lost


@dataclass(frozen=True)
class LossFigures:
    kills_asked: int
    kills_landed: int
    recoveries: list[float]
    not_recovered: int  # sessions hit by a kill that never ran again
    files_written: int
    files_lost: int
    stuck_claims: int
    runs_cut: int  # runs the kills cut short (answered "sandbox lost" or no answer)

    @property
    def recreate_p95_s(self) -> float | None:
        return percentile(self.recoveries, 0.95) if self.recoveries else None

    def records(self) -> list[tuple[str, Any, str]]:
        return [("kills_asked", self.kills_asked, ""), ("kills_landed", self.kills_landed, ""),
                ("recreate_s", self.recoveries, "s"), ("recreate_p95_s", self.recreate_p95_s, "s"),
                ("sessions_not_recovered", self.not_recovered, ""), ("files_written", self.files_written, ""),
                ("files_lost", self.files_lost, ""), ("stuck_claims", self.stuck_claims, ""),
                ("runs_cut_by_kills", self.runs_cut, "")]


def loss_figures(kills: list[Kill], calls: list[dict[str, Any]], expected: dict[str, dict[str, str]],
                 read_back: dict[str, dict[str, str] | None], stuck_claims: int) -> LossFigures:
    recoveries, not_recovered = [], 0
    for kill in kills:
        if kill.landed is None:
            continue
        for session in kill.sessions:
            seconds = recovery_seconds(kill, calls, session)
            if seconds is None:
                not_recovered += 1
            else:
                recoveries.append(seconds)
    cut = sum(1 for c in calls if c["op"] == "run" and not c["ok"] and c.get("status") in (410, None, 502, 503))
    return LossFigures(len(kills), sum(k.landed is not None for k in kills), recoveries, not_recovered,
                       sum(len(files) for files in expected.values()), files_lost(expected, read_back),
                       stuck_claims, cut)


def judge_loss(figures: LossFigures, max_recreate_p95_s: float) -> Judgement:
    cannot = None
    if figures.files_written == 0:
        cannot = "no session wrote its files before the kills: nothing to lose"
    elif figures.kills_asked == 0:
        cannot = "no kill was asked"
    elif figures.kills_landed < figures.kills_asked:
        cannot = (f"{figures.kills_asked - figures.kills_landed} of {figures.kills_asked} kills were not seen to land "
                  "(the sandboxes' processes kept running)")
    checks = (
        check("files lost with their sandbox", figures.files_lost, "<=", 0),
        check("claims left stuck", figures.stuck_claims, "<=", 0),
        check("sessions that never got a working sandbox again", figures.not_recovered, "<=", 0),
        check("time to a working sandbox again p95", figures.recreate_p95_s, "<=", max_recreate_p95_s, "s",
              missing="no session got a working sandbox again after a kill"),
    )
    return Judgement(checks, cannot_judge=cannot)


__all__ = ["Kill", "LossFigures", "files_lost", "judge_loss", "loss_figures", "recovery_seconds"]
