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
    junit: Optional[Path] = typer.Option(None, "--junit", help="Write this game day's runs as JUnit XML here "
                                                               "(also when it is interrupted)."),
    metrics_file: Optional[Path] = typer.Option(None, "--metrics-file", help="Write the game day's verdicts and "
                                                "figures as Prometheus metrics (textfile collector format)."),
    pushgateway: Optional[str] = typer.Option(None, "--pushgateway", help="Push them to this Pushgateway URL."),
    publish: Optional[str] = typer.Option(None, "--publish", help="Afterwards copy the evidence to this "
                                          "object-locked store, s3://bucket/prefix (see `drillbook publish`)."),
) -> None:
    """Run a game day; starts and stops the sandbox when the plan needs one. Exit 0 only if all PASS."""
    from drillbook.config import output_file, results_dir
    from drillbook.gameday import load_plan, plan_path, run_gameday
    from drillbook.shutdown import Interrupted

    path = plan_path(plan)
    checked = load_plan(path, target)  # the whole plan is checked before anything runs
    junit = output_file(junit, "--junit") if junit is not None else None
    metrics_file = output_file(metrics_file, "--metrics-file") if metrics_file is not None else None
    if pushgateway:
        from drillbook.evidence.metrics import pushgateway_ready

        pushgateway_ready(pushgateway)  # refused before anything runs
    store = None
    if publish:
        from drillbook.evidence.objectstore import EvidenceStore

        store = EvidenceStore(publish)  # unreachable or not object-locked: refused before anything runs
    err_console.print(f"[dim]…[/] game day {checked.name} ({path}) on {checked.target}; "
                      f"evidence in {results_dir(results)}", soft_wrap=True)
    try:
        result = run_gameday(
            path, state_dir(state), results, target=target,
            on_start=lambda index, total, name: err_console.print(f"[dim]…[/] [{index}/{total}] {name}"),
            on_done=lambda name, verdict, bundle: err_console.print(
                f"    {name}: [{'green' if verdict == 'PASS' else 'red'}]{verdict}[/]"))
    except Interrupted as stop:
        if junit is not None and stop.bundle is not None:
            stop.outcome.append(f"JUnit XML written to {_write_junit(stop.bundle, junit)}")
        if stop.bundle is not None and (metrics_file is not None or pushgateway):
            stop.outcome.append(_publish(stop.bundle, metrics_file, pushgateway))
        if store is not None and stop.bundle is not None:
            done = store.publish(stop.bundle.parent)
            stop.outcome.append(f"evidence published to {store.location} ({len(done.uploaded)} bundles written)")
        raise
    if junit is not None:
        err_console.print(f"[dim]…[/] JUnit XML written to {_write_junit(result.summary_bundle, junit)}")
    if metrics_file is not None or pushgateway:
        err_console.print(f"[dim]…[/] {_publish(result.summary_bundle, metrics_file, pushgateway)}")
    if store is not None:
        done = store.publish(result.summary_bundle.parent)
        err_console.print(f"[dim]…[/] evidence published to {store.location}: {len(done.uploaded)} bundles written, "
                          f"{len(done.present)} already there, locked until {done.retain_until}", soft_wrap=True)
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


def _publish(summary_bundle: Path, metrics_file: Path | None, pushgateway: str | None) -> str:
    """The game day's verdicts and figures as Prometheus metrics: written, pushed, or both."""
    from drillbook.evidence.catalog import read_row
    from drillbook.evidence.metrics import VerdictMetrics
    from drillbook.evidence.verify import verify_path

    summary = read_row(summary_bundle)
    runs = [read_row(summary_bundle.parent / str(run["bundle"]))
            for run in (summary.summary.metrics.get("runs", []) if summary.summary else [])]
    metrics = VerdictMetrics()
    metrics.add_runs(runs, verify_path(summary_bundle.parent).failed_bundles())
    metrics.add_gameday(summary)
    done = []
    if metrics_file is not None:
        done.append(f"metrics written to {metrics.write(metrics_file)}")
    if pushgateway:
        metrics.push(pushgateway, {"plan": summary.runbook.removeprefix("gameday-"), "target": summary.target})
        done.append(f"metrics pushed to {pushgateway}")
    return "; ".join(done)


def _write_junit(summary_bundle: Path, output: Path) -> Path:
    """The game day's runs (and the runbooks it never ran) as JUnit XML."""
    from drillbook.evidence import junit
    from drillbook.evidence.verify import verify_path

    failed = verify_path(summary_bundle.parent).failed_bundles()
    return junit.write(junit.gameday_suites(summary_bundle, failed), output, name=f"drillbook {summary_bundle.name}")
