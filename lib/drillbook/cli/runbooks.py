"""`drillbook run`: execute a runbook with Papermill on a target and seal its evidence."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from drillbook.cli.app import (
    ObjectiveOption,
    ParticipantOption,
    ReferenceOption,
    ScopeOption,
    StateDirOption,
    app,
    console,
    err_console,
    name_value_pairs,
)
from drillbook.config import state_dir
from drillbook.evidence.summary import SloCheck


@app.command("run")
def run_command(
    runbook: Optional[str] = typer.Argument(None, help="Runbook name from runbooks/ (omit to list them)."),
    target: str = typer.Option("sandbox", help="Target profile: a name from targets/ or a YAML file."),
    parameter: list[str] = typer.Option([], "-p", "--parameter", help="name=value (repeat)."),
    results: Optional[Path] = typer.Option(None, "--results", help="Results folder for the evidence bundle."),
    state: Optional[Path] = StateDirOption,
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what the run would act on (its blast radius) "
                                 "and touch nothing."),
    scope: Optional[str] = ScopeOption,
    participant: list[str] = ParticipantOption,
    objective: list[str] = ObjectiveOption,
    reference: Optional[str] = ReferenceOption,
) -> None:
    """Run a runbook headless and keep its evidence; exit 0 only on PASS."""
    from drillbook.execute import execute
    from drillbook.parameters import available_runbooks, notebook_parameters, runbook_path

    if runbook is None:
        from drillbook import project

        project.require_names(project.RUNBOOKS)
        drills = available_runbooks()
        oncall = [name for name in available_runbooks(oncall=True) if name not in drills]
        for title, names in (("drills (runbooks/)", drills), ("on-call runbooks (runbooks/oncall/)", oncall)):
            if not names:
                continue
            table = Table(title=title)
            table.add_column("runbook")
            table.add_column("parameters")
            for name in names:
                params = notebook_parameters(runbook_path(name))
                table.add_row(name, ", ".join(f"{p.name}={p.default!r}" for p in params.values()
                                              if not p.name.startswith("drillbook_") and p.name != "target"))
            console.print(table)
        return
    from drillbook.config import results_dir
    from drillbook.evidence.exercise import exercise_options
    from drillbook.runspec import resolve_run

    overrides = name_value_pairs(parameter, "-p")
    exercise = exercise_options(scope, participant, objective, reference)
    # bad input stops here, before a kernel starts: the results folder, the runbook, its parameters, the profile
    results = results_dir(results, make=False)  # made once the run's other input and its target are known good
    spec = resolve_run(runbook, target, overrides, state_dir(state), exercise)
    if dry_run:
        from drillbook.blast import blast_radius

        for line in blast_radius(spec):
            console.print(line, markup=False, soft_wrap=True)
        return
    executed = execute(runbook, results=results, spec=spec,
                       on_start=lambda bundle: err_console.print(
                           f"[dim]…[/] running {runbook} on {target}; evidence in {bundle}", soft_wrap=True))
    colour = "green" if executed.verdict == "PASS" else "red"
    console.print(f"{executed.runbook}: [{colour}]{executed.verdict}[/]  evidence {executed.bundle}")
    for check in executed.summary.get("checks", []):
        judged = SloCheck.model_validate({k: v for k, v in check.items() if k != "passed"})
        console.print(f"  {'pass' if judged.passed else 'FAIL'}  {judged.name}: {judged.shown_value()} "
                      f"{judged.comparison} {judged.shown_threshold()}", markup=False)
    if executed.summary.get("reason") and executed.verdict != "PASS":
        console.print(f"  {executed.summary['reason']}", markup=False)
    if executed.verdict != "PASS":
        raise typer.Exit(1)
