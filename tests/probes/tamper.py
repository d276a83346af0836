"""The tamper family: someone with write access to the results folder (and, for some, a key of
their own) changes sealed evidence; `drillbook verify`, as a team runs it with its trusted key
configured and its ledger head kept outside, must exit 1 and name what changed.

Each probe copies one pristine history (three bundles sealed and signed by the team's key, a
fourth left unsealed by a killed run is not part of it) and changes the copy.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from functools import partial
from pathlib import Path

from drillbook.evidence.bundle import LEDGER, MANIFEST, SIGNATURE, UNSEALED, make_writable
from drillbook.evidence.signing import load_private_key, new_key, sign
from tests.integration.test_evidence import write_bundle
from tests.probes import Probe, drillbook

FAMILY = "tamper"
BUNDLES = 3


def pristine(root: Path) -> Path:
    """A results folder of three signed bundles, the team's and an attacker's keys, and the head
    the team keeps outside (witness.jsonl); made once under root."""
    if (root / "done").exists():
        return root
    for who in ("team", "attacker"):
        new_key(root / f"{who}.pem")
    for value in (1.0, 1.5, 2.0):
        write_bundle(root / "results", signing_key=root / "team.pem", witness=root / "witness.jsonl",
                     verdict_value=value)
    (root / "done").write_text("")
    return root


def copy_of(pristine_root: Path, folder: Path) -> Path:
    """A writable copy of the pristine history in folder; its results folder."""
    shutil.copytree(pristine_root, folder / "h", symlinks=True)
    make_writable(folder / "h")
    return folder / "h" / "results"


def verify(home: Path) -> tuple[int, str]:
    done = drillbook(["verify", home / "results", "--expect-head", home / "witness.jsonl"],
                     env={"DRILLBOOK_TRUSTED_KEYS": str(home / "team.pem.pub")})
    if "Traceback" in done.stdout + done.stderr:
        return -1, "a traceback: " + (done.stderr.strip().splitlines() or [""])[-1]
    return done.returncode, done.stdout + done.stderr


def bundles(results: Path) -> list[Path]:
    """The sealed bundles, in ledger order."""
    return [results / json.loads(line)["bundle"] for line in (results / LEDGER).read_text().splitlines()]


def ledger_lines(results: Path) -> list[dict]:
    return [json.loads(line) for line in (results / LEDGER).read_text().splitlines()]


def write_ledger(results: Path, entries: list[dict]) -> None:
    (results / LEDGER).write_text("".join(json.dumps(e) + "\n" for e in entries))


def edit_json(path: Path, change: Callable[[dict], None]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))


def flip_byte(path: Path, at: int = -1) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def manifest_digest(bundle: Path) -> str:
    return hashlib.sha256((bundle / MANIFEST).read_bytes()).hexdigest()


def relist(bundle: Path, name: str) -> None:
    """What a forger without the key does after changing a file: list its new digest."""
    data = (bundle / name).read_bytes()

    def change(manifest: dict) -> None:
        manifest["files"][name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    edit_json(bundle / MANIFEST, change)


def rechain(results: Path) -> None:
    """What a forger does after changing manifests: make the ledger's digests and links match them."""
    entries, previous = ledger_lines(results), None
    for entry in entries:
        entry["manifest_sha256"] = manifest_digest(results / entry["bundle"])
        entry["previous_manifest_sha256"] = previous
        previous = entry["manifest_sha256"]
    write_ledger(results, entries)


def resign(bundle: Path, key: Path) -> None:
    digest = manifest_digest(bundle)
    private = load_private_key(key)
    (bundle / SIGNATURE).write_text(json.dumps({"fingerprint": "forged", "manifest_sha256": digest,
                                                "signature": sign(private, digest)}))


# --- the tampers: each changes a copied results folder -------------------------------------------

def untouched(results: Path) -> None:
    """The control: nothing changed."""


def change_summary(results: Path) -> None:
    edit_json(bundles(results)[0] / "summary.json", lambda s: s.update(verdict="PASS", reason="forged"))


