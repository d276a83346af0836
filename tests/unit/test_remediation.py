"""Remediation items from the verdicts and the records (a pure function fed traps), and the
records file: appended, chained, signed, checked by verify, never touching a sealed bundle."""

from __future__ import annotations

import json
from datetime import date, datetime, timezone
from pathlib import Path

import pytest

from drillbook.errors import ConfigError
from drillbook.evidence import BundleWriter, RunSummary, SloCheck, list_bundles, verify_path
from drillbook.evidence.catalog import BundleRow
from drillbook.evidence.remediation import (FINDING, RECORDS, REMEDIATION, append_record, check_records,
                                            remediation_items, read_records)
from drillbook.evidence.signing import fingerprint, load_private_key, new_key

NOW = datetime(2026, 12, 10, tzinfo=timezone.utc)


def row(verdict: str, at: str, target: str = "sandbox", status: str = "complete") -> BundleRow:
    summary = RunSummary(runbook="restore-drill", control="restore", verdict=verdict,
                         checks=[SloCheck(name="RTO", comparison="<=", threshold=60, value=10)])
    name = f"2026120{at[0]}T{at[1:]}Z_restore-drill_{target}_{verdict.lower()[:2]}{at}"
    return BundleRow(Path("/results") / name, "restore-drill", target, status, f"2026-12-0{at[0]}T{at[1:3]}:00:00Z",
                     "a" * 64, summary)


def record(bundle: BundleRow, kind: str, at: str, text: str, owner: str | None = None, due: str | None = None) -> dict:
    return {"kind": kind, "bundle": bundle.name, "control": bundle.control, "target": bundle.target,
            "at": f"2026-12-0{at[0]}T{at[1:3]}:30:00Z", "text": text, "owner": owner, "due": due}


def test_a_fail_opens_an_item_and_the_next_passing_run_on_that_target_closes_it() -> None:
    failed, again = row("FAIL", "110"), row("FAIL", "112")
    elsewhere, error = row("PASS", "113", target="staging"), row("ERROR", "114")
    fixed = row("PASS", "215")
    (item,) = remediation_items([fixed, error, elsewhere, again, failed], [], set())
    assert item.opened_by is failed and item.failures == [again]
    assert item.closed_by is fixed, "a PASS on another target, or an ERROR, closes nothing"
    assert item.age_days(NOW) == pytest.approx(1 + 5 / 24)


def test_nothing_but_a_measured_miss_opens_an_item_by_itself() -> None:
    assert remediation_items([row("ERROR", "110"), row("PASS", "111"), row("PASS", "112", status="killed")], [],
                             set()) == []


def test_a_pass_that_does_not_verify_or_was_not_sealed_complete_closes_nothing() -> None:
    failed, tampered, killed = row("FAIL", "110"), row("PASS", "111"), row("PASS", "112", status="interrupted")
    (item,) = remediation_items([failed, tampered, killed], [], failed={tampered.name})
    assert item.open and item.overdue(NOW) is False


def test_records_give_an_item_its_owner_due_date_and_action_and_open_items_of_their_own() -> None:
    failed, error, fixed = row("FAIL", "110"), row("ERROR", "212"), row("PASS", "314")
    records = [record(failed, REMEDIATION, "111", "add a backup check", "sre", "2026-12-05"),
               record(failed, FINDING, "111", "backups were 40 min old"),
               record(error, REMEDIATION, "213", "fix the restore script", "dba", "2026-12-20")]
    (item,) = remediation_items([failed, error], records[:2], set())
    assert (item.owner, item.due, item.actions, item.findings) == \
        ("sre", "2026-12-05", ["add a backup check"], ["backups were 40 min old"])
    assert item.overdue(NOW) and item.open
    (item,) = remediation_items([failed, error, fixed], records, set())
    assert (item.owner, item.due, item.actions) == ("dba", "2026-12-20", ["add a backup check", "fix the restore script"]), \
        "a record on a run while an item is open on its control and target is about that item; the latest owner holds"
    assert item.closed_by is fixed and not item.overdue(NOW)


