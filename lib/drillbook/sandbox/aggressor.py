"""A noisy tenant as a service: floods shared inference through the gateway while it runs.

The supervisor keeps it at zero replicas until a noisy-neighbour experiment scales it up (and its
rollback scales it back to zero). Each replica runs `aggressor_concurrency` sessions sending long
generations without think time, for at most `aggressor_max_s` seconds, then idles: the flood is
bounded in time even if nothing scales it down. /metrics counts what it sent.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from drillbook.config import Defect
from drillbook.sandbox.service import ServiceContext, run_service


class Aggressor:
    def __init__(self, ctx: ServiceContext) -> None:
        config = ctx.runtime.config
        self.gateway = ctx.runtime.gateway_url
        self.tenant = config.aggressor_tenant or config.tenants[-1]
        self.key = ctx.runtime.tenant_keys[self.tenant]
        self.concurrency = config.aggressor_concurrency
        self.tokens = config.aggressor_tokens
        self.max_s = config.aggressor_max_s
        self.idle = config.has(Defect.NOOP_FLOOD)  # ready, and floods nothing
        self.registry = CollectorRegistry()
        self.sent = Counter("drillbook_aggressor_turns", "Turns the aggressor sent", ["outcome"], registry=self.registry)
        self.tasks: list[asyncio.Task[None]] = []

    async def start(self, app: web.Application) -> None:
        self.http = aiohttp.ClientSession(base_url=self.gateway, headers={"Authorization": f"Bearer {self.key}"},
                                          timeout=aiohttp.ClientTimeout(total=120))
        stop_at = time.monotonic() + self.max_s
        self.tasks = [] if self.idle else [asyncio.create_task(self.flood(stop_at)) for _ in range(self.concurrency)]

    async def stop(self, app: web.Application) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.http.close()

    async def flood(self, stop_at: float) -> None:
        session_id: str | None = None
        while time.monotonic() < stop_at:
            try:
                if session_id is None:
                    async with self.http.post("/v1/sessions") as response:
                        session_id = (await response.json())["session_id"] if response.status == 201 else None
                    if session_id is None:
                        await asyncio.sleep(0.2)
                        continue
                async with self.http.post(f"/v1/sessions/{session_id}/turns",
                                          json={"input": "summarise everything", "max_tokens": self.tokens},
                                          headers={"Idempotency-Key": uuid.uuid4().hex}) as response:
                    await response.read()
                    self.sent.labels("ok" if response.status == 200 else str(response.status)).inc()
                    if response.status != 200:
                        await asyncio.sleep(0.1)
            except (aiohttp.ClientError, asyncio.TimeoutError):
                self.sent.labels("error").inc()
                await asyncio.sleep(0.1)

    async def ready(self, request: web.Request) -> web.Response:
        return web.json_response({"ready": True, "tenant": self.tenant})

    async def metrics_text(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})


async def create_app(ctx: ServiceContext) -> web.Application:
    aggressor = Aggressor(ctx)
    app = web.Application()
    app.on_startup.append(aggressor.start)
    app.on_cleanup.append(aggressor.stop)
    app.router.add_get("/ready", aggressor.ready)
    app.router.add_get("/healthz", aggressor.ready)
    app.router.add_get("/metrics", aggressor.metrics_text)
    return app


def main(argv: list[str] | None = None) -> None:
    run_service("aggressor", create_app, argv)


if __name__ == "__main__":
    main()
