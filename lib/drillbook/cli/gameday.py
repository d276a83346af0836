"""`drillbook gameday [PLAN]`: every runbook of a plan, in order, with one table of verdicts."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.table import Table

from drillbook.cli.app import (ObjectiveOption, ParticipantOption, ReferenceOption, ScopeOption, StateDirOption, app,
                               console, err_console)
from drillbook.config import state_dir

if TYPE_CHECKING:
    from drillbook.evidence.objectstore import EvidenceStore
    from drillbook.gameday import GameDayPlan
    from drillbook.execute import ExecutedRun


@app.command("gameday")
def gameday_command(
    plan: Optional[str] = typer.Argument(None, help="A plan in gamedays/ or a YAML file (default: default)."),
    results: Optional[Path] = typer.Option(None, "--results", help="Results folder for the evidence bundles."),
    target: Optional[str] = typer.Option(None, "--target", help="Target profile instead of the plan's own."),
    state: Optional[Path] = StateDirOption,
    junit: Optional[Path] = typer.Option(None, "--junit", help="Write this game day's runs as JUnit XML here "
                                                               "(also when it is interrupted)."),
    metrics_file: Optional[Path] = typer.Option(None, "--metrics-file", help="Write the game day's verdicts and "
                                                "figures as Prometheus metrics (textfile collector format)."),
    pushgateway: Optional[str] = typer.Option(None, "--pushgateway", help="Push them to this Pushgateway URL."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what each run would act on and touch nothing."),
    publish: Optional[str] = typer.Option(None, "--publish", help="Afterwards copy the evidence to this "
                                          "object-locked store, s3://bucket/prefix (see `drillbook publish`)."),
    scope: Optional[str] = ScopeOption,
    participant: list[str] = ParticipantOption,
    objective: list[str] = ObjectiveOption,
    reference: Optional[str] = ReferenceOption,
) -> None:
    """Run a game day; starts and stops the sandbox when the plan needs one. Exit 0 only if all PASS."""
    from drillbook.config import output_file, results_dir
    from drillbook.gameday import load_plan, plan_path, run_gameday
    from drillbook.shutdown import Interrupted

    path = plan_path(plan)
    checked = load_plan(path, target)  # the whole plan is checked before anything runs
    from drillbook.evidence.exercise import exercise_options

    exercise = exercise_options(scope, participant, objective, reference, base=checked.exercise)
    if dry_run:
        _print_blast_radius(checked, state)
        return
    junit, metrics_file = output_file(junit, "--junit"), output_file(metrics_file, "--metrics-file")
    if pushgateway:
        from drillbook.evidence.metrics import pushgateway_ready

        pushgateway_ready(pushgateway)  # refused before anything runs
    store = None
    if publish:
        from drillbook.evidence.objectstore import EvidenceStore

        store = EvidenceStore(publish)  # unreachable or not object-locked: refused before anything runs
    err_console.print(f"[dim]…[/] game day {checked.name} ({path}) on {checked.target}; "
                      f"evidence in {results_dir(results, make=False)}", soft_wrap=True)
    try:
        result = run_gameday(
            path, state_dir(state), results, target=target, exercise=exercise,
            on_start=lambda index, total, name: err_console.print(f"[dim]…[/] [{index}/{total}] {name}"),
            on_done=_print_done)
    except Interrupted as stop:
        if stop.bundle is not None:
            stop.outcome.extend(_afterwards(stop.bundle, junit, metrics_file, pushgateway, store))
        raise
    for line in _afterwards(result.summary_bundle, junit, metrics_file, pushgateway, store):
        err_console.print(f"[dim]…[/] {line}", soft_wrap=True)
    table = Table(title=f"game day {result.plan.name} on {result.plan.target}")
    table.add_column("runbook")
    table.add_column("verdict")
    table.add_column(f"evidence (in {result.summary_bundle.parent})", no_wrap=True)
    for runbook, verdict, bundle in result.runs:
        colour = "green" if verdict == "PASS" else "red"
        table.add_row(runbook, f"[{colour}]{verdict}[/]", bundle.name)
    console.print(table)
    colour = "green" if result.passed else "red"
    console.print(f"game day {result.plan.name}: [{colour}]{result.verdict}[/]  summary {result.summary_bundle}",
                  soft_wrap=True)
    if not result.passed:
        raise typer.Exit(1)


def _print_done(run: ExecutedRun) -> None:
    """One runbook's verdict as it ends; under anything but PASS, why (reason and failed checks),
    so that a log tail or a CI job shows the cause without opening the bundle."""
    colour = "green" if run.verdict == "PASS" else "red"
    err_console.print(f"    {run.runbook}: [{colour}]{run.verdict}[/]")
    if run.verdict != "PASS":
        err_console.print(f"      why: {run.why()}", soft_wrap=True, markup=False)


def _afterwards(summary_bundle: Path, junit: Path | None, metrics_file: Path | None, pushgateway: str | None,
                store: "EvidenceStore | None") -> list[str]:
    """What a game day hands on from its own bundle, finished or interrupted: JUnit XML, Prometheus
    metrics (written, pushed) and a copy in the object store; one line for each done. The results
    folder is verified once, for all of them."""
    from drillbook.evidence import junit as junit_xml
    from drillbook.evidence.catalog import gameday_rows
    from drillbook.evidence.metrics import VerdictMetrics
    from drillbook.evidence.verify import verify_path

    done: list[str] = []
    if junit is not None or metrics_file is not None or pushgateway:
        gameday = gameday_rows(summary_bundle)
        failed = verify_path(summary_bundle.parent).failed_bundles()
        if junit is not None:
            written = junit_xml.write(junit_xml.gameday_suites(gameday, failed), junit,
                                      name=f"drillbook {summary_bundle.name}")
            done.append(f"JUnit XML written to {written}")
        if metrics_file is not None or pushgateway:
            metrics = VerdictMetrics()
            metrics.add_gameday(gameday, failed)
            if metrics_file is not None:
                done.append(f"metrics written to {metrics.write(metrics_file)}")
            if pushgateway:
                metrics.push(pushgateway, {"plan": gameday.summary.gameday_plan or summary_bundle.name,
                                           "target": gameday.summary.target})
                done.append(f"metrics pushed to {pushgateway}")
    if store is not None:
        published = store.publish(summary_bundle.parent)
        done.append(f"evidence published to {store.location}: {len(published.uploaded)} bundles written, "
                    f"{len(published.present)} already there, locked until {published.retain_until}")
    return done


def _print_blast_radius(plan: "GameDayPlan", state: Optional[Path]) -> None:
    """Every planned run's blast radius, in order (`gameday --dry-run`); nothing is touched."""
    from drillbook.blast import blast_radius
    from drillbook.profile import load_profile
    from drillbook.runspec import resolve_run

    profile = load_profile(plan.target)
    console.print(f"game day {plan.name} on {profile.name}: {len(plan.runbooks)} run(s), a dry run", markup=False)
    for index, planned in enumerate(plan.runbooks, start=1):
        spec = resolve_run(planned.runbook, profile, {k: str(v) for k, v in planned.parameters.items()},
                           state_dir(state))
        for number, line in enumerate(blast_radius(spec)):
            console.print(f"[{index}] {line}" if number == 0 else f"    {line}", markup=False, soft_wrap=True)