def test_a_record_on_a_run_of_no_item_opens_one_closed_by_the_next_passing_run() -> None:
    passed, later = row("PASS", "110"), row("PASS", "314")
    records = [record(passed, REMEDIATION, "211", "the RTO was close to its SLO", "sre", "2026-12-20")]
    (item,) = remediation_items([passed, later], records, set())
    assert item.opened_by is None and item.opened_at == "2026-12-02T11:30:00Z"
    assert item.closed_by is later and item.owner == "sre" and not item.overdue(NOW)


def sealed(results: Path, value: float, key: Path | None = None) -> BundleRow:
    summary = RunSummary.judge("restore-drill", "restore", {"rto_s": value},
                               [SloCheck(name="RTO", comparison="<=", threshold=60, value=value)])
    with BundleWriter(results, "restore-drill", "sandbox", {}, signing_key=key) as bundle:
        bundle.write_json("summary.json", summary.to_json())
    return next(r for r in list_bundles(results) if r.name == bundle.path.name)


def kinds(results: Path, trusted: set[str] | None = None) -> list[str]:
    return [kind for kind, _ in check_records(results, verify_path(results).ledger, trusted)]


def test_records_are_chained_and_signed_and_leave_the_bundle_untouched(tmp_path: Path) -> None:
    results, key = tmp_path / "results", tmp_path / "key.pem"
    new_key(key)
    failed = sealed(results, 90.0, key)
    manifest = (failed.path / "manifest.json").read_bytes()
    append_record(results, failed, REMEDIATION, text="add a check", author="dana", owner="sre", due=date(2026, 12, 20),
                  signing_key=key)
    append_record(results, failed, FINDING, text="backups were old", author="dana", signing_key=key)
    assert (failed.path / "manifest.json").read_bytes() == manifest
    entries, _ = read_records(results)
    assert [e["seq"] for e in entries] == [1, 2] and entries[1]["previous"] and entries[0]["signature"]
    team = {fingerprint(load_private_key(key).public_key())}
    assert kinds(results, team) == []
    assert verify_path(results).ok and not [f for f in verify_path(results).findings if f.kind == "stray-file"]
    assert kinds(results, {"0" * 64}) == ["records-signature-untrusted"] * 2


def test_a_changed_or_removed_record_or_a_foreign_bundle_is_found(tmp_path: Path) -> None:
    results = tmp_path / "results"
    failed = sealed(results, 90.0)
    for text in ("one", "two", "three"):
        append_record(results, failed, FINDING, text=text, author="dana")
    path = results / RECORDS
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], lines[2]]) + "\n")
    assert "records-chain-broken" in kinds(results)
    changed = json.loads(lines[1])
    changed["text"] = "nothing to see"
    path.write_text("\n".join([lines[0], json.dumps(changed), lines[2]]) + "\n")
    assert kinds(results) == ["records-chain-broken"], "the line after the changed one no longer follows it"
    path.write_text("\n".join(lines) + "\nnot json\n")
    assert kinds(results) == ["records-damaged"]
    with pytest.raises(ConfigError, match="is damaged"):
        append_record(results, failed, FINDING, text="four", author="dana")
    path.write_text("\n".join(lines) + "\n")
    forged = BundleRow(failed.path.with_name(failed.name + "x"), failed.runbook, failed.target, "complete",
                       failed.finished_at, "b" * 64, failed.summary)
    append_record(results, forged, FINDING, text="about a run the ledger never held", author="mallory")
    assert kinds(results) == ["records-bundle-unknown"]
    assert "records-bundle-unknown" in {f.kind for f in verify_path(results).errors}


def test_only_a_sealed_run_gets_a_record(tmp_path: Path) -> None:
    results = tmp_path / "results"
    failed = sealed(results, 90.0)
    unsealed = BundleRow(failed.path, failed.runbook, failed.target, "unsealed", "", None, None)
    with pytest.raises(ConfigError, match="not a sealed bundle"):
        append_record(results, unsealed, FINDING, text="x", author="dana")
