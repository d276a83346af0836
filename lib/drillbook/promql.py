"""SLOs stated as PromQL, asked of a real Prometheus server over its HTTP API.

An SLO query must give one number at the moment it is asked (an instant query): a vector of one
series, or a scalar. Everything else is "not measured", with the reason kept beside the query,
so that such a check fails instead of passing on nothing: no series, several series, NaN (a ratio
over no requests), an error from the server, or no answer. ``$__range`` in a query is replaced by
the length of the run being judged, in whole seconds (at least 1s), so that
``increase(x[$__range])`` covers exactly the run.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from drillbook.errors import TargetUnreachable

RANGE = "$__range"


@dataclass(frozen=True)
class Answer:
    """What Prometheus said to one SLO query: the query as sent, the number (or None and why), when."""

    query: str
    value: float | None
    at: float
    note: str = ""
    server: str = ""

    def record(self) -> dict[str, Any]:
        return asdict(self)


def render(query: str, range_s: float) -> str:
    return query.replace(RANGE, f"{max(1, math.ceil(range_s))}s")


def ready(url: str, what: str = "Prometheus", timeout_s: float = 5.0) -> None:
    """Refuse with one line unless the server at url (Prometheus, a Pushgateway) answers /-/ready."""
    try:
        response = httpx.get(f"{url.rstrip('/')}/-/ready", timeout=timeout_s)
    except httpx.HTTPError as error:
        raise TargetUnreachable(f"{what} at {url} does not answer: {type(error).__name__}: {error}") from None
    if response.status_code != 200:
        raise TargetUnreachable(f"{what} at {url} is not ready: HTTP {response.status_code}")


def instant(url: str, query: str, at: float | None = None, timeout_s: float = 10.0) -> Answer:
    """One instant query; never raises for what the server says or fails to say (see the module)."""
    moment = time.time() if at is None else at
    try:
        response = httpx.get(f"{url.rstrip('/')}/api/v1/query", params={"query": query, "time": f"{moment:.3f}"},
                             timeout=timeout_s)
        body = response.json()
    except (httpx.HTTPError, ValueError) as error:
        return Answer(query, None, moment, f"Prometheus did not answer: {type(error).__name__}", url)
    if body.get("status") != "success":
        return Answer(query, None, moment, f"Prometheus refused the query: {body.get('error', response.status_code)}",
                      url)
    data = body.get("data") or {}
    kind, result = data.get("resultType"), data.get("result")
    if kind == "scalar":
        samples = [result]
    elif kind == "vector":
        samples = [series.get("value") for series in result or []]
    else:
        return Answer(query, None, moment, f"the query gave a {kind}, not one number", url)
    if not samples:
        return Answer(query, None, moment, "the query matched no series (nothing scraped yet, or a wrong name?)",
                      url)
    if len(samples) > 1:
        return Answer(query, None, moment, f"the query gave {len(samples)} series; an SLO query must give one "
                                           "(aggregate it, e.g. with sum)", url)
    value = float(samples[0][1])
    if math.isnan(value):
        return Answer(query, None, moment, "the query gave NaN (a ratio over no samples in the window?)", url)
    return Answer(query, value, moment, "", url)
