"""The `drillbook` command. Every failure reaches the user as one line and an exit code:
2 for bad input (refused before anything is touched), 1 for a failure while running.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from drillbook import __version__
from drillbook.config import SandboxConfig, build, default_pg_dsn, parse_duration, state_dir
from drillbook.errors import DrillbookError

app = typer.Typer(
    name="drillbook", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    help="Executable resilience runbooks for AI-agent platforms, with tamper-evident evidence.",
)
sandbox_app = typer.Typer(no_args_is_help=True, help="The local reference agent platform (127.0.0.1 only).")
app.add_typer(sandbox_app, name="sandbox")

console = Console()
err_console = Console(stderr=True)

StateDirOption = typer.Option(None, "--state-dir", help="Sandbox state directory [env DRILLBOOK_STATE_DIR].")


@app.command()
def version() -> None:
    """Print drillbook's version."""
    console.print(__version__)


@sandbox_app.command("up")
def sandbox_up(
    agents: int = typer.Option(2, help="Agent service replicas."),
    models: int = typer.Option(1, help="Model server replicas."),
    gpu_slots: int = typer.Option(4, help="Concurrent generations per model replica."),
    tokens_per_second: float = typer.Option(200.0, help="Token rate per generation; 0 = no delay."),
    model_load_delay: float = typer.Option(0.3, help="Seconds from model server start to ready."),
    store: str = typer.Option("sqlite", help="State store: sqlite or postgres."),
    dsn: Optional[str] = typer.Option(None, help="PostgreSQL DSN [env DRILLBOOK_PG_DSN]."),
    tenant: list[str] = typer.Option(["tenant-a", "tenant-b"], "--tenant", help="Tenant name (repeat)."),
    rate_limit: float = typer.Option(1000.0, help="Requests per second per tenant at the gateway."),
    gateway_port: int = typer.Option(0, help="Gateway port on 127.0.0.1; 0 picks a free one."),
    defect: list[str] = typer.Option([], "--defect", help="Switch on a built-in defect (repeat): no-fair-sharing, "
                                     "no-retries, no-idempotency, slow-model-load, no-backups."),
    state: Optional[Path] = StateDirOption,
    as_json: bool = typer.Option(False, "--json", help="Print the connection details as JSON."),
) -> None:
    """Start the reference platform and return when every service is ready."""
    from drillbook.sandbox import launcher

    config = build(
        SandboxConfig, agents=agents, models=models, gpu_slots=gpu_slots, tokens_per_second=tokens_per_second,
        model_load_delay_s=model_load_delay, store=store,
        dsn=dsn if dsn is not None else (default_pg_dsn() if store == "postgres" else None),
        tenants=tenant, rate_limit_rps=rate_limit, gateway_port=gateway_port, defects=defect,
    )
    directory = state_dir(state)
    progress = (lambda _: None) if as_json else (lambda line: err_console.print(f"[dim]…[/] {line}"))
    handle = launcher.start(config, directory, progress=progress)
    details = {
        "gateway_url": handle.gateway_url, "control_url": handle.control_url, "supervisor_pid": handle.pid,
        "state_dir": str(handle.state_dir), "tenant_keys": handle.tenant_keys,
        "defects": [d.value for d in config.defects],
    }
    if as_json:
        console.print_json(json.dumps(details))
        return
    table = Table(title="drillbook sandbox is up", show_header=False)
    table.add_row("gateway", handle.gateway_url)
    table.add_row("control API", f"{handle.control_url} (token in {handle.runtime.runtime_file})")
    table.add_row("state", str(handle.state_dir))
    table.add_row("store", config.store)
    table.add_row("defects", ", ".join(details["defects"]) or "none")
    for name, key in handle.tenant_keys.items():
        table.add_row(f"key {name}", key)
    console.print(table)


@sandbox_app.command("status")
def sandbox_status(state: Optional[Path] = StateDirOption,
                   as_json: bool = typer.Option(False, "--json", help="Print the status as JSON.")) -> None:
    """Show services and replicas of the running sandbox (exit 1 when none runs)."""
    from drillbook.sandbox import launcher

    handle = launcher.require(state_dir(state))
    with handle.control() as control:
        status = control.status()
    if as_json:
        console.print_json(json.dumps(status))
        return
    table = Table(title=f"sandbox {status['gateway_url']} (supervisor pid {status['pid']})")
    for column in ("replica", "pid", "state", "restarts", "url"):
        table.add_column(column)
    for name, service in status["services"].items():
        table.add_section()
        table.add_row(f"[bold]{name}[/] {service['ready']}/{service['desired']} ready", "", "", "", "")
        for replica in service["replicas"]:
            table.add_row(replica["id"], str(replica["pid"] or ""), replica["state"], str(replica["restarts"]),
                          replica["url"] or "")
    console.print(table)
    if status["defects"]:
        console.print(f"defects on: {', '.join(status['defects'])}")