def forge_figure_and_relist(results: Path) -> None:
    bundle = bundles(results)[1]
    edit_json(bundle / "summary.json", lambda s: s["metrics"].update(recovery_time_s=0.1))
    relist(bundle, "summary.json")


def forge_relist_and_rechain(results: Path) -> None:
    bundle = bundles(results)[1]
    edit_json(bundle / "summary.json", lambda s: s["metrics"].update(recovery_time_s=0.1))
    relist(bundle, "summary.json")
    rechain(results)


def forge_rechain_unsigned(results: Path) -> None:
    """Change, relist, drop the signature that no longer fits, and rechain: a downgrade."""
    bundle = bundles(results)[2]
    edit_json(bundle / "summary.json", lambda s: s["metrics"].update(recovery_time_s=0.1))
    relist(bundle, "summary.json")
    edit_json(bundle / MANIFEST, lambda m: m.update(signing=None))
    (bundle / SIGNATURE).unlink()
    rechain(results)


def forge_rechain_attacker_signed(results: Path, key: Path) -> None:
    bundle = bundles(results)[2]
    edit_json(bundle / "summary.json", lambda s: s["metrics"].update(recovery_time_s=0.1))
    relist(bundle, "summary.json")
    rechain(results)
    resign(bundle, key)


def drop_timeline_line(results: Path) -> None:
    path = bundles(results)[0] / "timeline.jsonl"
    path.write_text("".join(path.read_text().splitlines(keepends=True)[1:]) or "\n")


def flip_plot_byte(results: Path) -> None:
    flip_byte(bundles(results)[0] / "plots" / "latency.png")


def delete_listed_file(results: Path) -> None:
    (bundles(results)[0] / "load" / "locust.log").unlink()


def empty_summary(results: Path) -> None:
    (bundles(results)[1] / "summary.json").write_bytes(b"")


def add_file(results: Path) -> None:
    (bundles(results)[0] / "notes.txt").write_text("added later\n")


def add_hidden_file(results: Path) -> None:
    (bundles(results)[0] / ".hidden").write_bytes(os.urandom(256))


def add_unsealed_marker(results: Path) -> None:
    (bundles(results)[0] / UNSEALED).write_bytes(os.urandom(1 << 20))


def add_subfolder(results: Path) -> None:
    (bundles(results)[0] / "extra" / "deep").mkdir(parents=True)
    (bundles(results)[0] / "extra" / "deep" / "data.bin").write_bytes(b"x" * 64)


def add_symlink(results: Path) -> None:
    (bundles(results)[0] / "link").symlink_to("/etc/hostname")


def listed_file_as_symlink(results: Path) -> None:
    """The same bytes, kept elsewhere and linked: the bundle no longer holds its evidence."""
    path = bundles(results)[0] / "load" / "locust.log"
    elsewhere = results.parent / "elsewhere.log"
    elsewhere.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(elsewhere)


def change_manifest_field(results: Path) -> None:
    edit_json(bundles(results)[0] / MANIFEST, lambda m: m["parameters"].update(users=400))


def delete_manifest(results: Path) -> None:
    (bundles(results)[1] / MANIFEST).unlink()


def remove_signature(results: Path) -> None:
    (bundles(results)[1] / SIGNATURE).unlink()


def corrupt_signature(results: Path) -> None:
    edit_json(bundles(results)[1] / SIGNATURE, lambda s: s.update(signature="A" * 86 + "=="))


def swap_signatures(results: Path) -> None:
    first, second = bundles(results)[:2]
    shutil.copy(second / SIGNATURE, first / SIGNATURE)


def change_attestation(results: Path) -> None:
    path = bundles(results)[0] / "attestation.intoto.json"
    path.write_text(path.read_text().replace('"', "'", 1).replace("'", '"', 1) + " ")


def delete_middle_bundle(results: Path) -> None:
    shutil.rmtree(bundles(results)[1])


def cut_tail(results: Path) -> None:
    shutil.rmtree(bundles(results)[-1])
    write_ledger(results, ledger_lines(results)[:-1])


def rename_bundle(results: Path) -> None:
    bundle = bundles(results)[0]
    bundle.rename(bundle.with_name(bundle.name[:-6] + "000000"))


