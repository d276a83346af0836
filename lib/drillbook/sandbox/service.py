"""How every sandbox service process starts, announces its port and stops gracefully.

A service binds 127.0.0.1 (port 0 unless told otherwise), prints one JSON line ``{"port": N}``
on stdout for the supervisor, logs to stderr, and on SIGTERM stops accepting, lets in-flight
requests finish for a short grace period, and exits.
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

from drillbook.sandbox.runtime import Runtime

AppFactory = Callable[["ServiceContext"], Awaitable[web.Application]]

LOOPBACK = "127.0.0.1"
HEADER_TENANT = "X-Drillbook-Tenant"
HEADER_INTERNAL_TOKEN = "X-Drillbook-Internal-Token"


class ServiceContext:
    """What a service factory gets: the runtime, its replica id, and the control API address."""

    def __init__(self, runtime: Runtime, replica: str, control_url: str) -> None:
        self.runtime = runtime
        self.replica = replica
        self.control_url = control_url


def use_fast_event_loop() -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def parse_service_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runtime", type=Path, required=True)
    parser.add_argument("--replica", required=True)
    parser.add_argument("--control-url", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--host", default=LOOPBACK, help="loopback address to bind (a test kubelet gives each pod one)")
    return parser.parse_args(argv)


async def _serve(factory: AppFactory, args: argparse.Namespace, reuse_port: bool) -> None:
    runtime = Runtime.read(args.runtime)
    app = await factory(ServiceContext(runtime, args.replica, args.control_url))
    # A request whose caller went away is cancelled, as a real server's would be: work for a
    # client that is gone does not pile up behind the next one.
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=5.0, handle_signals=False, handler_cancellation=True)
    await runner.setup()
    if not args.host.startswith("127."):
        raise SystemExit(f"refusing to bind {args.host}: sandbox services bind loopback addresses only")
    site = web.TCPSite(runner, args.host, args.port, reuse_port=reuse_port, backlog=1024)
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
        format=f"%(asctime)s {name} {args.replica} %(levelname)s %(message)s",
    )
    use_fast_event_loop()
    asyncio.run(_serve(factory, args, reuse_port))