@sandbox_app.command("down")
def sandbox_down(state: Optional[Path] = StateDirOption) -> None:
    """Stop the sandbox and every process it started."""
    from drillbook.sandbox import launcher

    directory = state_dir(state)
    if launcher.find(directory) is None:
        console.print(f"no sandbox is running on {directory}")
        return
    report = launcher.stop(directory)
    leftover = launcher.leftover_processes(report)
    if leftover:
        raise DrillbookError(f"processes still running after down: {', '.join(map(str, leftover))}")
    forced = f"; {len(report.forced)} had to be killed" if report.forced else ""
    console.print(f"sandbox stopped: supervisor {report.supervisor_pid} and "
                  f"{len(report.replica_pids)} replicas{forced}")


@sandbox_app.command("smoke")
def sandbox_smoke(
    sessions: int = typer.Option(4, min=1, max=1000, help="Sessions to open."),
    turns: int = typer.Option(6, min=2, max=1000, help="Turns per session."),
    state: Optional[Path] = StateDirOption,
    results: Optional[Path] = typer.Option(None, "--results", help="Results folder for the evidence bundle."),
) -> None:
    """Drive sessions through the sandbox, kill an agent replica midway, verify every turn, keep evidence.

    Starts a sandbox when none is running and stops it again afterwards.
    """
    from drillbook.config import SandboxConfig as Config, project_root, results_dir, signing_key
    from drillbook.evidence import BundleWriter
    from drillbook.sandbox import launcher
    from drillbook.sandbox.smoke import run_smoke, smoke_summary

    directory = state_dir(state)
    handle = launcher.find(directory)
    started_here = handle is None
    say = lambda line: err_console.print(f"[dim]…[/] {line}")  # noqa: E731
    if handle is None:
        say(f"starting a sandbox on {directory}")
        handle = launcher.start(Config(), directory, progress=say)
    runtime = handle.runtime
    secrets = [*runtime.tenant_keys.values(), runtime.control_token, runtime.internal_token]
    with BundleWriter(results_dir(results), "sandbox-smoke", "sandbox", {"sessions": sessions, "turns": turns},
                      secrets=secrets, signing_key=signing_key(), project_root=project_root()) as bundle:
        try:
            bundle.event("smoke_started", gateway=handle.gateway_url)
            result = run_smoke(handle, sessions, turns, progress=say)
            bundle.event("smoke_finished", acknowledged=result.acknowledged)
        finally:
            if started_here:
                launcher.stop(directory, handle=handle)
                say("sandbox stopped")
        summary = smoke_summary(result)
        bundle.write_json("summary.json", summary.to_json())
        bundle.write_text("sandbox/events.jsonl", "".join(json.dumps(e) + "\n" for e in result.events))
    table = Table(title="sandbox smoke", show_header=False)
    table.add_row("sessions", str(result.sessions))
    table.add_row("turns acknowledged", str(result.acknowledged))
    table.add_row("acknowledged turns read back", str(result.verified))
    table.add_row("lost / duplicated", f"{result.lost} / {result.duplicated}")
    table.add_row("broken hash chains", str(result.broken_chains))
    table.add_row("replicas killed", ", ".join(result.killed) or "none")
    recovery = f"{result.replica_recovery_s:.2f}s" if result.replica_recovery_s is not None else "not measured"
    table.add_row("killed replica ready again after", recovery)
    table.add_row("cross-tenant read refused", "yes" if result.cross_tenant_refused else "NO")
    table.add_row("client errors", str(len(result.errors)))
    table.add_row("verdict", "[green]PASS[/]" if result.passed else "[red]FAIL[/]")
    table.add_row("evidence", str(bundle.path))
    console.print(table)
    if not result.passed:
        raise DrillbookError("smoke failed: " + (result.errors[0] if result.errors else "delivery check failed"))


