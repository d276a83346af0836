"""`drillbook gameday [PLAN]`: every runbook of a plan, in order, with one table of verdicts."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from drillbook.cli.app import StateDirOption, app, console, err_console
from drillbook.config import state_dir


@app.command("gameday")
def gameday_command(
    plan: Optional[str] = typer.Argument(None, help="A plan in gamedays/ or a YAML file (default: default)."),
    results: Optional[Path] = typer.Option(None, "--results", help="Results folder for the evidence bundles."),
    target: Optional[str] = typer.Option(None, "--target", help="Target profile instead of the plan's own."),
    state: Optional[Path] = StateDirOption,
) -> None:
    """Run a game day; starts and stops the sandbox when the plan needs one. Exit 0 only if all PASS."""
    from drillbook.gameday import load_plan, plan_path, run_gameday

    path = plan_path(plan)
    load_plan(path, target)  # the whole plan is checked before anything runs
    result = run_gameday(
        path, state_dir(state), results, target=target,
        on_start=lambda index, total, name: err_console.print(f"[dim]…[/] [{index}/{total}] {name}"),
        on_done=lambda name, verdict, bundle: err_console.print(
            f"    {name}: [{'green' if verdict == 'PASS' else 'red'}]{verdict}[/]"))
    table = Table(title=f"game day {result.plan.name} on {result.plan.target}")
    for column in ("runbook", "verdict", "evidence"):
        table.add_column(column, overflow="fold")
    for runbook, verdict, bundle in result.runs:
        colour = "green" if verdict == "PASS" else "red"
        table.add_row(runbook, f"[{colour}]{verdict}[/]", str(bundle))
    console.print(table)
    console.print(f"game-day summary: {result.summary_bundle}")
    if not result.passed:
        raise typer.Exit(1)
