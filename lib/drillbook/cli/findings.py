"""`drillbook findings add|list`: what was learned after a run, and the remediation owed."""

from __future__ import annotations

from datetime import date, datetime, timezone
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table
from rich.text import Text

from drillbook.cli.app import app, console

findings_app = typer.Typer(no_args_is_help=True, help="Exercise records: findings and remediation items after a run "
                                                      "(the sealed bundle is never touched).")
app.add_typer(findings_app, name="findings")


def _run(results: Path, run: str):  # -> BundleRow
    """The sealed run named by its id (the characters ending its bundle's name), its bundle's
    name or its path; one ConfigError line when none or several match."""
    from drillbook.errors import ConfigError
    from drillbook.evidence import list_bundles

    name = Path(run).name
    rows = list_bundles(results)
    matches = [row for row in rows if name in (row.name, row.run_id)]
    if not matches:
        raise ConfigError(f"no run {run!r} in {results}: give a run id or bundle name from `drillbook list`")
    if len(matches) > 1:
        raise ConfigError(f"{run!r} names {len(matches)} runs in {results}: give the bundle's whole name")
    return matches[0]


def _due(text: str) -> date:
    from drillbook.errors import ConfigError

    try:
        return date.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"--due {text!r} is not a date (YYYY-MM-DD)") from None


@findings_app.command("add")
def findings_add(
    run: str = typer.Argument(..., help="The run: its id (the characters ending its bundle's name), or its bundle."),
    finding: Optional[str] = typer.Option(None, "--finding", help="What was found."),
    remediation: Optional[str] = typer.Option(None, "--remediation", help="What must be done (needs --owner "
                                                                          "and --due)."),
    owner: Optional[str] = typer.Option(None, "--owner", help="Who owns the remediation."),
    due: Optional[str] = typer.Option(None, "--due", help="When it is due (YYYY-MM-DD)."),
    author: Optional[str] = typer.Option(None, "--author", help="Who says so (default: your login name)."),
    results: Optional[Path] = typer.Option(None, "--results", help="Results folder (default: the results folder)."),
) -> None:
    """Add a finding or a remediation item to a run's exercise record.

    The record is appended to records.jsonl beside the ledger, chained and signed like it; the
    sealed bundle is not touched. A FAIL opens a remediation item by itself, and the next passing
    run of its control on its target closes it."""
    import getpass

    from drillbook.config import evidence_settings, results_dir
    from drillbook.errors import ConfigError
    from drillbook.evidence.remediation import FINDING, REMEDIATION, append_record

    if (finding is None) == (remediation is None):
        raise ConfigError("give one of --finding TEXT or --remediation TEXT")
    text = (finding if finding is not None else remediation or "").strip()
    if not text:
        raise ConfigError(f"{'--finding' if finding is not None else '--remediation'} is given an empty text")
    if remediation is not None and (not owner or not due):
        raise ConfigError("--remediation needs --owner NAME and --due YYYY-MM-DD")
    if finding is not None and (owner or due):
        raise ConfigError("--owner and --due belong to a --remediation, not a --finding")
    when = _due(due) if due else None
    folder = results_dir(results, make=False)
    if not folder.is_dir():
        raise ConfigError(f"no results folder at {folder}")
    row = _run(folder, run)
    entry = append_record(folder, row, REMEDIATION if remediation is not None else FINDING, text=text,
                          author=author or getpass.getuser(), owner=owner, due=when,
                          signing_key=evidence_settings()["signing_key"])  # type: ignore[arg-type]
    signed = "signed" if entry.get("signature") else "unsigned (no signing key)"
    console.print(f"{entry['kind']} {entry['seq']} recorded for {row.name} ({row.control} on {row.target}), {signed}, "
                  f"in {folder / 'records.jsonl'}", soft_wrap=True)


@findings_app.command("list")
def findings_list(
    path: Optional[Path] = typer.Argument(None, help="Results folder."),
    only_open: bool = typer.Option(False, "--open", help="Only the items still open."),
) -> None:
    """Show the remediation items, open first, with their age, owner, due date and closing run."""
    from drillbook.cli.evidence import _folder
    from drillbook.evidence import list_bundles
    from drillbook.evidence.remediation import read_records, remediation_items
    from drillbook.evidence.verify import verify_path

    folder = _folder(path)
    records, _ = read_records(folder)
    verification = verify_path(folder)
    items = remediation_items(list_bundles(folder, verification.ledger), records, verification.failed_bundles())
    shown = [item for item in items if item.open or not only_open]
    if not shown:
        console.print(f"no {'open ' if only_open else ''}remediation items in {folder}")
        return
    now = datetime.now(timezone.utc)
    table = Table(title=f"{sum(i.open for i in items)} open, {sum(not i.open for i in items)} closed remediation "
                        f"items in {folder}", title_justify="left")
    for column in ("state", "control", "target", "opened by", "age (days)", "owner", "due", "closed by", "what"):
        table.add_column(column, overflow="fold")
    for item in sorted(shown, key=lambda i: (not i.open, i.opened_at)):
        state = Text("OVERDUE" if item.overdue(now) else ("open" if item.open else "closed"),
                     style="red" if item.open else "green")
        table.add_row(state, item.control, item.target,
                      item.opened_by.run_id if item.opened_by else f"record {item.opened_at}",
                      f"{item.age_days(now):.1f}", item.owner or "-", item.due or "-",
                      item.closed_by.run_id if item.closed_by else "-",
                      "; ".join([*item.actions, *item.findings]) or "-")
    console.print(table)