def swap_bundles(results: Path) -> None:
    first, second = bundles(results)[:2]
    first.rename(results / "swap")
    second.rename(first)
    (results / "swap").rename(second)


def delete_ledger_line(results: Path) -> None:
    entries = ledger_lines(results)
    write_ledger(results, entries[:1] + entries[2:])


def reorder_ledger(results: Path) -> None:
    entries = ledger_lines(results)
    write_ledger(results, [entries[1], entries[0], entries[2]])


def duplicate_ledger_line(results: Path) -> None:
    entries = ledger_lines(results)
    write_ledger(results, entries + [entries[-1]])


def change_ledger_digest(results: Path) -> None:
    entries = ledger_lines(results)
    entries[0]["manifest_sha256"] = "0" * 64
    write_ledger(results, entries)


def append_garbage(results: Path) -> None:
    with (results / LEDGER).open("a") as ledger:
        ledger.write("{not json\n")


def empty_ledger(results: Path) -> None:
    (results / LEDGER).write_text("")


def delete_ledger(results: Path) -> None:
    (results / LEDGER).unlink()


def ledger_points_outside(results: Path) -> None:
    entries = ledger_lines(results)
    entries[-1]["bundle"] = "../../etc"
    write_ledger(results, entries)


def seal_time_future(results: Path) -> None:
    entries = ledger_lines(results)
    entries[-1]["sealed_at"] = "2030-01-01T00:00:00Z"
    write_ledger(results, entries)


def seal_times_out_of_order(results: Path) -> None:
    entries = ledger_lines(results)
    entries[0]["sealed_at"], entries[-1]["sealed_at"] = "2026-12-31T00:00:00Z", entries[0]["sealed_at"]
    write_ledger(results, entries)


def rebuild_history(results: Path, key: Path | None) -> None:
    """Throw everything away and seal as many runs anew, all PASS (with `key`, or unsigned)."""
    for bundle in bundles(results):
        shutil.rmtree(bundle)
    (results / LEDGER).unlink()
    for _ in range(BUNDLES):
        write_bundle(results, signing_key=key, verdict_value=0.1)


def append_bundle(results: Path, key: Path | None) -> None:
    write_bundle(results, signing_key=key, verdict_value=0.1)


def hand_made_unsealed_pass(results: Path) -> None:
    forged = results / "20261203T000000Z_ha-replica-loss_sandbox_f00f00"
    forged.mkdir()
    (forged / UNSEALED).write_text("")
    (forged / "summary.json").write_text(json.dumps({"runbook": "ha-replica-loss", "control": "ha",
                                                     "verdict": "PASS", "checks": []}))


def hidden_folder_in_results(results: Path) -> None:
    (results / ".cache").mkdir()
    (results / ".cache" / "copy.json").write_text("{}")


def stray_file_in_results(results: Path) -> None:
    (results / "notes.txt").write_text("kept beside the evidence\n")


def bundle_as_symlink(results: Path) -> None:
    """A bundle moved out and linked back: the same bytes, held elsewhere."""
    bundle = bundles(results)[0]
    moved = results.parent / "moved"
    bundle.rename(moved)
    bundle.symlink_to(moved)


