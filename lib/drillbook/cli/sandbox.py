"""`drillbook sandbox up|status|down|smoke`: the local reference agent platform."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from drillbook.cli.app import StateDirOption, app, console, err_console
from drillbook.config import Defect, SandboxConfig, build, default_pg_dsn, state_dir
from drillbook.errors import DrillbookError

sandbox_app = typer.Typer(no_args_is_help=True, help="The local reference agent platform (127.0.0.1 only).")
app.add_typer(sandbox_app, name="sandbox")


# The options of `sandbox up` by the SandboxConfig field each sets, where the names differ.
UP_OPTIONS = {"gpu_slots": "--gpu-slots", "tokens_per_second": "--tokens-per-second",
              "model_load_delay_s": "--model-load-delay", "tenants": "--tenant", "rate_limit_rps": "--rate-limit",
              "gateway_port": "--gateway-port", "defects": "--defect"}


@sandbox_app.command("up")
def sandbox_up(
    agents: int = typer.Option(2, help="Agent service replicas."),
    models: int = typer.Option(1, help="Model server replicas."),
    gpu_slots: int = typer.Option(4, help="Concurrent generations per model replica."),
    tokens_per_second: float = typer.Option(200.0, help="Token rate per generation; 0 = no delay."),
    model_load_delay: float = typer.Option(0.3, help="Seconds from model server start to ready."),
    store: str = typer.Option("sqlite", help="State store: sqlite or postgres."),
    dsn: Optional[str] = typer.Option(None, help="PostgreSQL DSN (env DRILLBOOK_PG_DSN)."),
    tenant: list[str] = typer.Option(["tenant-a", "tenant-b"], "--tenant", help="Tenant name (repeat)."),
    rate_limit: float = typer.Option(1000.0, help="Requests per second per tenant at the gateway."),
    gateway_port: int = typer.Option(0, help="Gateway port on 127.0.0.1; 0 picks a free one."),
    defect: list[str] = typer.Option([], "--defect", help="Switch on a built-in defect (repeat): "
                                     + ", ".join(d.value for d in Defect) + "."),
    state: Optional[Path] = StateDirOption,
    as_json: bool = typer.Option(False, "--json", help="Print the connection details as JSON."),
) -> None:
    """Start the reference platform and return when every service is ready."""
    from drillbook.sandbox import launcher

    config = build(
        SandboxConfig, names=UP_OPTIONS, agents=agents, models=models, gpu_slots=gpu_slots, tokens_per_second=tokens_per_second,
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
    from drillbook.config import SandboxConfig as Config
    from drillbook.config import evidence_settings, results_dir
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
                      secrets=secrets, **evidence_settings()) as bundle:
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
    table.add_row("lost / duplicated", f"{result.delivery.lost} / {result.delivery.duplicated}")
    table.add_row("out of order / broken hash chains",
                  f"{result.delivery.out_of_order} / {result.delivery.broken_chains}")
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


SERVICES = ("gateway", "agent", "model", "aggressor")


@sandbox_app.command("serve")
def sandbox_serve(
    service: str = typer.Argument(..., help="gateway, agent, model or aggressor."),
) -> None:
    """Run one reference-platform service in this process, as a container's entrypoint does
    (deploy/platform): configured by DRILLBOOK_* variables, serving on every address of the pod."""
    import importlib

    if service not in SERVICES:
        err_console.print(f"drillbook: unknown service {service!r}: one of {', '.join(SERVICES)}")
        raise typer.Exit(2)
    importlib.import_module(f"drillbook.sandbox.{service}").main([])
