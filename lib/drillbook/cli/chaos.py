"""`drillbook chaos run` and `drillbook rollback`: experiments with rollbacks always."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.table import Table

from drillbook.cli.app import (
    StateDirOption,
    app,
    console,
    err_console,
    name_value_pairs,
)

if TYPE_CHECKING:
    from drillbook.profile import LoadedProfile

chaos_app = typer.Typer(no_args_is_help=True, help="Chaos Toolkit experiments, rollbacks always.")
app.add_typer(chaos_app, name="chaos")


def _target_configuration(profile: "LoadedProfile", state: Optional[Path]) -> dict:
    """The profile's target, checked (allow-list, running sandbox, tenant keys) before anything runs."""
    from drillbook.chaos.runner import target_configuration
    from drillbook.targets import target_for

    from drillbook.halt import refuse_if_halted

    directory = profile.state_dir(state)
    refuse_if_halted(target_for(profile, directory))  # refuses here: no sandbox running, a context off the
    return target_configuration(profile, directory)    # allow-list, or a halted target


def _variables(items: list[str]) -> dict:
    """--var name=value, the value read as JSON where it is JSON (numbers, booleans), else text."""
    variables: dict = {}
    for name, value in name_value_pairs(items, "--var").items():
        try:
            variables[name] = json.loads(value)
        except json.JSONDecodeError:
            variables[name] = value
    return variables


TargetOption = typer.Option("sandbox", help="Target profile: a name from targets/ or a YAML file.")


