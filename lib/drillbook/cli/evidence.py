"""`drillbook keys new`, `verify`, `report`, `list`: the evidence an auditor reads."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Optional

import typer
from rich.table import Table
from rich.text import Text

from drillbook.cli.app import app, console

if TYPE_CHECKING:
    from datetime import datetime

    from drillbook.evidence.verify import EvidenceSource

keys_app = typer.Typer(no_args_is_help=True, help="Signing keys for evidence manifests.")
app.add_typer(keys_app, name="keys")


@keys_app.command("new")
def keys_new(path: Optional[Path] = typer.Argument(None, help="Where to write the private key "
                                                  "(default ~/.config/drillbook/signing-key.pem)."),
             force: bool = typer.Option(False, "--force", help="Replace an existing key.")) -> None:
    """Create an Ed25519 signing key; manifests are signed whenever a key is configured."""
    from drillbook.config import default_signing_key_path, output_file
    from drillbook.evidence import signing

    target = output_file(path, "key path") if path is not None else default_signing_key_path()
    fingerprint = signing.new_key(target, overwrite=force)
    console.print(f"signing key written to {target} (public key {target}.pub)")
    console.print(f"fingerprint {fingerprint}")
    if path is not None:
        console.print(f"set DRILLBOOK_SIGNING_KEY={target} to sign with it")
    console.print(f"give auditors {target}.pub: they verify with --public-key (keep the old .pub files in "
                  "their trusted-keys file when you rotate)", soft_wrap=True)


def _trusted_keys(public_keys: list[Path]) -> set[str] | None:
    """What the auditor trusts: the keys named by --public-key and $DRILLBOOK_TRUSTED_KEYS, and
    nothing else (a private key that happens to be on this machine proves nothing)."""
    from drillbook.config import trusted_keys_files
    from drillbook.evidence import signing

    return signing.trusted_fingerprints([*public_keys, *trusted_keys_files()])


def _folder(path: Optional[Path]) -> Path:
    """The results folder (or bundle) to read: one line and exit 2 when there is none."""
    from drillbook.config import results_dir, usable_folder
    from drillbook.errors import ConfigError

    target = usable_folder(path, "results folder", make=False) if path else results_dir(make=False)
    if not target.is_dir():
        raise ConfigError(f"no results folder or bundle at {target}")
    return target


@contextmanager
def _evidence(address: Optional[str]) -> Iterator[tuple[Path, "EvidenceSource | None"]]:
    """A results folder to read: the one named (or the default), or for s3://bucket/prefix the
    store's evidence downloaded as the chain vouches for it, with what the store itself shows."""
    import tempfile

    from drillbook.evidence.objectstore import EvidenceStore, is_store

    if not is_store(address):
        yield _folder(Path(address) if address else None), None
        return
    assert address is not None
    store = EvidenceStore(address)  # unreachable, or not object-locked: one line, exit 2
    with tempfile.TemporaryDirectory(prefix="drillbook-store-") as scratch:
        folder = Path(scratch) / "results"
        yield folder, store.download(folder)


EVIDENCE_HELP = "A results folder, one bundle, or an s3://bucket/prefix evidence store (default: the results folder)."
PUBLIC_KEY_HELP = "Trust signatures by the public key(s) in this file (repeat; also $DRILLBOOK_TRUSTED_KEYS)."


