"""`drillbook load`: a bounded Locust run against a target, then the delivery audit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from drillbook.cli.app import (
    StateDirOption,
    app,
    console,
    err_console,
    name_value_pairs,
)
from drillbook.config import build, parse_duration, state_dir


# The options of `drillbook load` by the LoadOptions field each sets, for error lines.
LOAD_OPTIONS = {"users": "--users", "spawn_rate": "--spawn-rate", "run_time_s": "--duration",
                "stop_timeout_s": "--stop-timeout", "workers": "--workers", "master_bind": "--master-bind",
                "master_port": "--master-port"}


@app.command("load")
def load_command(
    profile: str = typer.Argument(..., help="Load profile from loadtests/ (agent-sessions, noisy-tenant) or a locustfile path."),
    out: Path = typer.Option(..., "--out", help="Folder for Locust's raw files, receipts and the summary."),
    target: str = typer.Option("sandbox", help="Target profile: a name from targets/ or a YAML file."),
    users: int = typer.Option(10, help="Concurrent users (agent sessions)."),
    spawn_rate: float = typer.Option(10.0, help="Users started per second."),
    duration: str = typer.Option("30s", help="How long the load runs (30s, 2m, ...)."),
    stop_timeout: str = typer.Option("5s", help="Grace for in-flight turns at the end."),
    workers: int = typer.Option(0, help="Locust workers under a master (Locust's master/worker mode; 0: one "
                                        "process). Their receipts and request logs are merged and all audited."),
    remote_workers: bool = typer.Option(False, "--remote-workers", help="Start no workers: wait for --workers N "
                                        "started elsewhere (pods) and pointed at --master-port."),
    master_bind: str = typer.Option("127.0.0.1", "--master-bind", help="Where the master listens for workers."),
    master_port: int = typer.Option(0, "--master-port", help="The master's port (default: a free one)."),
    setting: list[str] = typer.Option([], "--set", help="Profile setting name=value (repeat), e.g. think-time=0.2."),
    state: Optional[Path] = StateDirOption,
) -> None:
    """Run a bounded Locust load against a target, then audit delivery of every acknowledged turn."""
    from drillbook.config import LoadOptions
    from drillbook.delivery import audit_delivery, open_verifier
    from drillbook.errors import DeliveryError
    from drillbook.load import api_env, locustfile_for, profile_env, run_load
    from drillbook.processes import ProcessLedger
    from drillbook.processes import PROCESSES
    from drillbook.shutdown import Interrupted
    from drillbook.config import usable_folder
    from drillbook.targets import open_target

    settings = name_value_pairs(setting, "--set")
    run_time = parse_duration(duration, "--duration")
    options = build(LoadOptions, names=LOAD_OPTIONS, host="http://127.0.0.1", users=users, spawn_rate=spawn_rate,
                    run_time_s=run_time, stop_timeout_s=parse_duration(stop_timeout, "--stop-timeout"),
                    workers=workers, remote_workers=remote_workers, master_bind=master_bind,
                    master_port=master_port, env=profile_env(settings, run_time))
    locustfile = locustfile_for(profile)
    out = usable_folder(out, "--out", make=False)  # before the target is asked anything
    workload = open_target(target, state_dir(state))
    out = usable_folder(out, "--out")  # made (or refused in one line) before any load starts
    locustfile = workload.profile.locustfile() or locustfile
    gateway, keys = workload.gateway()
    options = options.model_copy(update={"host": gateway, "env": {**options.env, **api_env(workload.api)}})
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  console=err_console, transient=True) as bar:
        task = bar.add_task(f"{locustfile.stem}: {users} users against {gateway}", total=run_time)
        try:
            result = run_load(options, locustfile, keys, out,
                              progress=lambda elapsed, total: bar.update(task, completed=min(elapsed, total)),
                              ledger=ProcessLedger(workload.profile.state_dir(state) / PROCESSES))
        except Interrupted as stop:  # Locust and its children are gone by now (LoadRun.wait)
            stop.outcome.append(f"load stopped; its files are in {out}")
            raise
    with open_verifier(workload.profile, gateway, keys) as verifier:
        delivery = audit_delivery(result.receipts, verifier)
    table = Table(title=f"load {locustfile.stem}: {result.total_requests} requests, "
                        f"{result.total_failures} failed, {result.wall_s:.1f}s")
    for column in ("request", "requests", "failures", "p50 ms", "p95 ms", "p99 ms"):
        table.add_column(column, justify="right" if column != "request" else "left")
    for row in result.stats.itertuples():
        table.add_row(row.name, str(row.requests), str(row.failures), f"{row.p50_ms:.0f}", f"{row.p95_ms:.0f}",
                      f"{row.p99_ms:.0f}")
    console.print(table)
    if result.locust_requests != result.total_requests:
        console.print(f"Locust's own aggregates counted {result.locust_requests} requests; the request log has "
                      f"{result.total_requests}: the figures above are the log's")
    phases = result.by_phase()
    if len(phases):
        phase_table = Table(title="by phase (exact, from the request log)")
        for column in ("phase", "request", "requests", "error rate", "p50 ms", "p95 ms", "p99 ms"):
            phase_table.add_column(column)
        for row in phases.itertuples():
            phase_table.add_row(row.phase, row.name, str(row.requests), f"{row.error_rate:.1%}", f"{row.p50_ms:.1f}",
                                f"{row.p95_ms:.1f}", f"{row.p99_ms:.1f}")
        console.print(phase_table)
    summary = delivery.summary()
    console.print("delivery: " + ", ".join(f"{k} {v}" for k, v in summary.items()))
    (out / "load-summary.json").write_text(json.dumps({
        "profile": locustfile.stem, "requests": result.total_requests, "failures": result.total_failures,
        "locust_requests": result.locust_requests,
        "wall_s": result.wall_s, "exit_code": result.exit_code, "delivery": summary}, indent=2))
    if not delivery.verifiable:
        raise DeliveryError(f"delivery not verifiable: target {workload.name} names no delivery verifier")
    if not delivery.ok:
        raise DeliveryError(f"delivery failed: {summary['lost']} lost, {summary['duplicated']} duplicated, "
                            f"{summary['out_of_order']} out of order, {summary['broken_chains']} broken chains")


