"""`drillbook keys new`, `verify`, `report`, `list`: the evidence an auditor reads."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table
from rich.text import Text

from drillbook.cli.app import app, console

keys_app = typer.Typer(no_args_is_help=True, help="Signing keys for evidence manifests.")
app.add_typer(keys_app, name="keys")


@keys_app.command("new")
def keys_new(path: Optional[Path] = typer.Argument(None, help="Where to write the private key "
                                                  "(default ~/.config/drillbook/signing-key.pem)."),
             force: bool = typer.Option(False, "--force", help="Replace an existing key.")) -> None:
    """Create an Ed25519 signing key; manifests are signed whenever a key is configured."""
    from drillbook.config import default_signing_key_path
    from drillbook.evidence import signing

    target = path or default_signing_key_path()
    fingerprint = signing.new_key(target, overwrite=force)
    console.print(f"signing key written to {target} (public key {target}.pub)")
    console.print(f"fingerprint {fingerprint}")
    if path is not None:
        console.print(f"set DRILLBOOK_SIGNING_KEY={target} to sign with it")


def _trusted_keys(public_keys: list[Path]) -> set[str] | None:
    from drillbook.config import signing_key
    from drillbook.evidence import signing

    trusted = {signing.fingerprint(signing.load_public_key(p)) for p in public_keys}
    configured = signing_key()
    if configured is not None:
        trusted.add(signing.fingerprint(signing.load_private_key(configured).public_key()))
    return trusted or None


@app.command("verify")
def verify_command(
    path: Optional[Path] = typer.Argument(None, help="A results folder or one bundle (default: the results folder)."),
    public_key: list[Path] = typer.Option([], "--public-key", help="Trust signatures by this key (repeat)."),
    allow_incomplete: bool = typer.Option(False, "--allow-incomplete",
                                          help="Exit 0 even when some runs were interrupted, killed or never sealed."),
) -> None:
    """Recompute every digest, the chain and the signatures; exit 0 only when everything verifies
    and every run was complete (interrupted, killed and unsealed runs exit 1 unless --allow-incomplete)."""
    from drillbook.config import results_dir
    from drillbook.errors import ConfigError
    from drillbook.evidence import verify_path

    target = path.resolve() if path else results_dir()
    if not target.is_dir():
        raise ConfigError(f"no results folder or bundle at {target}")
    report = verify_path(target, _trusted_keys(public_key))
    for finding in report.findings:
        style = "red" if finding.severity == "error" else "yellow"
        console.print(f"[{style}]{finding.severity.upper()}[/] {finding.bundle}: {finding.kind}: {finding.detail}",
                      soft_wrap=True)
    intact = len(set(report.checked) - {f.bundle for f in report.findings})
    console.print(f"{len(report.checked)} bundles checked, {intact} intact, {len(report.errors)} errors, "
                  f"{len(report.findings) - len(report.errors)} warnings")
    counts = report.counts()
    console.print("by state: " + ", ".join(f"{count} {state}" for state, count in sorted(counts.items())))
    if not report.ok:
        raise typer.Exit(1)
    if report.not_complete and not allow_incomplete:
        console.print(f"{len(report.not_complete)} runs did not end as planned (their evidence is partial): "
                      f"{', '.join(report.not_complete)}; --allow-incomplete accepts them", soft_wrap=True)
        raise typer.Exit(1)


@app.command("report")
def report_command(
    path: Optional[Path] = typer.Argument(None, help="Results folder (default: the results folder)."),
    output: Path = typer.Option(Path("report.html"), "-o", "--output", help="Where to write the HTML page."),
    public_key: list[Path] = typer.Option([], "--public-key", help="Trust signatures by this key (repeat)."),
) -> None:
    """Write one self-contained HTML report of the controls, verdicts, trends and evidence digests."""
    from drillbook.config import results_dir
    from drillbook.errors import ConfigError
    from drillbook.evidence.report import write_report

    target = path.resolve() if path else results_dir()
    if not target.is_dir():
        raise ConfigError(f"no results folder at {target}")
    written = write_report(target, output, _trusted_keys(public_key))
    console.print(f"report written to {written}")


@app.command("list")
def list_command(path: Optional[Path] = typer.Argument(None, help="Results folder."),
                 limit: int = typer.Option(50, help="How many bundles to show.")) -> None:
    """Show evidence bundles, newest first, with their verdicts."""
    from drillbook.config import results_dir
    from drillbook.evidence import list_bundles

    target = path.resolve() if path else results_dir()
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