@app.command("head")
def head_command(
    path: Optional[Path] = typer.Argument(None, help="Results folder (default: the results folder)."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Write the head to this file (kept "
                                          "outside the results folder) instead of printing it."),
) -> None:
    """Print the signed ledger head, to keep outside the results folder for `verify --expect-head`.

    The head names how many entries the ledger has, its newest bundle and that bundle's manifest
    digest, signed with the signing key when one is configured."""
    import json

    from drillbook.config import output_file, signing_key
    from drillbook.errors import ConfigError
    from drillbook.evidence.anchor import current_head

    output = output_file(output, "--output")
    target = _folder(path)
    head = current_head(target, signing_key())
    if head is None:
        raise ConfigError(f"{target} has no ledger entries yet; there is no head to keep")
    text = json.dumps(head, indent=2, sort_keys=True) + "\n"
    if output is None:
        print(text, end="")
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    console.print(f"ledger head (entry {head['count']}, {head['bundle']}) written to {output}"
                  f"{'' if head['signing'] else ' unsigned: no signing key is configured'}", soft_wrap=True)


EXPECT_HEAD_HELP = ("A ledger head kept outside (`drillbook head -o`, or the $DRILLBOOK_WITNESS file): the "
                    "ledger must still hold it.")


@app.command("verify")
def verify_command(
    path: Optional[str] = typer.Argument(None, help=EVIDENCE_HELP),
    public_key: list[Path] = typer.Option([], "--public-key", help=PUBLIC_KEY_HELP),
    require_signed: bool = typer.Option(False, "--require-signed",
                                        help="Fail when a signature is missing or cannot be checked against a "
                                             "trusted key."),
    expect_head: Optional[Path] = typer.Option(None, "--expect-head",
                                               help=EXPECT_HEAD_HELP),
    allow_incomplete: bool = typer.Option(False, "--allow-incomplete",
                                          help="Exit 0 even when some runs were interrupted, killed or never sealed."),
    recompute: bool = typer.Option(False, "--recompute",
                                   help="Also derive every judged figure again from each bundle's raw observations "
                                        "and name any that disagrees with its summary.json."),
) -> None:
    """Recompute every digest, the chain, the signatures, each bundle's in-toto attestation, the
    exercise records and the kept head (and, with --recompute, every judged figure from the
    observations it came from).

    Exit 0 only when everything verifies and every run was complete (interrupted, killed and
    unsealed runs exit 1 unless --allow-incomplete); exit 1 when evidence was changed or is
    partial; exit 2 when the input cannot be used."""
    from drillbook.evidence.anchor import read_head
    from drillbook.evidence.verify import LEDGER_FINDING, recompute_figures, verify_evidence

    trusted = _trusted_keys(public_key)
    with _evidence(path) as (target, source):
        report = verify_evidence(target, trusted, source, require_signed=require_signed,
                                 expected_head=read_head(expect_head, target) if expect_head else None,
                                 head_source=str(expect_head) if expect_head else "")
        figures = recompute_figures(target, report) if recompute else None
    for finding in report.findings:
        style = "red" if finding.severity == "error" else "yellow"
        console.print(f"[{style}]{finding.severity.upper()}[/] {finding.bundle}: {finding.kind}: {finding.detail}",
                      soft_wrap=True)
    bundles = set(report.checked)
    intact = len(bundles - {f.bundle for f in report.errors} - {f.bundle for f in report.findings
                                                               if f.kind == "unsealed"})
    console.print(f"{len(bundles)} bundles checked, {intact} intact, {len(report.errors)} errors, "
                  f"{len(report.findings) - len(report.errors)} warnings")
    if figures is not None:
        wrong = sum(1 for f in report.findings if f.kind == "figure-disagrees")
        console.print(f"figures recomputed from the observations: {figures}, {wrong} disagree with summary.json")
    counts = report.counts()
    if counts:
        console.print("by state: " + ", ".join(f"{count} {state}" for state, count in sorted(counts.items())))
    signatures = report.signature_counts()
    if signatures:
        trust = f"against {report.keys_trusted} trusted key(s)" if trusted is not None else \
            "not checked against any trusted key"
        console.print(f"signatures ({trust}): " + ", ".join(f"{n} {state}" for state, n in sorted(signatures.items())),
                      soft_wrap=True)
    if target.is_dir() and (target / "records.jsonl").is_file():
        from drillbook.evidence.remediation import RECORDS_FINDING, read_records

        records, _ = read_records(target)
        problems = sum(1 for f in report.findings if f.bundle == RECORDS_FINDING)
        console.print(f"exercise records: {len(records)} findings and remediation records, "
                      + (f"{problems} problems" if problems else "chain, signatures and bundles hold"),
                      soft_wrap=True)
    if not any(f.bundle == LEDGER_FINDING and f.kind.startswith(("history", "head")) for f in report.findings):
        console.print(f"history: {report.entries} ledger entries; "
                      + (report.head or "no kept head given (--expect-head): a cut tail cannot be seen"),
                      soft_wrap=True)
    if not report.ok:
        raise typer.Exit(1)
    if report.not_complete and not allow_incomplete:
        console.print(f"{len(report.not_complete)} runs did not end as planned (their evidence is partial): "
                      f"{', '.join(report.not_complete)}; --allow-incomplete accepts them", soft_wrap=True)
        raise typer.Exit(1)


def _moment(text: Optional[str], option: str) -> "datetime | None":
    """--since/--until: an ISO date or date and time (UTC unless it says otherwise)."""
    from datetime import datetime, timezone

    from drillbook.errors import ConfigError

    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"invalid {option} {text!r}: use an ISO date such as 2026-12-01 or 2026-12-01T09:00Z") \
            from None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