@chaos_app.command("run")
def chaos_run(
    experiment: str = typer.Argument(..., help="ha-replica-loss, noisy-neighbour, cold-start, restore-drill, or a file."),
    target: str = TargetOption,
    var: list[str] = typer.Option([], "--var", help="Override a parameter: name=value (repeat)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder for journal.json and measurements."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print what would be done; touch nothing."),
    state: Optional[Path] = StateDirOption,
) -> None:
    """Run one experiment; rollbacks always run, also on Ctrl-C and SIGTERM. Exit 0 only on PASS."""
    import tempfile

    from drillbook.chaos import plan, run
    from drillbook.chaos.runner import experiment_path, load, parameters_for
    from drillbook.profile import load_profile

    variables = _variables(var)
    path = experiment_path(experiment)
    parameters_for(load(path), path.stem, variables)  # bad input stops here, before anything runs
    profile = load_profile(target)
    configuration = _target_configuration(profile, state)
    if dry_run:
        for line in plan(experiment, variables, configuration):
            console.print(line, soft_wrap=True, markup=False)
        return
    from drillbook.runlock import TargetLock

    with TargetLock(profile, f"drillbook chaos run {path.stem}", state):  # refused (exit 2) while held
        run_dir = out or Path(tempfile.mkdtemp(prefix="drillbook-chaos-"))
        err_console.print(f"[dim]…[/] running {experiment} on {target}; journal in {run_dir}")
        result = run(experiment, configuration, run_dir, variables)
    table = Table(title=f"{result.experiment} on {target}: {result.verdict}")
    table.add_column("t+ s", justify="right")
    table.add_column("event")
    start = result.timeline[0]["t"]
    for event in result.timeline:
        detail = " ".join(f"{k}={v}" for k, v in event.items() if k not in {"t", "kind"})
        table.add_row(f"{event['t'] - start:.2f}", f"{event['kind']} {detail}")
    console.print(table)
    for reason in result.reasons:
        console.print(f"- {reason}", soft_wrap=True, markup=False)
    console.print(f"verdict {result.verdict}; journal {run_dir / 'journal.json'}")
    if result.verdict != "PASS":
        raise typer.Exit(1)


@app.command("rollback")
def rollback_command(
    target: str = TargetOption,
    state: Optional[Path] = StateDirOption,
) -> None:
    """Clean up after a crashed or killed run; safe to repeat.

    Stops any load (Locust) whose owner is gone, undoes every fault still open in the fault ledger,
    seals the evidence a killed run left unsealed (verdict ERROR, "runner killed", with every
    file it had written), removing its scratch folder, seals a killed game day's summary (ERROR,
    naming the runbooks that did not end), and stops a sandbox that a killed game day had started."""
    from drillbook.chaos.runner import rollback_profile
    from drillbook.execute import RunsNotSealed, recover_killed_runs
    from drillbook.gameday import recover_killed_gamedays
    from drillbook.processes import PROCESSES, ProcessLedger
    from drillbook.profile import load_profile
    from drillbook.targets.sandbox import SANDBOX_CHILD

    profile = load_profile(target)
    directory = profile.state_dir(state)
    children = ProcessLedger(directory / PROCESSES)
    stopped = children.stop_orphans(besides={SANDBOX_CHILD})  # load first; a platform only once it is put back
    for line in stopped:
        console.print(f"stopped: {line}", soft_wrap=True, markup=False)
    done = rollback_profile(profile, state)
    for line in done:
        console.print(f"undone: {line}", soft_wrap=True, markup=False)
    try:
        sealed, unsealed = recover_killed_runs(profile, directory), []
    except RunsNotSealed as partly:  # a full disk: those runs wait for the next rollback
        sealed, unsealed = partly.sealed, partly.failed
    summaries, waiting = recover_killed_gamedays(directory)  # after their runs: a summary names them
    sealed, unsealed = sealed + summaries, unsealed + waiting
    for line in sealed:
        console.print(f"sealed: {line}", soft_wrap=True, markup=False)
    platforms = children.stop_orphans(kinds={SANDBOX_CHILD})  # a sandbox a killed game day started
    for line in platforms:
        console.print(f"stopped: {line}", soft_wrap=True, markup=False)
    stopped += platforms
    if not (stopped or done or sealed or unsealed):
        console.print("nothing to roll back")
    else:
        console.print(f"{len(stopped)} processes stopped, {len(done)} faults undone, {len(sealed)} bundles sealed")
    if unsealed:
        for line in unsealed:
            err_console.print(f"not sealed: {line}", soft_wrap=True, markup=False)
        raise typer.Exit(1)




@app.command("halt")
def halt_command(
    target: str = TargetOption,
    reason: str = typer.Option("", help="Why: kept with the halt, in every run it stops and in the refusals."),
    operator: str = typer.Option("", help="Who halts (default: this user's login name)."),
    lift: bool = typer.Option(False, "--lift", help="Lift the halt: runs may start again."),
    state: Optional[Path] = StateDirOption,
) -> None:
    """Stop every drill running on a target, from anywhere that reaches it.

    The target keeps the halt (the sandbox: its supervisor; a commands target: beside its watchdog,
    on this machine) and undoes every leased fault at once;
    each run on it sees the halt within half a second and stops (rollbacks run, evidence sealed
    ABORTED "halted by OPERATOR: REASON"); new runs are refused until `drillbook halt --lift`."""
    import getpass

    from drillbook.errors import ConfigError
    from drillbook.profile import load_profile
    from drillbook.targets import target_for
    from drillbook.targets.capabilities import Halting

    profile = load_profile(target)
    found = target_for(profile, profile.state_dir(state))
    if not isinstance(found, Halting):
        raise ConfigError(f"target {profile.name} (kind {profile.kind}) keeps no halt: halt its runs with Ctrl-C "
                          "where they run, then `drillbook rollback`")
    if lift:
        was = found.lift_halt()["was"]
        console.print(f"halt lifted on {profile.name}" + (f" (halted by {was.get('operator')}: {was.get('reason')})"
                                                            if was.get("halted") else " (it was not halted)"),
                      soft_wrap=True, markup=False)
        return
    who = operator.strip() or getpass.getuser()
    done = found.halt(who, reason.strip())
    console.print(f"halted {profile.name} by {who}: {reason.strip() or 'no reason given'}; "
                  f"{len(done.get('undone', []))} leased fault(s) undone; runs on it stop within a second; "
                  "`drillbook halt --lift` lets runs start again", soft_wrap=True, markup=False)
    for line in done.get("undone", []):
        console.print(f"undone: {line}", soft_wrap=True, markup=False)


@app.command("watchdog")
def watchdog_command(
    namespace: list[str] = typer.Option(..., "--namespace", help="A namespace whose Deployments it watches "
                                        "(repeat)."),
    context: str = typer.Option("in-cluster", "--context", help="A context of $KUBECONFIG, or in-cluster (the "
                                "pod's own service account)."),
    interval: float = typer.Option(2.0, "--interval", min=0.2, max=60.0, help="Seconds between rounds."),
    rounds: Optional[int] = typer.Option(None, "--rounds", min=1, help="Stop after this many rounds (default: "
                                         "run until stopped)."),
    alive_file: Optional[Path] = typer.Option(None, "--alive-file", help="Touch this file after every round (a "
                                              "readiness probe's proof that the rounds go on)."),
) -> None:
    """Undo the Kubernetes faults whose leases ran out, from the records on the Deployments alone.

    Meant to run in the cluster (deploy/watchdog), where it outlives any runner: a Deployment a run
    scaled carries the run's lease, renewed while the run lives; once a lease runs out (the runner
    killed, its machine gone) this scales the Deployment back and records the undo on it."""
    import re

    from kubernetes import client

    from drillbook.errors import ConfigError
    from drillbook.kube_leases import watch
    from drillbook.targets.kubernetes import api_client

    for name in namespace:
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", name):
            raise ConfigError(f"--namespace {name[:80]!r} is not a namespace name")
    apps = client.AppsV1Api(api_client(context))
    console.print(f"watching the fault leases on the Deployments of {', '.join(namespace)} every {interval:g} s",
                  soft_wrap=True, markup=False)
    watch(apps, list(namespace), lambda line: console.print(line, soft_wrap=True, markup=False), interval, rounds,
          alive=alive_file.touch if alive_file else None)
