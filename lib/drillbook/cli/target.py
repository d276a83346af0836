"""`drillbook target list|check`: the target profiles, and whether drillbook can act on one."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from drillbook.cli.app import StateDirOption, app, console

target_app = typer.Typer(no_args_is_help=True, help="Target profiles: where the agent workload runs.")
app.add_typer(target_app, name="target")


@target_app.command("list")
def list_targets() -> None:
    """The profiles in targets/ of the project folder and those drillbook ships."""
    from drillbook.profile import available_profiles, load_profile

    from drillbook import project

    project.require_names(project.TARGETS)
    table = Table(title="target profiles (the project folder's targets/, then drillbook's own)")
    for column in ("name", "kind", "description", "file"):
        table.add_column(column, overflow="fold")
    for name in available_profiles():
        profile = load_profile(name)
        table.add_row(profile.name, profile.kind, profile.spec.description, str(profile.path))
    console.print(table)


@target_app.command("check")
def check(
    profile: str = typer.Argument("sandbox", help="A profile name from targets/ or a YAML file."),
    state: Optional[Path] = StateDirOption,
) -> None:
    """Reach the gateway, try each tenant key, and say which runbooks can run here and why not.

    Read-only. Exit 0 when everything can run, 1 when something cannot.
    """
    from drillbook.access import check_target
    from drillbook.profile import load_profile

    loaded = load_profile(profile)
    loaded.tenant_keys()  # a missing key variable is bad input: one line, exit 2
    directory = loaded.state_dir(state)
    report = check_target(loaded, directory)
    table = Table(title=f"target {report.profile} ({report.kind})")
    table.add_column("check")
    table.add_column("result")
    table.add_column("detail")
    for finding in report.reachability:
        table.add_row(finding.subject, "[green]ok[/]" if finding.ok else "[red]FAILED[/]", finding.detail)
    console.print(table)
    if report.runbooks:
        runbooks = Table(title="runbooks")
        runbooks.add_column("runbook")
        runbooks.add_column("can run")
        runbooks.add_column("why")
        for finding in report.runbooks:
            runbooks.add_row(finding.subject, "[green]can run[/]" if finding.ok else "[red]cannot run[/]",
                             finding.detail)
        console.print(runbooks)
    if not report.ok:
        raise typer.Exit(1)
