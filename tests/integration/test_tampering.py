"""Tampering an auditor must see, tried on real bundles with the real `drillbook verify`.

Each case changes a sealed results folder the way someone with write access to it could, and
asserts the exit code (1: evidence changed, 2: unusable input), the one line that names the
problem, and that no traceback is printed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from drillbook.evidence.bundle import LEDGER, make_writable, read_ledger, remove_bundle
from drillbook.evidence.signing import new_key
from tests.integration.test_evidence import write_bundle


def drillbook(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("DRILLBOOK_SIGNING_KEY", "DRILLBOOK_TRUSTED_KEYS", "DRILLBOOK_WITNESS")}
    environment.update({"COLUMNS": "250", **(env or {})})
    done = subprocess.run([sys.executable, "-m", "drillbook", *map(str, args)], env=environment, capture_output=True,
                          text=True, timeout=60)
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    return done


@pytest.fixture
def results(tmp_path: Path) -> Path:
    return tmp_path / "results"


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Path]:
    """The team's signing key and an attacker's, each with its .pub."""
    made = {"team": tmp_path / "keys" / "team.pem", "attacker": tmp_path / "keys" / "attacker.pem"}
    for path in made.values():
        new_key(path)
    return made


def pub(key: Path) -> Path:
    return Path(f"{key}.pub")


def drop_last_ledger_line(results: Path) -> None:
    ledger = results / LEDGER
    ledger.write_text("".join(line + "\n" for line in ledger.read_text().splitlines()[:-1]))


def rebuild_history(results: Path, key: Path | None, runs: int) -> None:
    """What someone with write access and any key can do: throw everything away and seal anew."""
    for folder in results.iterdir():
        if folder.is_dir():
            remove_bundle(folder)
    (results / LEDGER).unlink()
    for _ in range(runs):
        write_bundle(results, signing_key=key, verdict_value=0.1)


def test_a_cut_tail_is_caught_by_the_head_kept_outside(results, tmp_path, keys):
    witness = tmp_path / "auditor" / "witness.jsonl"
    for _ in range(3):
        write_bundle(results, signing_key=keys["team"], witness=witness)
    assert len(witness.read_text().splitlines()) == 3  # one signed head per sealed bundle
    exported = tmp_path / "auditor" / "head.json"
    done = drillbook("head", results, "-o", exported, env={"DRILLBOOK_SIGNING_KEY": str(keys["team"])})
    assert done.returncode == 0 and "entry 3" in done.stdout
    trusted = ["--public-key", pub(keys["team"])]
    for kept in (witness, exported):
        ok = drillbook("verify", results, *trusted, "--expect-head", kept)
        assert ok.returncode == 0, ok.stdout
        assert "matches the head kept in" in ok.stdout and "3 signed by a trusted key" in ok.stdout

    newest = read_ledger(results)[-1].bundle
    remove_bundle(results / newest)
    drop_last_ledger_line(results)
    unanchored = drillbook("verify", results, *trusted)
    assert unanchored.returncode == 0  # the chain alone cannot see a cut tail ...
    assert "no kept head given (--expect-head): a cut tail cannot be seen" in unanchored.stdout  # ... and says so
    for kept in (witness, exported):
        cut = drillbook("verify", results, *trusted, "--expect-head", kept)
        assert cut.returncode == 1
        assert f"history-cut: the ledger has 2 entries but the head kept in {kept} names entry 3 ({newest})" \
            in cut.stdout


def test_a_history_rebuilt_with_another_key_or_none_is_caught(results, tmp_path, keys):
    witness = tmp_path / "witness.jsonl"
    for _ in range(2):
        write_bundle(results, signing_key=keys["team"], witness=witness)
    trusted = ["--public-key", pub(keys["team"])]
    rebuild_history(results, keys["attacker"], runs=2)
    resigned = drillbook("verify", results, *trusted)
    assert resigned.returncode == 1 and resigned.stdout.count("signature-untrusted") == 2
    rebuild_history(results, None, runs=2)
    unsigned = drillbook("verify", results, *trusted, "--require-signed")
    assert unsigned.returncode == 1 and unsigned.stdout.count("signature-missing") == 2
    # Even with the team's own key (an insider on the signing machine), the kept head shows it.
    rebuild_history(results, keys["team"], runs=2)
    insider = drillbook("verify", results, *trusted, "--expect-head", witness)
    assert insider.returncode == 1 and "history-rewritten: ledger entry 2 is" in insider.stdout


def test_verify_never_trusts_a_private_key_it_finds_on_the_machine(results, keys):
    write_bundle(results, signing_key=keys["attacker"])
    found = drillbook("verify", results, env={"DRILLBOOK_SIGNING_KEY": str(keys["attacker"])})
    assert found.returncode == 0
    assert "signatures not checked: no trusted public key was given" in found.stdout
    assert "signatures (not checked against any trusted key): 1 signed, not checked" in found.stdout
    required = drillbook("verify", results, "--require-signed", env={"DRILLBOOK_SIGNING_KEY": str(keys["attacker"])})
    assert required.returncode == 1 and "ERROR ledger: signatures-unchecked" in required.stdout
    private = drillbook("verify", results, "--public-key", keys["attacker"])
    assert private.returncode == 2
    assert private.stderr.strip() == (f"drillbook: {keys['attacker']} holds a private key; trust its public half "
                                      f"(attacker.pem.pub) instead")


def test_key_rotation_keeps_earlier_bundles_valid_and_unsigned_ones_are_a_warning(results, tmp_path, keys):
    write_bundle(results)  # before anyone made a key
    write_bundle(results, signing_key=keys["team"])
    rotated = tmp_path / "keys" / "rotated.pem"
    new_key(rotated)
    write_bundle(results, signing_key=rotated)
    trusted_file = tmp_path / "trusted-keys.pem"
    trusted_file.write_bytes(pub(keys["team"]).read_bytes() + pub(rotated).read_bytes())
    both = drillbook("verify", results, env={"DRILLBOOK_TRUSTED_KEYS": str(trusted_file)})
    assert both.returncode == 0, both.stdout
    assert "against 2 trusted key(s)): 2 signed by a trusted key, 1 unsigned" in both.stdout
    assert "WARNING" in both.stdout and "unsigned: bundle is not signed" in both.stdout
    only_new = drillbook("verify", results, "--public-key", pub(rotated))
    assert only_new.returncode == 1 and only_new.stdout.count("signature-untrusted") == 1


def test_a_signature_cannot_be_dropped_once_a_trusted_key_signs(results, tmp_path, keys):
    for _ in range(2):
        write_bundle(results, signing_key=keys["team"])
    forged = write_bundle(results, verdict_value=0.1)  # appended by someone without the team's key
    trusted = ["--public-key", pub(keys["team"])]
    done = drillbook("verify", results, *trusted)
    assert done.returncode == 1, done.stdout
    assert (f"ERROR {forged.name}: signature-downgrade: unsigned, but sealed after "
            in done.stdout) and "which a trusted key signed" in done.stdout
    # A whole history sealed anew without signatures is no better, with trusted keys given.
    rebuild_history(results, None, runs=2)
    rebuilt = drillbook("verify", results, *trusted)
    assert rebuilt.returncode == 1 and "ERROR ledger: signature-downgrade: trusted keys were given but no bundle is " \
                                       "signed by one" in rebuilt.stdout


def test_data_hidden_as_an_unsealed_marker_in_a_sealed_bundle_is_caught(results, tmp_path, keys):
    witness = tmp_path / "witness.jsonl"
    bundle = write_bundle(results, signing_key=keys["team"], witness=witness)
    make_writable(bundle)
    (bundle / ".unsealed").write_bytes(os.urandom(1 << 20))
    done = drillbook("verify", results, "--public-key", pub(keys["team"]), "--require-signed", "--expect-head", witness)
    assert done.returncode == 1
    assert f"ERROR {bundle.name}: file-unexpected: .unsealed is not listed in the manifest" in done.stdout


def test_a_seal_dated_after_the_verifiers_clock_is_caught(results):
    write_bundle(results)
    second = write_bundle(results)
    ledger = results / LEDGER
    lines = ledger.read_text().splitlines()
    last = json.loads(lines[-1])
    last["sealed_at"] = "2030-01-01T00:00:00Z"  # a sealing machine's clock set years ahead
    ledger.write_text("\n".join([*lines[:-1], json.dumps(last)]) + "\n")
    done = drillbook("verify", results)
    assert done.returncode == 1
    assert f"ERROR {second.name}: seal-time-future: sealed at 2030-01-01T00:00:00Z, after this verification's clock" \
        in done.stdout


def test_a_hand_made_unsealed_folder_with_a_pass_is_not_evidence(results):
    write_bundle(results)
    forged = results / "20261203T000000Z_ha-replica-loss_sandbox_f00f00"
    forged.mkdir()
    (forged / ".unsealed").write_text("")
    (forged / "summary.json").write_text(json.dumps({"runbook": "ha-replica-loss", "control": "ha",
                                                     "verdict": "PASS", "checks": []}))
    done = drillbook("verify", results)
    assert done.returncode == 1
    assert f"ERROR {forged.name}: not-in-ledger: its .unsealed marker names no run" in done.stdout
    listed = drillbook("list", results)
    row = next(line for line in listed.stdout.splitlines() if "f00f00" in line)
    assert "UNSEALED" in row and "PASS" not in row


def test_a_damaged_ledger_is_named_line_by_line(results):
    for _ in range(2):
        write_bundle(results)
    ledger = results / LEDGER
    text = ledger.read_text()
    ledger.write_text(text[: len(text) - 40])  # cut mid-line
    done = drillbook("verify", results)
    assert done.returncode == 1
    assert "ledger: ledger-damaged: ledger.jsonl line 2 is not a ledger entry" in done.stdout
    assert "not-in-ledger" in done.stdout  # the bundle whose line was cut is no longer accounted for
    sealing = drillbook("sandbox", "smoke", "--results", results, env={"DRILLBOOK_STATE_DIR": str(results.parent / "s")})
    assert sealing.returncode != 0 and "is damaged (line 2 is not a ledger entry" in sealing.stderr


def test_a_ledger_line_pointing_outside_the_results_folder_is_not_followed(results, tmp_path):
    write_bundle(results)
    outside = write_bundle(tmp_path / "elsewhere")  # a real sealed bundle, but not of this folder
    entry = json.loads((tmp_path / "elsewhere" / LEDGER).read_text())
    previous = read_ledger(results)[-1]
    entry.update(seq=2, bundle=f"../elsewhere/{outside.name}", previous_manifest_sha256=previous.manifest_sha256)
    with open(results / LEDGER, "a") as ledger:
        ledger.write(json.dumps(entry, sort_keys=True) + "\n")
    done = drillbook("verify", results)
    assert done.returncode == 1
    assert "is not the name of a folder inside the results folder" in done.stdout
    assert "1 bundles checked, 1 intact" in done.stdout


def test_hidden_folders_and_symlinks_in_the_results_folder_are_findings(results, tmp_path):
    bundle = write_bundle(results)
    hidden = results / ".previous-run"
    shutil.copytree(bundle, hidden)
    done = drillbook("verify", results)
    assert done.returncode == 1 and "ERROR .previous-run: not-in-ledger: a hidden or oddly named folder" in done.stdout
    make_writable(hidden)
    shutil.rmtree(hidden)
    (results / "link").symlink_to(bundle)
    linked = drillbook("verify", results)
    assert linked.returncode == 1 and "ERROR link: symlink:" in linked.stdout
    (results / "link").unlink()
    make_writable(bundle)
    target = tmp_path / "swapped.log"
    target.write_text("all good\n")
    (bundle / "load" / "locust.log").unlink()
    (bundle / "load" / "locust.log").symlink_to(target)  # same bytes, but not the sealed file
    swapped = drillbook("verify", results)
    assert swapped.returncode == 1 and "file-symlink: load/locust.log is a symlink" in swapped.stdout


def test_unusable_input_is_one_line_and_exit_2(results, tmp_path):
    write_bundle(results)
    loop = tmp_path / "loop"
    loop.symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(loop)
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    not_a_head = tmp_path / "head.json"
    not_a_head.write_text('{"count": 1}')
    for args, message in [
        (("verify", loop), "results folder"),
        (("verify", results, "--expect-head", not_a_head), "is not a ledger head"),
        (("verify", results, "--expect-head", tmp_path / "missing.json"), "cannot read the kept ledger head"),
        (("verify", results, "--public-key", a_file), "holds no PEM public key"),
        (("report", results, "--since", "last tuesday"), "invalid --since"),
        (("run", "cold-start", "--results", a_file), "is a file, not a folder"),
        (("gameday", "--results", a_file), "is a file, not a folder"),
    ]:
        done = drillbook(*args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("drillbook: ") and message in lines[0], (args, lines)


def test_deleting_a_failed_runs_folder_does_not_raise_the_report_score(results, tmp_path):
    for value in (1.5, 1.5, 1.5):
        write_bundle(results, verdict_value=value)
    failed = write_bundle(results, verdict_value=6.0)  # over its 5 s SLO: FAIL
    page = tmp_path / "report.html"
    assert drillbook("report", results, "-o", page).returncode == 0
    assert "75.0 / 100" in page.read_text() and ">UNVERIFIED<" not in page.read_text()
    remove_bundle(failed)  # what someone with write access to the results folder can do
    assert drillbook("report", results, "-o", page).returncode == 0
    html = page.read_text()
    assert "75.0 / 100" in html and "100.0 / 100" not in html
    assert failed.name in html and ">UNVERIFIED<" in html  # still listed, as a run that did not pass
    listed = drillbook("list", results)
    assert failed.name[-6:] in listed.stdout and "MISSING" in listed.stdout, listed.stdout


def test_a_report_over_a_cut_tail_gives_no_score_with_the_head_kept_outside(results, tmp_path):
    witness = tmp_path / "auditor" / "witness.jsonl"
    for value in (1.5, 6.0):
        write_bundle(results, verdict_value=value, witness=witness)
    newest = read_ledger(results)[-1].bundle
    remove_bundle(results / newest)  # the FAIL, folder and ledger line both gone
    drop_last_ledger_line(results)
    page = tmp_path / "report.html"
    assert drillbook("report", results, "-o", page).returncode == 0
    assert "100.0 / 100" in page.read_text()  # the chain alone cannot see it ...
    assert "no kept head given (--expect-head)" in page.read_text()  # ... and the page says so
    done = drillbook("report", results, "-o", page, "--expect-head", witness)
    assert done.returncode == 0, done.stdout
    html = page.read_text()
    assert "no score" in html and "100.0 / 100" not in html
    assert f"withheld: the ledger has 1 entries but the head kept in {witness} names entry 2 ({newest})" in html


LIVE_RUN = """
import sys
from drillbook.evidence.bundle import BundleWriter
with BundleWriter(sys.argv[1], "ha-replica-loss", "sandbox", {"users": 4}) as bundle:
    print(bundle.path.name, flush=True)
    sys.stdin.readline()
