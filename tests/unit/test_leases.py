"""Fault leases as the sandbox's supervisor keeps them (drillbook.sandbox.leases): granted with an
undo it knows, renewed by the runs that hold them, released when undone, and taken out once
expired — with the time passed in, so expiry is tested without a clock."""

from __future__ import annotations

import pytest

from drillbook.config import fault_lease_s
from drillbook.errors import ConfigError
from drillbook.sandbox.leases import LeaseBook, LeaseError

SCALE = {"op": "scale", "service": "agent", "replicas": 2}


def request(fault: str = "f1", run: str = "run-1", undo: dict | None = None, seconds: float = 3.0) -> dict:
    return {"fault": fault, "run": run, "what": f"{fault} of {run}", "undo": undo or SCALE, "seconds": seconds}


def test_a_lease_expires_only_when_its_run_stops_renewing_it():
    book = LeaseBook()
    book.grant(request("f1", "run-1"), now=100.0)
    book.grant(request("f2", "run-2", {"op": "restore_store"}, seconds=10.0), now=100.0)
    assert book.expired(102.9) == []
    assert book.renew(["run-1"], now=102.9) == 1  # run-1's heartbeat: f1 now lives until 105.9
    assert book.expired(105.0) == []
    expired = book.expired(105.9)
    assert [lease.fault for lease in expired] == ["f1"] and expired[0].undo == SCALE
    assert book.expired(106.0) == []  # taken out: undone once
    assert [lease.fault for lease in book.expired(110.0)] == ["f2"]  # never renewed: granted 100 + 10 s


def test_a_released_lease_is_never_undone_and_a_fault_leased_again_keeps_its_first_undo():
    book = LeaseBook()
    book.grant(request("f1"), now=0.0)
    assert book.release("f1") is not None and book.release("f1") is None
    assert book.expired(1000.0) == []
    book.grant(request("f2", undo=SCALE), now=0.0)
    again = book.grant(request("f2", undo={"op": "scale", "service": "agent", "replicas": 0}, seconds=5.0), now=4.0)
    assert again.undo == SCALE and again.expires_at == 9.0  # the state before the first fault, the new expiry


def test_expired_leases_come_out_oldest_grant_first():
    book = LeaseBook()
    book.grant(request("late", seconds=1.0), now=5.0)
    book.grant(request("early", seconds=10.0), now=1.0)
    assert [lease.fault for lease in book.expired(20.0)] == ["early", "late"]


@pytest.mark.parametrize(("changed", "message"), [
    ({"undo": {"op": "rm", "path": "/"}}, "op is one of scale, restore_store"),
    ({"undo": {"op": "scale", "service": "agent", "replicas": "2"}}, r"undo scale needs replicas \(int\)"),
    ({"undo": {"op": "scale", "service": "agent", "replicas": True}}, r"undo scale needs replicas \(int\)"),
    ({"undo": "scale"}, "undo must be an object"),
    ({"seconds": 0}, "seconds must be a number above 0"),
    ({"seconds": 7200}, "at most 3600"),
    ({"seconds": "3"}, "seconds must be a number"),
    ({"run": ""}, "run must be a string"),
    ({"fault": "x" * 201}, "fault must be a string of 1 to 200 characters"),
])
def test_a_lease_the_supervisor_cannot_undo_is_refused(changed, message):
    book = LeaseBook()
    with pytest.raises(LeaseError, match=message):
        book.grant({**request(), **changed}, now=0.0)
    assert book.leases == {}
    with pytest.raises(LeaseError, match="runs must be a list"):
        book.renew("run-1", now=0.0)


def test_the_lease_length_comes_from_the_environment_within_bounds(monkeypatch):
    monkeypatch.delenv("DRILLBOOK_FAULT_LEASE_S", raising=False)
    assert fault_lease_s() == 30.0
    monkeypatch.setenv("DRILLBOOK_FAULT_LEASE_S", "4.5")
    assert fault_lease_s() == 4.5
    for bad in ("0.5", "soon", "nan", "1e9"):
        monkeypatch.setenv("DRILLBOOK_FAULT_LEASE_S", bad)
        with pytest.raises(ConfigError, match="DRILLBOOK_FAULT_LEASE_S=.*a fault lease is 1 to 3600 seconds"):
            fault_lease_s()
