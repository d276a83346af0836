"""The one address clients use: tenant auth, per-tenant rate limits, routing, safe retries, activation.

- ``/v1/sessions...`` needs ``Authorization: Bearer <tenant key>`` (401 otherwise) and goes to
  the agent tier with the tenant in a trusted header; ``/v1/sessions/{id}/sandbox...`` goes to
  the code sandbox tier the same way.
- ``/internal/v1/generate`` needs the internal token and goes to the model tier.
- Endpoints come from the supervisor by long-poll watch, like Endpoints in Kubernetes.
- A request that finds no ready replica is held while the tier starts; a tier scaled to zero is
  scaled to one first (the activator).
- Retries go to another replica: always when the connection could not be made or the replica
  answered 503 (nothing was applied), and after a broken connection only when the request is
  idempotent (GET, or a POST carrying an Idempotency-Key). The no-retries defect turns this off.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from drillbook.config import Defect
from drillbook.sandbox.exposition import metrics_body
from drillbook.sandbox.service import HEADER_IDEMPOTENCY, HEADER_INTERNAL_TOKEN, HEADER_TENANT, ServiceContext, run_service

log = logging.getLogger("drillbook.gateway")

AGENT_TIER = "agent"
MODEL_TIER = "model"
CODEBOX_TIER = "codebox"
HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "authorization",
               HEADER_TENANT.lower(), HEADER_INTERNAL_TOKEN.lower()}
MAX_ATTEMPTS = 6
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
SLOWEST_KEPT = 10
SLOWEST_WINDOW_S = 300.0
STREAMED = ("application/x-ndjson", "text/event-stream")  # relayed as they arrive, never buffered


class NoReadyReplica(Exception):
    """The tier had no ready replica before the request's deadline."""


@dataclass
class Tier:
    """The ready replicas of one service, as last seen from the supervisor."""

    name: str
    desired: int = 0
    endpoints: list[str] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    _next: int = 0

    def update(self, desired: int, endpoints: list[str]) -> None:
        self.desired = desired
        self.endpoints = endpoints
        self.changed.set()
        self.changed = asyncio.Event()

    def pick(self, avoid: set[str]) -> str | None:
        candidates = [url for url in self.endpoints if url not in avoid] or self.endpoints
        if not candidates:
            return None
        self._next = (self._next + 1) % len(candidates)
        return candidates[self._next]


@dataclass
class TokenBucket:
    rate: float
    burst: float
    tokens: float = 0.0
    stamp: float = field(default_factory=time.monotonic)

    def take(self) -> float:
        """0 when a request may pass, else the seconds until one could."""
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _pod_ready(pod: dict[str, Any]) -> bool:
    """Running, not terminating, with an IP and the Ready condition True."""
    status = pod.get("status") or {}
    return (not pod["metadata"].get("deletionTimestamp") and bool(status.get("podIP"))
            and any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or []))