@app.command("report")
def report_command(
    path: Optional[str] = typer.Argument(None, help=EVIDENCE_HELP),
    output: Path = typer.Option(Path("report.html"), "-o", "--output", help="Where to write the HTML page."),
    public_key: list[Path] = typer.Option([], "--public-key", help=PUBLIC_KEY_HELP),
    since: Optional[str] = typer.Option(None, "--since", help="The period starts here (ISO date or time, UTC)."),
    until: Optional[str] = typer.Option(None, "--until", help="The period ends here (ISO date or time, UTC)."),
    junit: Optional[Path] = typer.Option(None, "--junit", help="Also write the period's runs as JUnit XML here: "
                                                               "one test case per SLO check."),
    metrics_file: Optional[Path] = typer.Option(None, "--metrics-file", help="Also write verdicts and figures as "
                                                "Prometheus metrics (textfile collector format)."),
    pushgateway: Optional[str] = typer.Option(None, "--pushgateway", help="Also push them to this Pushgateway URL."),
    expect_head: Optional[Path] = typer.Option(None, "--expect-head",
                                               help=EXPECT_HEAD_HELP),
    mapping_file: Optional[Path] = typer.Option(None, "--mapping", help="The control mapping of the framework view "
                                                "and --oscal: drillbook's controls to DORA, SOC 2, ISO 27001, ISO "
                                                "22301, NIST SP 800-53 and PCI DSS controls (default: the shipped "
                                                "one; docs/frameworks.md gives the format)."),
    oscal: Optional[Path] = typer.Option(None, "--oscal", help="Also write the period as OSCAL assessment results "
                                                               "(JSON) here."),
    pdf: Optional[Path] = typer.Option(None, "--pdf", help="Also print the report to PDF here (WeasyPrint; A4 "
                                                           "landscape)."),
) -> None:
    """Write the auditor's HTML report: every run of the period under its control.

    Whatever its verdict, each run counts; the page shows the score, trends with thresholds,
    the framework view (framework controls, their evidence and gaps), verification findings and
    each bundle's digest."""
    from drillbook.config import output_file
    from drillbook.evidence.anchor import read_head
    from drillbook.evidence.frameworks import load_mapping
    from drillbook.evidence.report import PeriodEvidence, write_junit, write_report

    start, end = _moment(since, "--since"), _moment(until, "--until")
    if start is not None and end is not None and start > end:
        from drillbook.errors import ConfigError

        raise ConfigError(f"--since {since} is after --until {until}: the period would hold nothing")
    output = output_file(output, "--output")
    junit, metrics_file = output_file(junit, "--junit"), output_file(metrics_file, "--metrics-file")
    oscal, pdf = output_file(oscal, "--oscal"), output_file(pdf, "--pdf")
    mapping = load_mapping(mapping_file)
    if pdf is not None:
        from drillbook.evidence.report import pdf_engine

        pdf_engine()
    trusted = _trusted_keys(public_key)
    if pushgateway:
        from drillbook.evidence.metrics import pushgateway_ready

        pushgateway_ready(pushgateway)
    with _evidence(path) as (target, source):
        evidence = PeriodEvidence.read(target, trusted, start, end, source,  # verified once, for every output
                                       expected_head=read_head(expect_head, target) if expect_head else None,
                                       head_source=str(expect_head) if expect_head else "")
        console.print(f"report written to {write_report(evidence, output, mapping)}")
        if pdf is not None:
            from drillbook.evidence.report import write_pdf

            console.print(f"PDF written to {write_pdf(evidence, pdf, mapping)}")
        if oscal is not None:
            from drillbook.evidence.oscal import write_oscal

            console.print(f"OSCAL assessment results written to {write_oscal(evidence, mapping, oscal)}")
        if junit is not None:
            console.print(f"JUnit XML written to {write_junit(evidence, junit)}")
        if metrics_file is not None or pushgateway:
            from drillbook.evidence.metrics import VerdictMetrics

            metrics = VerdictMetrics()
            metrics.add_runs(evidence.rows, evidence.failed)
            if metrics_file is not None:
                console.print(f"metrics written to {metrics.write(metrics_file)}")
            if pushgateway:
                metrics.push(pushgateway, {"source": "report"})
                console.print(f"metrics pushed to {pushgateway}")


