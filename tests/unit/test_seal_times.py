"""Seal times in the ledger: none after the verifier's clock, none well before the seal before it."""

from __future__ import annotations

from drillbook.evidence.ledger import LedgerEntry
from drillbook.evidence.verify import VerifyReport, check_seal_times

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def entries(*times: str) -> list[LedgerEntry]:
    return [LedgerEntry(i, f"b{i}", "0" * 64, None, at, "complete") for i, at in enumerate(times, 1)]


def kinds(*times: str) -> list[tuple[str, str]]:
    report = VerifyReport()
    check_seal_times(entries(*times), report, now=NOW)
    return [(f.bundle, f.kind) for f in report.findings]


def test_seals_in_order_and_before_the_clock_are_no_finding():
    assert kinds("2027-01-15T07:00:00Z", "2027-01-15T07:30:00Z", "2027-01-15T08:04:00Z") == []


def test_a_seal_after_the_clock_and_one_out_of_order_are_findings():
    assert kinds("2027-01-15T07:00:00Z", "2030-01-01T00:00:00Z") == [("b2", "seal-time-future")]
    # the seal after a future one is out of order against it, and the two are both named
    assert kinds("2030-01-01T00:00:00Z", "2027-01-15T07:00:00Z") == [("b1", "seal-time-future"),
                                                                     ("b2", "seal-time-order")]
    assert kinds("2027-01-15T07:00:00Z", "2027-01-15T06:00:00Z") == [("b2", "seal-time-order")]
    assert kinds("yesterday") == [("b1", "seal-time-invalid")]
