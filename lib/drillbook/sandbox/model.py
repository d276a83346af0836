"""Simulated LLM inference: a fixed number of GPU slots shared by tenants, tokens streamed at a set rate.

The server reports ready only after its model-load delay (cold start). Scheduling is
iteration-level, as in servers with continuous batching: a generation holds a slot for one chunk
of tokens at a time and queues again for the next. Slots go fairly (the waiting tenant holding
the fewest slots, then the one served least) or, with the no-fair-sharing defect, first come
first served, so one tenant's flood delays everyone queued behind it. Metrics (queue wait, slot
utilisation, GPU-seconds per tenant) are served in Prometheus text format at /metrics.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter as PromCounter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from drillbook.config import Defect
from drillbook.sandbox.exposition import metrics_body
from drillbook.sandbox.service import HEADER_INTERNAL_TOKEN, ServiceContext, run_service

WORDS = ("agent", "plan", "tool", "state", "token", "reply", "model", "step", "check", "done",
         "read", "write", "search", "think", "result", "answer")


@dataclass
class _Waiter:
    tenant: str
    arrival: int
    future: asyncio.Future[None]


@dataclass
class SlotScheduler:
    """GPU slots as a counted resource with per-tenant queues.

    fair=True: a freed slot goes to the waiting tenant that holds the fewest slots, then to the one
    served least so far, then the oldest request (max-min fair). fair=False: strictly in arrival
    order, so a tenant that floods the queue delays everyone behind it.
    """

    slots: int
    fair: bool = True
    held: Counter[str] = field(default_factory=Counter)
    served: Counter[str] = field(default_factory=Counter)
    queues: dict[str, deque[_Waiter]] = field(default_factory=dict)
    _arrivals: itertools.count = field(default_factory=itertools.count)

    @property
    def in_use(self) -> int:
        return sum(self.held.values())

    def queue_depth(self, tenant: str) -> int:
        return len(self.queues.get(tenant, ()))

    def _waiting(self) -> int:
        return sum(len(q) for q in self.queues.values())

    async def acquire(self, tenant: str) -> None:
        if self.in_use < self.slots and self._waiting() == 0:
            self._grant(tenant)
            return
        waiter = _Waiter(tenant, next(self._arrivals), asyncio.get_running_loop().create_future())
        self.queues.setdefault(tenant, deque()).append(waiter)
        try:
            await waiter.future
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():
                self.release(tenant)  # granted and cancelled in the same tick: hand it on
            elif waiter in self.queues[tenant]:
                self.queues[tenant].remove(waiter)
            raise

    def release(self, tenant: str) -> None:
        self.held[tenant] -= 1
        if self.held[tenant] <= 0:
            del self.held[tenant]
        self._dispatch()

    def _next_tenant(self) -> str | None:
        candidates = [(t, q[0]) for t, q in self.queues.items() if q]
        if not candidates:
            return None
        if self.fair:
            return min(candidates, key=lambda c: (self.held.get(c[0], 0), self.served[c[0]], c[1].arrival))[0]
        return min(candidates, key=lambda c: c[1].arrival)[0]

    def _dispatch(self) -> None:
        while self.in_use < self.slots:
            tenant = self._next_tenant()
            if tenant is None:
                return
            waiter = self.queues[tenant].popleft()
            if waiter.future.done():  # its request was cancelled while queued: skip it
                continue
            self._grant(tenant)
            waiter.future.set_result(None)

    def _grant(self, tenant: str) -> None:
        self.held[tenant] += 1
        self.served[tenant] += 1


def generated_tokens(prompt: str, count: int) -> list[str]:
    """Deterministic pseudo-text for a prompt, so replies are reproducible."""
    seed = hashlib.sha256(prompt.encode("utf-8")).digest()
    return [WORDS[seed[i % len(seed)] % len(WORDS)] for i in range(count)]


class ModelMetrics:
    """Queue wait, slot utilisation and GPU-seconds per tenant, in one registry per process."""

    def __init__(self, scheduler: SlotScheduler) -> None:
        self.registry = CollectorRegistry()
        self.started = time.monotonic()
        self.busy_seconds = 0.0
        self.queue_wait = Histogram(
            "drillbook_model_queue_wait_seconds", "Time a chunk of a generation waited for a GPU slot", ["tenant"],
            registry=self.registry, buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.gpu_seconds = PromCounter("drillbook_model_gpu_seconds", "Slot-seconds used", ["tenant"], registry=self.registry)
        self.requests = PromCounter("drillbook_model_requests", "Generations served", ["tenant"], registry=self.registry)
        self.tokens = PromCounter("drillbook_model_tokens", "Tokens generated", ["tenant"], registry=self.registry)
        Gauge("drillbook_model_slots", "GPU slots", registry=self.registry).set(scheduler.slots)
        busy = Gauge("drillbook_model_slots_busy", "GPU slots in use", registry=self.registry)
        busy.set_function(lambda: scheduler.in_use)
        utilisation = Gauge("drillbook_model_slot_utilisation_ratio",
                            "Busy slot-seconds over available slot-seconds since start", registry=self.registry)
        utilisation.set_function(
            lambda: self.busy_seconds / max(1e-9, scheduler.slots * (time.monotonic() - self.started))
        )
        self.queue_depth = Gauge("drillbook_model_queue_depth", "Generations waiting for a slot", ["tenant"],
                                 registry=self.registry)
        self.ready = Gauge("drillbook_model_ready", "1 once the model is loaded", registry=self.registry)


class ModelServer:
    def __init__(self, ctx: ServiceContext) -> None:
        config = ctx.runtime.config
        self.internal_token = ctx.runtime.internal_token
        self.rate = config.tokens_per_second
        self.chunk = config.chunk_tokens
        self.default_tokens = config.max_tokens
        self.load_delay = config.effective_model_load_delay_s
        self.scheduler = SlotScheduler(config.gpu_slots, fair=not config.has(Defect.NO_FAIR_SHARING))
        self.metrics = ModelMetrics(self.scheduler)
        self.loaded = asyncio.Event()

    async def load_model(self, app: web.Application) -> None:
        async def load() -> None:
            await asyncio.sleep(self.load_delay)
            self.loaded.set()
            self.metrics.ready.set(1)

        app["loader"] = asyncio.create_task(load())

    async def ready(self, request: web.Request) -> web.Response:
        if not self.loaded.is_set():
            return web.json_response({"ready": False, "reason": "model loading"}, status=503)
        return web.json_response({"ready": True})

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"alive": True})

    async def metrics_text(self, request: web.Request) -> web.Response:
        """Per tenant for the platform's own services (the internal token); summed over tenants for
        anyone else, as the gateway does: the inference tier is shared, and its volumes per tenant
        are the tenants' business."""
        for tenant in list(self.scheduler.queues):
            self.metrics.queue_depth.labels(tenant).set(self.scheduler.queue_depth(tenant))
        return web.Response(body=metrics_body(self.metrics.registry, request.headers, self.internal_token),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def generate(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get(HEADER_INTERNAL_TOKEN) != self.internal_token:
            return web.json_response({"error": "unauthorised"}, status=401)
        if not self.loaded.is_set():
            return web.json_response({"error": "model loading"}, status=503)
        body = await request.json()
        tenant = str(body.get("tenant") or "anonymous")
        prompt = str(body.get("prompt", ""))
        count = int(body.get("max_tokens") or self.default_tokens)
        stream = bool(body.get("stream", False))
        self.metrics.requests.labels(tenant).inc()
        tokens = generated_tokens(prompt, count)
        if stream:
            response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
            await response.prepare(request)
            waited = 0.0
            for chunk_start in range(0, len(tokens), self.chunk):
                chunk = tokens[chunk_start:chunk_start + self.chunk]
                waited += await self._run_chunk(tenant, len(chunk), on_token=lambda i, c=chunk: response.write(
                    (json.dumps({"token": c[i]}) + "\n").encode()))
            await response.write(json.dumps({"done": True, "tokens": len(tokens), "queue_wait_s": waited}).encode()
                                 + b"\n")
            await response.write_eof()
            return response
        waited = 0.0
        for chunk_start in range(0, len(tokens), self.chunk):
            waited += await self._run_chunk(tenant, len(tokens[chunk_start:chunk_start + self.chunk]))
        return web.json_response({"text": " ".join(tokens), "tokens": len(tokens), "queue_wait_s": waited})

    async def _run_chunk(self, tenant: str, size: int, on_token: Any = None) -> float:
        """Queue for a slot, hold it while `size` tokens are generated at the set rate, release it."""
        queued = time.monotonic()
        await self.scheduler.acquire(tenant)
        started = time.monotonic()
        self.metrics.queue_wait.labels(tenant).observe(started - queued)
        try:
            for index in range(size):
                if self.rate > 0:
                    delay = started + (index + 1) / self.rate - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                if on_token is not None:
                    await on_token(index)
        finally:
            held = time.monotonic() - started
            self.metrics.busy_seconds += held
            self.metrics.gpu_seconds.labels(tenant).inc(held)
            self.metrics.tokens.labels(tenant).inc(size)
            self.scheduler.release(tenant)
        return started - queued


async def create_app(ctx: ServiceContext) -> web.Application:
    server = ModelServer(ctx)
    app = web.Application()
    app.on_startup.append(server.load_model)
    app.router.add_get("/ready", server.ready)
    app.router.add_get("/healthz", server.healthz)
    app.router.add_get("/metrics", server.metrics_text)
    app.router.add_post("/v1/generate", server.generate)
    return app


def main(argv: list[str] | None = None) -> None:
    run_service("model", create_app, argv)


if __name__ == "__main__":
    main()
