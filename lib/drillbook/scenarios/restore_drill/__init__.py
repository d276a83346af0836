"""Restore drill: destroy the state store, restore the backup; RTO, RPO and integrity."""

from __future__ import annotations

from drillbook.scenarios.limits import Count, Parameters, Seconds, Turns
from drillbook.scenarios.registry import Figure, Scenario, register


class RestoreDrillParameters(Parameters):
    """Both the runbook's parameters and experiments/restore-drill.yaml's configuration."""

    sessions: Count = 3
    turns_before: Count = 3
    turns_after: Turns = 2
    max_rto_s: Seconds = 30.0
    max_rpo_s: Seconds = 60.0  # the data-loss window: backup to disaster (never the turns the drill writes)
    restore_timeout_s: Seconds = 30.0


SCENARIO = register(Scenario(
    name="restore-drill", control="restore", parameters=RestoreDrillParameters,
    drill="drillbook.scenarios.restore_drill.drill:restore", experiment="restore-drill",
    experiment_parameters=RestoreDrillParameters,
    needs=(("store", "backup"), ("store", "restore"), ("store", "destroy")),
    summary="destroy the store, restore the backup: RTO and RPO within target, every restored session intact",
    title="Disaster recovery: restore drill",
    figures=(Figure("rto_s", "RTO", "s", "RTO"), Figure("rpo_s", "RPO (data-loss window)", "s", "RPO (data-loss window)"),
             Figure("rpo_turns", "acknowledged turns lost (written after the backup)",
                    meaning="turns written after the newest backup, which a restore is expected to lose: the RPO "
                            "in seconds is what is judged, this says how many turns that window held"),
             Figure("integrity", "restored sessions whose chain verifies", "", "integrity of restored sessions",
                    share=True, meaning="the share of restored sessions whose turn chain verifies; below 100% a "
                                        "restore brought back damaged sessions"))))