@app.command("load")
def load_command(
    profile: str = typer.Argument(..., help="Load profile from loadtests/ (agent-sessions, noisy-tenant) or a locustfile path."),
    out: Path = typer.Option(..., "--out", help="Folder for Locust's raw files, receipts and the summary."),
    target: str = typer.Option("sandbox", help="Where the workload runs: sandbox (the running one) or url."),
    host: Optional[str] = typer.Option(None, help="Gateway URL when --target url; keys from DRILLBOOK_TENANT_KEYS."),
    users: int = typer.Option(10, help="Concurrent users (agent sessions)."),
    spawn_rate: float = typer.Option(10.0, help="Users started per second."),
    duration: str = typer.Option("30s", help="How long the load runs (30s, 2m, ...)."),
    stop_timeout: str = typer.Option("5s", help="Grace for in-flight turns at the end."),
    processes: int = typer.Option(1, help="Locust processes (--processes)."),
    setting: list[str] = typer.Option([], "--set", help="Profile setting name=value (repeat), e.g. think-time=0.2."),
    state: Optional[Path] = StateDirOption,
) -> None:
    """Run a bounded Locust load against a target, then audit delivery of every acknowledged turn."""
    import os

    from drillbook.config import LoadOptions
    from drillbook.delivery import ReferenceVerifier, audit_delivery
    from drillbook.errors import ConfigError, DeliveryError
    from drillbook.load import locustfile_for, profile_env, run_load
    from drillbook.targets_access import gateway_and_keys

    locustfile = locustfile_for(profile)
    settings = {}
    for item in setting:
        name, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"invalid --set {item!r}: use name=value")
        settings[name.strip()] = value.strip()
    run_time = parse_duration(duration, "--duration")
    options = build(LoadOptions, host=host or "http://127.0.0.1", users=users, spawn_rate=spawn_rate,
                    run_time_s=run_time, stop_timeout_s=parse_duration(stop_timeout, "--stop-timeout"),
                    processes=processes, env=profile_env(settings, run_time))
    gateway, keys = gateway_and_keys(target, host, state_dir(state), os.environ.get("DRILLBOOK_TENANT_KEYS", ""))
    options = options.model_copy(update={"host": gateway})
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  console=err_console, transient=True) as bar:
        task = bar.add_task(f"{locustfile.stem}: {users} users against {gateway}", total=run_time)
        result = run_load(options, locustfile, keys, out,
                          progress=lambda elapsed, total: bar.update(task, completed=min(elapsed, total)))
    verifier = ReferenceVerifier(gateway, keys)
    try:
        delivery = audit_delivery(result.receipts, verifier)
    finally:
        verifier.close()
    table = Table(title=f"load {locustfile.stem}: {result.total_requests} requests, "
                        f"{result.total_failures} failed, {result.wall_s:.1f}s")
    for column in ("request", "requests", "failures", "p50 ms", "p95 ms", "p99 ms"):
        table.add_column(column, justify="right" if column != "request" else "left")
    for row in result.stats.itertuples():
        table.add_row(row.name, str(row.requests), str(row.failures), f"{row.p50_ms:.0f}", f"{row.p95_ms:.0f}",
                      f"{row.p99_ms:.0f}")
    console.print(table)
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
        "wall_s": result.wall_s, "exit_code": result.exit_code, "delivery": summary}, indent=2))
    if not delivery.ok:
        raise DeliveryError(f"delivery failed: {summary['lost']} lost, {summary['duplicated']} duplicated, "
                            f"{summary['out_of_order']} out of order, {summary['broken_chains']} broken chains")


chaos_app = typer.Typer(no_args_is_help=True, help="Chaos Toolkit experiments, rollbacks always.")
app.add_typer(chaos_app, name="chaos")


def _target_configuration(target: str, state: Optional[Path], context: Optional[str], namespace: str,
                          allow_context: list[str], allow_namespace: list[str]) -> dict:
    from drillbook.chaos.runner import kubernetes_configuration, sandbox_configuration
    from drillbook.errors import ConfigError

    if target == "sandbox":
        from drillbook.sandbox import launcher

        directory = state_dir(state)
        launcher.require(directory)
        return sandbox_configuration(directory)
    if target == "kubernetes":
        if not context:
            raise ConfigError("--target kubernetes needs --context")
        return kubernetes_configuration(context, namespace, allow_context, allow_namespace,
                                        state_dir(state).parent / "kubernetes")
    raise ConfigError(f"unknown target {target!r}; use sandbox or kubernetes")


def _variables(items: list[str]) -> dict:
    from drillbook.errors import ConfigError

    variables = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"invalid --var {item!r}: use name=value")
        try:
            variables[name.strip()] = json.loads(value)
        except json.JSONDecodeError:
            variables[name.strip()] = value
    return variables


