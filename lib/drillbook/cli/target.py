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
    runbook: Optional[list[str]] = typer.Option(None, "--runbook", "-r", help="A runbook to ask about (repeat); "
                                                "default: every runbook the profile offers."),
    state: Optional[Path] = StateDirOption,
) -> None:
    """Test the target's contract end to end and say which runbooks can run here and why not.

    Reaches the gateway, tries each tenant key, opens one marked test session, sends one turn and
    reads it back through every mapping, shows what each read-only command returns, and checks
    what each runbook needs. Writes nothing else. Exit 0 when the runbooks asked about (default:
    all the profile offers) can run, 1 otherwise, one reason per runbook.
    """
    from drillbook.access import check_target, declared_needs
    from drillbook.errors import ConfigError
    from drillbook.profile import load_profile

    known = [name for name, _, _ in declared_needs()]
    unknown = [name for name in runbook or [] if name not in known]
    if unknown:
        raise ConfigError(f"invalid --runbook: unknown runbook {unknown[0]!r}; known: {', '.join(known)}")
    loaded = load_profile(profile)
    loaded.tenant_keys()  # a missing key variable is bad input: one line, exit 2
    directory = loaded.state_dir(state)
    report = check_target(loaded, directory, runbooks=runbook or None)
    for title, findings in ((f"target {report.profile} ({report.kind})", report.reachability),
                            ("delivery contract (one marked test session)", report.contract),
                            ("read-only commands and what they returned", report.readings)):
        if findings:
            table = Table(title=title)
            for column in ("check", "result", "detail"):
                table.add_column(column, overflow="fold")
            for finding in findings:
                table.add_row(finding.subject, "[green]ok[/]" if finding.ok else "[red]FAILED[/]", finding.detail)
            console.print(table)
    if report.runbooks:
        runbooks = Table(title="runbooks")
        for column in ("runbook", "can run", "why"):
            runbooks.add_column(column, overflow="fold")
        for finding in report.runbooks:
            verdict = ("[dim]not offered[/]" if finding.subject in report.unoffered
                       else "[green]can run[/]" if finding.ok else "[red]cannot run[/]")
            runbooks.add_row(finding.subject, verdict, finding.detail)
        console.print(runbooks)
    if not report.ok:
        raise typer.Exit(1)