@app.command("publish")
def publish_command(
    path: Optional[Path] = typer.Argument(None, help="Results folder (default: the results folder)."),
    to: str = typer.Option(..., "--to", help="The evidence store: s3://bucket/prefix (an object-locked bucket; "
                                             "$DRILLBOOK_S3_ENDPOINT, $DRILLBOOK_S3_ACCESS_KEY, "
                                             "$DRILLBOOK_S3_SECRET_KEY)."),
    retention_days: int = typer.Option(365, "--retention-days", min=1, max=36500,
                                       help="Each object is locked (COMPLIANCE mode) for this many days."),
) -> None:
    """Copy every sealed bundle, the ledger and its head to write-once object storage.

    Each object is written with a COMPLIANCE retention: the store refuses to delete it or shorten
    its lock. Bundles already there are skipped; a different file of the same name is refused."""
    from drillbook.evidence.objectstore import EvidenceStore

    folder = _folder(path)
    store = EvidenceStore(to)  # checked before anything is written
    done = store.publish(folder, retention_days)
    console.print(f"published to {store.location}: {len(done.uploaded)} bundles written, {len(done.present)} already "
                  f"there; ledger of {done.ledger_entries} entries and its head; locked (COMPLIANCE) until "
                  f"{done.retain_until}", soft_wrap=True)


@app.command("list")
def list_command(path: Optional[Path] = typer.Argument(None, help="Results folder."),
                 limit: int = typer.Option(50, min=1, help="How many bundles to show.")) -> None:
    """Show evidence bundles, newest first, with their verdicts."""
    from drillbook.evidence import list_bundles

    target = _folder(path)
    rows = list_bundles(target)
    if not rows:
        console.print(f"no evidence bundles in {target}")
        return
    table = Table(title=f"{len(rows)} bundles in {target}, newest first", title_justify="left")
    shown = rows[:limit]
    # the bundle id (start time, runbook, target, run id) is what people copy: never cut or wrapped
    table.add_column("bundle", no_wrap=True, min_width=max(len(row.name) for row in shown))
    table.add_column("verdict", no_wrap=True)
    table.add_column("reason", overflow="fold")
    colours = {"PASS": "green", "FAIL": "red", "ERROR": "red", "ABORTED": "yellow", "UNSEALED": "yellow",
               "INTERRUPTED": "yellow"}
    for row in shown:
        colour = colours.get(row.verdict, "white")
        table.add_row(row.name, Text(row.verdict, style=colour), Text(row.reason))
    console.print(table)
    if len(rows) > limit:
        console.print(f"{len(rows) - limit} older bundles not shown (--limit)")