"""


def test_a_live_run_is_shown_running_and_counted_once_it_is_sealed_or_killed(results, tmp_path):
    for _ in range(2):
        write_bundle(results)
    page = tmp_path / "report.html"
    with subprocess.Popen([sys.executable, "-c", LIVE_RUN, str(results)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as live:
        try:
            name = live.stdout.readline().strip()
            assert drillbook("report", results, "-o", page).returncode == 0
            html = page.read_text()
            assert "100.0 / 100" in html and ">RUNNING<" in html  # not a run that failed (83.3 before)
            checked = drillbook("verify", results)
            assert checked.returncode == 0, checked.stdout  # not incomplete evidence: not evidence yet
            assert f"{name}: running: a run in progress (pid {live.pid})" in checked.stdout, checked.stdout
        finally:
            live.kill()  # killed mid-run: now it is a run that never sealed
    assert drillbook("report", results, "-o", page).returncode == 0
    assert "66.7 / 100" in page.read_text() and ">UNSEALED<" in page.read_text()
    assert drillbook("verify", results).returncode == 1
    assert drillbook("verify", results, "--allow-incomplete").returncode == 0


def test_verify_during_a_seal_waits_for_it_and_finds_nothing_wrong(results):
    import fcntl

    write_bundle(results)
    write_bundle(results)
    ledger = results / LEDGER
    lines = ledger.read_text().splitlines(keepends=True)
    make_writable(results)
    # A seal between its manifest and its ledger line, as the sealer holds it: the folder sealed,
    # the ledger not yet naming it, the ledger's lock held.
    with open(ledger, "r+", encoding="utf-8") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        held.truncate(len("".join(lines[:-1]).encode()))
        verify = subprocess.Popen([sys.executable, "-m", "drillbook", "verify", str(results)], text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  env={**os.environ, "COLUMNS": "250"})
        try:
            waiting = f"{verify.pid} "
            deadline = time.monotonic() + 60
            while not any("->" in line and waiting in line for line in Path("/proc/locks").read_text().splitlines()):
                assert verify.poll() is None and time.monotonic() < deadline, "verify did not wait for the seal"
                time.sleep(0.05)
            held.seek(0, os.SEEK_END)
            held.write(lines[-1])  # the seal appends its line and lets go
            held.flush()
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)
    output, _ = verify.communicate(timeout=60)
    assert verify.returncode == 0, output
    assert "not-in-ledger" not in output and "Traceback" not in output
    assert "2 bundles checked, 2 intact, 0 errors" in output and "history: 2 ledger entries" in output, output
