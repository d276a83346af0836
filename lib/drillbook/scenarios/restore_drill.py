"""Restore drill: destroy the state store, restore the backup; RTO, RPO and integrity."""

from __future__ import annotations

from drillbook.scenarios import Scenario, register
from drillbook.scenarios.limits import Count, Parameters, Seconds, Turns


class RestoreDrillParameters(Parameters):
    sessions: Count = 3
    turns_before: Count = 3
    turns_after: Turns = 2
    max_rto_s: Seconds = 30.0
    max_rpo_turns: Turns = 6
    restore_timeout_s: Seconds = 30.0


SCENARIO = register(Scenario(
    name="restore-drill", control="restore", parameters=RestoreDrillParameters, experiment="restore-drill",
    summary="destroy the store, restore the backup: RTO and RPO within target, every restored session intact"))
