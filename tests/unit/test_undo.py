"""Undo by fault kind: each kind of fault is put back by the undo registered for it, and one whose
undo is not known here stays open in the ledger instead of being marked undone."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from drillbook.chaos.actions import UNDO, undo, undo_open_faults
from drillbook.chaos.ledger import FaultLedger
from drillbook.errors import ConfigError
from drillbook.targets.kubernetes import KUBERNETES_RIGHTS, kubernetes_rights


def test_the_faults_drillbook_makes_each_have_an_undo():
    assert {"scale", "await_ready", "restore_store"} <= set(UNDO)


def test_a_fault_with_an_unknown_undo_stays_open_and_says_why(tmp_path):
    ledger = FaultLedger(tmp_path / "faults.jsonl")
    known = ledger.record("run-1", "sandbox", "scale", {"op": "scale", "service": "agent", "replicas": 2})
    partition = ledger.record("run-1", "sandbox", "network-partition", {"op": "heal_partition", "between": ["a", "b"]})
    ledger.resolve(known, "scaled agent back to 2")
    # The run's context is not asked for anything here: the one open fault's undo is unknown.
    run = SimpleNamespace(ledger=ledger, target=None)
    how, restored = undo(run, partition)
    assert not restored
    assert how.startswith("NOT undone: no undo is known for op 'heal_partition' of network-partition")
    assert "await_ready, restore_store, scale" in how
    done = undo_open_faults(run, "run-1")
    assert [fault.id for fault, _ in done] == [partition.id]
    assert [fault.id for fault in ledger.open_faults("run-1")] == [partition.id]  # still open for a later rollback


class StoppedPlatform:
    """A target whose own platform has stopped: nothing of it may be asked (the undo would wait)."""

    def platform_running(self) -> bool:
        return False

    def __getattr__(self, name: str):
        raise AssertionError(f"a stopped platform was asked {name}")


def test_faults_on_a_platform_that_stopped_are_closed_without_waiting_for_it(tmp_path):
    ledger = FaultLedger(tmp_path / "faults.jsonl")
    kill = ledger.record("run-1", "sandbox", "kill", {"op": "await_ready", "service": "agent"})
    scale = ledger.record("run-1", "sandbox", "scale", {"op": "scale", "service": "model", "replicas": 1})
    done = undo_open_faults(SimpleNamespace(ledger=ledger, target=StoppedPlatform()), None)
    assert {fault.id for fault, _ in done} == {kill.id, scale.id}
    assert all(how.startswith("closed: its platform is no longer running") for _, how in done)
    assert ledger.open_faults() == []


def test_an_action_without_kubernetes_rights_is_a_config_error_naming_the_known_ones():
    assert kubernetes_rights("kill") == KUBERNETES_RIGHTS["kill"]
    with pytest.raises(ConfigError, match=r"no Kubernetes rights are known for the action 'partition' \(known: kill,"):
        kubernetes_rights("partition")