TargetOption = typer.Option("sandbox", help="sandbox or kubernetes.")
ContextOption = typer.Option(None, "--context", help="kubeconfig context (kubernetes).")
NamespaceOption = typer.Option("default", "--namespace", help="Namespace to act in (kubernetes).")
AllowContextOption = typer.Option([], "--allow-context", help="Context allowed to be acted on (repeat).")
AllowNamespaceOption = typer.Option([], "--allow-namespace", help="Namespace allowed to be acted on (repeat).")


@chaos_app.command("run")
def chaos_run(
    experiment: str = typer.Argument(..., help="ha-replica-loss, noisy-neighbour, cold-start, restore-drill, or a file."),
    target: str = TargetOption,
    var: list[str] = typer.Option([], "--var", help="Override a parameter: name=value (repeat)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder for journal.json and measurements."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print what would be done; touch nothing."),
    state: Optional[Path] = StateDirOption,
    context: Optional[str] = ContextOption,
    namespace: str = NamespaceOption,
    allow_context: list[str] = AllowContextOption,
    allow_namespace: list[str] = AllowNamespaceOption,
) -> None:
    """Run one experiment; rollbacks always run, also on Ctrl-C and SIGTERM. Exit 0 only on PASS."""
    import tempfile

    from drillbook.chaos import plan, run
    from drillbook.chaos.runner import experiment_path, load, parameters_for

    variables = _variables(var)
    path = experiment_path(experiment)
    parameters_for(load(path), path.stem, variables)  # bad input stops here, before anything runs
    configuration = _target_configuration(target, state, context, namespace, allow_context, allow_namespace)
    if dry_run:
        for line in plan(experiment, variables, configuration):
            console.print(line, soft_wrap=True, markup=False)
        return
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
    context: Optional[str] = ContextOption,
    namespace: str = NamespaceOption,
    allow_context: list[str] = AllowContextOption,
    allow_namespace: list[str] = AllowNamespaceOption,
) -> None:
    """Undo every fault a crashed or killed run left in place (from the fault ledger); safe to repeat."""
    from drillbook.chaos import rollback_all

    done = rollback_all(_target_configuration(target, state, context, namespace, allow_context, allow_namespace))
    for line in done:
        console.print(f"undone: {line}", soft_wrap=True, markup=False)
    console.print(f"{len(done)} faults undone" if done else "nothing to roll back")


keys_app = typer.Typer(no_args_is_help=True, help="Signing keys for evidence manifests.")
app.add_typer(keys_app, name="keys")
ResultsOption = typer.Option(None, "--results", help="Results folder [env DRILLBOOK_RESULTS; default ./results].")


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
) -> None:
    """Recompute every digest, the chain and the signatures; exit 0 only when everything verifies."""
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
    if not report.ok:
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

    rows = list_bundles(path.resolve() if path else results_dir())
    if not rows:
        console.print("no evidence bundles yet")
        return
    table = Table(title=f"{len(rows)} bundles")
    for column in ("finished (UTC)", "runbook", "target", "verdict", "bundle"):
        table.add_column(column)
    colours = {"PASS": "green", "FAIL": "red", "ERROR": "red", "ABORTED": "yellow", "UNSEALED": "yellow"}
    for row in rows[:limit]:
        colour = colours.get(row.verdict, "white")
        table.add_row(row.finished_at[:19], row.runbook, row.target, f"[{colour}]{row.verdict}[/]", row.name)
    console.print(table)


def _say(message: str) -> None:
    """One line on stderr, never wrapped: what failed and, where it helps, what to do."""
    sys.stderr.write("drillbook: " + " ".join(message.split()) + "\n")


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the app and turn every failure into one line and an exit code."""
    try:
        code = app(args=argv, prog_name="drillbook", standalone_mode=False)
    except DrillbookError as error:
        _say(str(error))
        sys.exit(error.exit_code)
    except (KeyboardInterrupt, typer.Abort):
        _say("interrupted")
        sys.exit(130)
    except typer.Exit as done:
        sys.exit(done.exit_code)
    except Exception as error:
        # Typer's (vendored) click usage errors: unknown option, bad value, missing argument.
        if hasattr(error, "format_message") and isinstance(getattr(error, "exit_code", None), int):
            if error.format_message():
                _say(error.format_message())
            sys.exit(2)
        raise
    if isinstance(code, int) and code:  # typer.Exit(n) comes back as a return value here
        sys.exit(code)