def probes(pristine_root: Path) -> list[Probe]:
    """The family: (name, tamper, a finding verify must name) for each kind."""
    attacker, team = pristine_root / "attacker.pem", pristine_root / "team.pem"
    kinds: list[tuple[str, Callable[[Path], None], str]] = [
        ("summary changed", change_summary, "file-changed"),
        ("figure forged and relisted", forge_figure_and_relist, "manifest-changed"),
        ("figure forged, relisted, rechained", forge_relist_and_rechain, "signature-invalid"),
        ("figure forged, resealed unsigned", forge_rechain_unsigned, "signature-downgrade"),
        ("figure forged, re-signed by another key", partial(forge_rechain_attacker_signed, key=attacker),
         "signature-"),
        ("timeline line dropped", drop_timeline_line, "file-changed"),
        ("plot byte flipped", flip_plot_byte, "file-changed"),
        ("listed file deleted", delete_listed_file, "file-missing"),
        ("summary emptied", empty_summary, "file-changed"),
        ("file added to a bundle", add_file, "file-unexpected"),
        ("hidden file added to a bundle", add_hidden_file, "file-unexpected"),
        ("data hidden as .unsealed in a sealed bundle", add_unsealed_marker, "file-unexpected"),
        ("subfolder added to a bundle", add_subfolder, "file-unexpected"),
        ("symlink added to a bundle", add_symlink, "symlink"),
        ("listed file replaced by a symlink to its bytes", listed_file_as_symlink, "file-symlink"),
        ("manifest field changed", change_manifest_field, "manifest-changed"),
        ("manifest deleted", delete_manifest, "manifest-missing"),
        ("signature removed", remove_signature, "signature-"),
        ("signature corrupted", corrupt_signature, "signature-invalid"),
        ("signature of another bundle", swap_signatures, "signature-"),
        ("attestation changed", change_attestation, "file-changed"),
        ("middle bundle deleted", delete_middle_bundle, "bundle-missing"),
        ("tail cut (bundle and ledger line)", cut_tail, "history-cut"),
        ("bundle renamed", rename_bundle, "bundle-missing"),
        ("two bundles swapped", swap_bundles, "manifest-changed"),
        ("ledger line deleted", delete_ledger_line, "chain-broken"),
        ("ledger lines reordered", reorder_ledger, "chain-broken"),
        ("ledger line duplicated", duplicate_ledger_line, "ledger-duplicate"),
        ("ledger digest changed", change_ledger_digest, "manifest-changed"),
        ("garbage line appended to the ledger", append_garbage, "ledger-damaged"),
        ("ledger emptied", empty_ledger, "not-in-ledger"),
        ("ledger deleted", delete_ledger, "not-in-ledger"),
        ("ledger line pointing outside the folder", ledger_points_outside, "ledger"),
        ("seal dated in the future", seal_time_future, "seal-time-future"),
        ("seal times out of order", seal_times_out_of_order, "seal-time-"),
        ("history rebuilt with another key", partial(rebuild_history, key=attacker), "signature-untrusted"),
        ("history rebuilt unsigned", partial(rebuild_history, key=None), "signature-downgrade"),
        ("history rebuilt with the team's own key (insider)", partial(rebuild_history, key=team),
         "history-rewritten"),
        ("unsigned bundle appended", partial(append_bundle, key=None), "signature-downgrade"),
        ("bundle appended signed by another key", partial(append_bundle, key=attacker), "signature-untrusted"),
        ("hand-made unsealed folder with a PASS", hand_made_unsealed_pass, "not-in-ledger"),
        ("hidden folder in the results folder", hidden_folder_in_results, "not-in-ledger"),
        ("bundle replaced by a symlink to its copy", bundle_as_symlink, "bundle-symlink"),
    ]
    made = [Probe(FAMILY, "control: nothing changed", partial(_judge_control, pristine_root))]
    made += [Probe(FAMILY, name, partial(_judge, pristine_root, tamper, finding)) for name, tamper, finding in kinds]
    # A file beside the bundles changes no evidence: it is named as a warning, and verify passes.
    made.append(Probe(FAMILY, "stray file beside the bundles (a warning)",
                      partial(_judge, pristine_root, stray_file_in_results, "WARNING notes.txt: stray-file",
                              expected_exit=0)))
    return made


def _judge_control(pristine_root: Path, folder: Path) -> str | None:
    copy_of(pristine_root, folder)
    code, said = verify(folder / "h")
    return None if code == 0 else f"the untouched history does not verify (exit {code}): {said.strip()[-300:]}"


def _judge(pristine_root: Path, tamper: Callable[[Path], None], finding: str, folder: Path,
           expected_exit: int = 1) -> str | None:
    results = copy_of(pristine_root, folder)
    tamper(results)
    code, said = verify(folder / "h")
    if code != expected_exit:
        return f"verify exited {code}, not {expected_exit}: {said.strip()[-300:]}"
    if finding not in said:
        return f"verify exited {code} without naming {finding}: {said.strip()[-300:]}"
    return None


__all__ = ["FAMILY", "pristine", "probes"]
