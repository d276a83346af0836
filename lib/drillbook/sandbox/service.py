"""How every sandbox service process starts, announces its port and stops gracefully.

Under the sandbox's supervisor a service reads the runtime file, binds 127.0.0.1 (port 0 unless
told otherwise) and prints one JSON line ``{"port": N}`` on stdout for the supervisor. As a
container (deploy/platform, `drillbook sandbox serve SERVICE`) it reads DRILLBOOK_* variables and
binds its pod's addresses on DRILLBOOK_PORT. Either way it logs to stderr, and on SIGTERM stops
accepting, lets in-flight requests finish for a short grace period, and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from pathlib import Path
from typing import Awaitable, Callable

from aiohttp import web

from drillbook.config import HEADER_INTERNAL_TOKEN, service_environment  # noqa: F401 - re-exported to the services
from drillbook.errors import ConfigError
from drillbook.sandbox.runtime import Runtime

AppFactory = Callable[["ServiceContext"], Awaitable[web.Application]]

LOOPBACK = "127.0.0.1"
HEADER_TENANT = "X-Drillbook-Tenant"
CONTAINER_ADDRESS = "0.0.0.0"  # noqa: S104 - a container's own network namespace: its pod address
OUTSIDE_SERVICES = {"aggressor"}  # a tenant's own load, as a client: no part in the platform's internal calls
HEADER_IDEMPOTENCY = "Idempotency-Key"  # a request carrying one may be retried, and is applied once


class ServiceContext:
    """What a service factory gets: the runtime, its replica id, and the control API address."""

    def __init__(self, runtime: Runtime, replica: str, control_url: str) -> None:
        self.runtime = runtime
        self.replica = replica
        self.control_url = control_url

    @property
    def supervised(self) -> bool:
        """Started by the sandbox's supervisor, which prepares the store and answers the control API."""
        return bool(self.control_url)


def use_fast_event_loop() -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def parse_service_args(argv: list[str] | None) -> argparse.Namespace:
    """The supervisor's arguments (--runtime, --replica, --control-url); with none of them the
    service runs as a container, configured by its environment (config.ServiceEnvironment)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--runtime", type=Path)
    parser.add_argument("--replica")
    parser.add_argument("--control-url", default="")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--host", default=LOOPBACK, help="loopback address to bind (a test kubelet gives each pod one)")
    args = parser.parse_args(argv)
    if args.runtime is not None and not args.replica:
        parser.error("--runtime needs --replica")
    return args


def _context(args: argparse.Namespace, name: str) -> tuple[ServiceContext, str, int]:
    """The service's context and the address it binds: the runtime file's sandbox on loopback,
    or a container's environment on every address of its pod."""
    if args.runtime is not None:
        if not args.host.startswith("127."):
            raise SystemExit(f"refusing to bind {args.host}: sandbox services bind loopback addresses only")
        return ServiceContext(Runtime.read(args.runtime), args.replica, args.control_url), args.host, args.port
    env = service_environment(internal=name not in OUTSIDE_SERVICES)
    return ServiceContext(Runtime.from_environment(env), env.replica, ""), CONTAINER_ADDRESS, env.port


async def _serve(name: str, factory: AppFactory, args: argparse.Namespace, reuse_port: bool) -> None:
    context, host, port = _context(args, name)
    app = await factory(context)
    # A request whose caller went away is cancelled, as a real server's would be: work for a
    # client that is gone does not pile up behind the next one.
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=5.0, handle_signals=False, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_port=reuse_port, backlog=1024)
    await site.start()
    port = runner.addresses[0][1]
    sys.stdout.write(json.dumps({"port": port}) + "\n")
    sys.stdout.flush()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    await runner.cleanup()


def run_service(name: str, factory: AppFactory, argv: list[str] | None = None, *, reuse_port: bool = False) -> None:
    """Entry point of a service module: parse arguments, serve until SIGTERM."""
    args = parse_service_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr,
        format=f"%(asctime)s {name} {args.replica or 'container'} %(levelname)s %(message)s",
    )
    use_fast_event_loop()
    try:
        asyncio.run(_serve(name, factory, args, reuse_port))
    except ConfigError as error:
        sys.stderr.write(f"drillbook: {name}: {error}\n")
        raise SystemExit(2) from None