class Gateway:
    def __init__(self, ctx: ServiceContext) -> None:
        runtime = ctx.runtime
        config = runtime.config
        self.ctx = ctx
        self.retries = not config.has(Defect.NO_RETRIES)
        self.activation_timeout = config.activation_timeout_s
        self.tenants_by_key = {key_digest(key): tenant for tenant, key in runtime.tenant_keys.items()}
        share = max(1, config.gateways)
        self.buckets = {tenant: TokenBucket(config.rate_limit_rps / share, config.rate_limit_burst,
                                            tokens=config.rate_limit_burst)
                        for tenant in runtime.tenant_keys}
        self.tiers = {AGENT_TIER: Tier(AGENT_TIER), MODEL_TIER: Tier(MODEL_TIER), CODEBOX_TIER: Tier(CODEBOX_TIER)}
        self.control_headers = {"Authorization": f"Bearer {runtime.control_token}"}
        self.internal_headers = {HEADER_INTERNAL_TOKEN: runtime.internal_token}
        self.activations: dict[str, asyncio.Task[None]] = {}
        self.synced = asyncio.Event()
        self.http: aiohttp.ClientSession | None = None
        self.registry = CollectorRegistry()
        self.requests = Counter("drillbook_gateway_requests", "Client requests by tenant and status",
                                ["tenant", "code"], registry=self.registry)
        self.retried = Counter("drillbook_gateway_retries", "Upstream attempts retried", ["tier"], registry=self.registry)
        self.latency = Histogram("drillbook_gateway_request_seconds", "Client request latency to response headers",
                                 ["tenant"], registry=self.registry, buckets=LATENCY_BUCKETS)
        self.slowest: list[tuple[float, float, str, str]] = []  # (seconds, at, tenant, path), the SLOWEST_KEPT slowest
        self.activated = Counter("drillbook_gateway_activations", "Scale-from-zero activations", ["tier"],
                                 registry=self.registry)

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self, app: web.Application) -> None:
        self.http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=15),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=2),
            auto_decompress=False,
        )
        discovery = self.ctx.runtime.kubernetes
        app["watch"] = asyncio.create_task(self.watch_kubernetes() if discovery else self.watch_endpoints())

    async def stop(self, app: web.Application) -> None:
        app["watch"].cancel()
        for task in self.activations.values():
            task.cancel()
        if self.http is not None:
            await self.http.close()

    async def watch_endpoints(self) -> None:
        """Long-poll the supervisor for ready endpoints; reconnect on any failure."""
        assert self.http is not None
        version = -1
        while True:
            try:
                async with self.http.get(f"{self.ctx.control_url}/v1/endpoints",
                                         params={"after": str(version), "timeout": "20"},
                                         headers=self.control_headers,
                                         timeout=aiohttp.ClientTimeout(total=30)) as response:
                    response.raise_for_status()
                    snapshot = await response.json()
                version = snapshot["version"]
                self.apply_limits(snapshot.get("limits", {}))
                for name, tier in self.tiers.items():
                    info = snapshot["services"].get(name, {"desired": 0, "ready": []})
                    tier.update(info["desired"], [endpoint["url"] for endpoint in info["ready"]])
                self.synced.set()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the supervisor restarting or shutting down
                log.warning("endpoint watch failed: %s", error)
                await asyncio.sleep(0.2)

    def _kube(self, method: str, path: str, **kwargs: Any) -> Any:
        """A request to the Kubernetes API with the runtime's token and CA."""
        import ssl

        assert self.http is not None and self.ctx.runtime.kubernetes is not None
        discovery = self.ctx.runtime.kubernetes
        if not hasattr(self, "_kube_ssl"):
            self._kube_ssl = ssl.create_default_context(cafile=discovery.ca_file)
        headers = {"Authorization": f"Bearer {discovery.token}", **kwargs.pop("headers", {})}
        return self.http.request(method, discovery.server + path, headers=headers, ssl=self._kube_ssl,
                                 timeout=aiohttp.ClientTimeout(total=10), **kwargs)

    async def watch_kubernetes(self, interval_s: float = 0.1) -> None:
        """Poll each tier's Deployment: desired replicas, and the ready addresses of the pods its
        selector matches (pod IP and container port, what Endpoints would hold; the API refuses
        Endpoints with loopback addresses, and the test cluster's pods have those)."""
        from urllib.parse import quote

        discovery = self.ctx.runtime.kubernetes
        assert discovery is not None
        base = f"/namespaces/{discovery.namespace}"
        while True:
            try:
                for tier_name, name in discovery.deployments.items():
                    async with self._kube("GET", f"/apis/apps/v1{base}/deployments/{name}") as response:
                        response.raise_for_status()
                        spec = (await response.json())["spec"]
                    selector = ",".join(f"{k}={v}" for k, v in spec["selector"]["matchLabels"].items())
                    async with self._kube("GET", f"/api/v1{base}/pods?labelSelector={quote(selector)}") as response:
                        response.raise_for_status()
                        pods = (await response.json())["items"]
                    urls = [f"http://{pod['status']['podIP']}:{pod['spec']['containers'][0]['ports'][0]['containerPort']}"
                            for pod in pods if _pod_ready(pod)]
                    tier = self.tiers[tier_name]
                    desired = int(spec.get("replicas") or 0)
                    if (desired, sorted(urls)) != (tier.desired, sorted(tier.endpoints)):
                        tier.update(desired, urls)
                self.synced.set()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the API server restarting
                log.warning("kubernetes discovery failed: %s", error)
            await asyncio.sleep(interval_s)

    def apply_limits(self, limits: dict[str, dict[str, float]]) -> None:
        """Per-tenant limits from the supervisor (shared evenly between gateway replicas)."""
        share = max(1, self.ctx.runtime.config.gateways)
        for tenant, limit in limits.items():
            bucket = self.buckets.get(tenant)
            if bucket is not None and (bucket.rate, bucket.burst) != (limit["rps"] / share, limit["burst"]):
                bucket.rate, bucket.burst = limit["rps"] / share, float(limit["burst"])
                bucket.tokens = min(bucket.tokens, bucket.burst)

    # -- probes and metrics ------------------------------------------------------------------
    async def ready(self, request: web.Request) -> web.Response:
        if not self.synced.is_set():
            return web.json_response({"ready": False, "reason": "no endpoints from the supervisor yet"}, status=503)
        return web.json_response({"ready": True})

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"alive": True})

    async def metrics_text(self, request: web.Request) -> web.Response:
        """Per tenant for the platform's own services; summed over tenants for anyone else (the
        gateway is what clients reach: no tenant learns another's name or volume here)."""
        return web.Response(body=metrics_body(self.registry, request.headers, self.ctx.runtime.internal_token),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    # -- activator ---------------------------------------------------------------------------
    async def _activate(self, tier: Tier) -> None:
        assert self.http is not None
        log.info("activating %s from zero", tier.name)
        self.activated.labels(tier.name).inc()
        # From zero only: what the gateway saw may be stale, and a tier scaled up meanwhile (a
        # rollback, a halt undoing a fault) must not be lowered to one.
        discovery = self.ctx.runtime.kubernetes
        if discovery is not None:
            path = f"/apis/apps/v1/namespaces/{discovery.namespace}/deployments/{discovery.deployments[tier.name]}"
            patch = b'[{"op": "test", "path": "/spec/replicas", "value": 0}, ' \
                    b'{"op": "replace", "path": "/spec/replicas", "value": 1}]'
            async with self._kube("PATCH", path, data=patch,
                                  headers={"Content-Type": "application/json-patch+json"}) as response:
                if response.status == 422:  # not at zero any more: someone else scaled it
                    log.info("%s is no longer at zero; left as it is", tier.name)
                    return
                response.raise_for_status()
            return
        async with self.http.post(f"{self.ctx.control_url}/v1/services/{tier.name}/scale",
                                  json={"replicas": 1, "reason": "activator", "only_from": 0},
                                  headers=self.control_headers) as response:
            response.raise_for_status()

    async def await_ready(self, tier: Tier, deadline: float) -> None:
        """Return once the tier has a ready replica; scale it from zero if needed."""
        await asyncio.wait_for(self.synced.wait(), max(0.0, deadline - time.monotonic()))
        while not tier.endpoints:
            if tier.desired == 0:
                task = self.activations.get(tier.name)
                if task is None or task.done():
                    self.activations[tier.name] = asyncio.create_task(self._activate(tier))
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise NoReadyReplica(f"no ready {tier.name} replica within {self.activation_timeout:.0f}s")
            try:
                await asyncio.wait_for(tier.changed.wait(), min(remaining, 1.0))
            except asyncio.TimeoutError:
                pass

    # -- proxying ----------------------------------------------------------------------------
    async def forward(self, request: web.Request, tier: Tier, headers: dict[str, str],
                      upstream_path: str | None = None) -> web.StreamResponse:
        assert self.http is not None
        body = await request.read()
        idempotent = request.method == "GET" or HEADER_IDEMPOTENCY in request.headers
        deadline = time.monotonic() + self.activation_timeout
        upstream_headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        upstream_headers.update(headers)
        tried: set[str] = set()
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                await self.await_ready(tier, deadline)
            except (NoReadyReplica, asyncio.TimeoutError) as error:
                return web.json_response({"error": str(error) or f"no ready {tier.name} replica"}, status=503)
            base = tier.pick(tried)
            if base is None:
                continue
            may_retry = self.retries and attempt < MAX_ATTEMPTS
            try:
                upstream = await self.http.request(request.method, base + (upstream_path or request.rel_url.path_qs),
                                                   data=body, headers=upstream_headers)
            except aiohttp.ClientConnectorError:
                if not may_retry:
                    return web.json_response({"error": f"{tier.name} replica unreachable"}, status=502)
                await self._before_retry(tier, base, tried, attempt)
                continue
            except (aiohttp.ClientError, asyncio.TimeoutError) as error:
                if not (may_retry and idempotent):
                    return web.json_response({"error": f"{tier.name} replica failed: {type(error).__name__}"}, status=502)
                await self._before_retry(tier, base, tried, attempt)
                continue
            try:
                if upstream.status == 503 and may_retry:
                    await upstream.read()
                    await self._before_retry(tier, base, tried, attempt)
                    continue
                return await self._relay(request, upstream)
            except (aiohttp.ClientError, asyncio.TimeoutError) as error:
                if not (may_retry and idempotent) or request.get("_drillbook_started", False):
                    raise
                log.info("upstream %s broke mid-response (%s); retrying", base, type(error).__name__)
                await self._before_retry(tier, base, tried, attempt)
            finally:
                upstream.release()
        return web.json_response({"error": f"{tier.name} tier failed after {MAX_ATTEMPTS} attempts"}, status=502)

    async def _before_retry(self, tier: Tier, base: str, tried: set[str], attempt: int) -> None:
        tried.add(base)
        self.retried.labels(tier.name).inc()
        await asyncio.sleep(min(0.5, 0.01 * 2 ** attempt))

    async def _relay(self, request: web.Request, upstream: aiohttp.ClientResponse) -> web.StreamResponse:
        headers = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP_HEADERS}
        if upstream.headers.get("Content-Type", "").startswith(STREAMED):
            response = web.StreamResponse(status=upstream.status, headers=headers)
            async for chunk in upstream.content.iter_any():
                if not response.prepared:
                    request["_drillbook_started"] = True
                    await response.prepare(request)
                await response.write(chunk)
            if not response.prepared:
                await response.prepare(request)
            await response.write_eof()
            return response
        return web.Response(status=upstream.status, body=await upstream.read(), headers=headers)

    # -- routes ------------------------------------------------------------------------------
    async def tenant_route(self, request: web.Request) -> web.StreamResponse:
        return await self._tenant_request(request, AGENT_TIER)

    async def sandbox_route(self, request: web.Request) -> web.StreamResponse:
        return await self._tenant_request(request, CODEBOX_TIER)

    async def _tenant_request(self, request: web.Request, tier: str) -> web.StreamResponse:
        auth = request.headers.get("Authorization", "")
        tenant = self.tenants_by_key.get(key_digest(auth.removeprefix("Bearer ").strip())) if auth.startswith("Bearer ") else None
        if tenant is None:
            self.requests.labels("unknown", "401").inc()
            return web.json_response({"error": "missing or unknown API key"}, status=401)
        wait = self.buckets[tenant].take()
        if wait > 0:
            self.requests.labels(tenant, "429").inc()
            return web.json_response({"error": f"rate limit exceeded for tenant {tenant}"}, status=429,
                                     headers={"Retry-After": f"{max(1, round(wait))}"})
        started = time.monotonic()
        response = await self.forward(request, self.tiers[tier], {HEADER_TENANT: tenant, **self.internal_headers})
        took = time.monotonic() - started
        self.requests.labels(tenant, str(response.status)).inc()
        self.latency.labels(tenant).observe(took)
        self.keep_if_slow(took, tenant, request.path)
        return response

    def keep_if_slow(self, took: float, tenant: str, path: str) -> None:
        """Keep the slowest recent requests (within SLOWEST_WINDOW_S) for triage."""
        now = time.time()
        kept = [entry for entry in self.slowest if now - entry[1] <= SLOWEST_WINDOW_S]
        if len(kept) < SLOWEST_KEPT or took > kept[-1][0]:
            kept.append((took, now, tenant, path))
            kept.sort(key=lambda entry: entry[0], reverse=True)
        self.slowest = kept[:SLOWEST_KEPT]

    async def slowest_route(self, request: web.Request) -> web.Response:
        if request.headers.get(HEADER_INTERNAL_TOKEN) != self.ctx.runtime.internal_token:
            return web.json_response({"error": "internal route"}, status=403)
        return web.json_response({"slowest": [{"seconds": took, "at": at, "tenant": tenant, "path": path}
                                              for took, at, tenant, path in self.slowest]})

    async def internal_sandbox_route(self, request: web.Request) -> web.StreamResponse:
        """The agents' code tool: a session's sandbox run, as the tenant the agent names."""
        tenant = request.headers.get(HEADER_TENANT, "")
        if request.headers.get(HEADER_INTERNAL_TOKEN) != self.ctx.runtime.internal_token or not tenant:
            return web.json_response({"error": "unauthorised"}, status=401)
        session = request.match_info["session_id"]
        return await self.forward(request, self.tiers[CODEBOX_TIER], {HEADER_TENANT: tenant, **self.internal_headers},
                                  upstream_path=f"/v1/sessions/{session}/sandbox/runs")

    async def inference_route(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get(HEADER_INTERNAL_TOKEN) != self.ctx.runtime.internal_token:
            return web.json_response({"error": "unauthorised"}, status=401)
        return await self.forward(request, self.tiers[MODEL_TIER], self.internal_headers, upstream_path="/v1/generate")


async def create_app(ctx: ServiceContext) -> web.Application:
    gateway = Gateway(ctx)
    app = web.Application(client_max_size=8 * 1024 * 1024)
    app.on_startup.append(gateway.start)
    app.on_cleanup.append(gateway.stop)
    app.router.add_get("/ready", gateway.ready)
    app.router.add_get("/healthz", gateway.healthz)
    app.router.add_get("/metrics", gateway.metrics_text)
    app.router.add_route("*", "/v1/sessions", gateway.tenant_route)
    app.router.add_route("*", "/v1/sessions/{session_id}/sandbox", gateway.sandbox_route)
    app.router.add_route("*", "/v1/sessions/{session_id}/sandbox/{tail:.*}", gateway.sandbox_route)
    app.router.add_route("*", "/v1/sessions/{tail:.*}", gateway.tenant_route)
    app.router.add_post("/internal/v1/generate", gateway.inference_route)
    app.router.add_post("/internal/v1/sessions/{session_id}/sandbox/runs", gateway.internal_sandbox_route)
    app.router.add_get("/internal/v1/slowest", gateway.slowest_route)
    return app


def main(argv: list[str] | None = None) -> None:
    run_service("gateway", create_app, argv, reuse_port=True)


if __name__ == "__main__":
    main()
