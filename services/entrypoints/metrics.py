"""``/metrics``: request latency per endpoint, each retrieval route's latency and breaker state,
projector lag and parked events, in Prometheus' text format (``prometheus_client``).

Latencies are histograms; the rest is read when scraped: the breakers from the retriever, the log
head, lag and parked events from the projection's bookkeeping (``projections.status.read_status``).
Under ``serve``'s HTTP workers the histograms are prometheus_client's multiprocess kind: each
worker writes its own file in the folder ``PROMETHEUS_MULTIPROC_DIR`` names (``serve`` makes one
per start) and a scrape, whichever worker takes it, sums every worker's, a worker restarted
included; the breakers are the scraped worker's.

A scrape shows the whole log's head and every projection's lag, other tenants' activity included,
so it is not public: :func:`authorize_scrape` lets in a key holding ``memory:admin``, or the
bearer token ``PALIMPSEST_METRICS_TOKEN`` names (what Prometheus is given instead of a key).
"""

from __future__ import annotations

import hmac
import logging
import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from infra.redact import described
from services.entrypoints import schemas as s
from services.keys import require

if TYPE_CHECKING:
    from services.bootstrap import Services

log = logging.getLogger(__name__)

#: Route reports that measured the route (the others did not run it).
_RAN = ("ok", "timeout", "error")


def authorize_scrape(services: Services, secret: str | None) -> None:
    """Let a scrape in with the metrics token of the settings, or a key holding ``memory:admin``;
    AuthenticationError (401) without a live key, PermissionDeniedError (403) without the scope."""
    token = services.settings.metrics_token
    expected = token.get_secret_value() if token is not None else ""
    if expected and secret and hmac.compare_digest(secret.encode(), expected.encode()):
        return
    require(services.keys.authenticate(secret), "memory:admin")


class ApiMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, services: Services) -> None:
        self.registry = CollectorRegistry()
        shared = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if shared:  # the histograms live in the folder's files, read by the collector
            MultiProcessCollector(self.registry, path=shared)
        own = None if shared else self.registry
        self.requests = Histogram(
            "palimpsest_http_request_seconds", "HTTP request latency per endpoint.",
            ["method", "endpoint", "status"], registry=own,
            buckets=(0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
        self.routes = Histogram(
            "palimpsest_retrieval_route_seconds", "Latency of each retrieval route in a search.",
            ["route"], registry=own,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.25, 0.5, 1))
        self.registry.register(_Live(services))

    def observe_operation(self, name: str, output: Any) -> None:
        result = output.result if isinstance(output, s.ContextOutput) else output
        if isinstance(result, s.SearchOutput):
            for route, report in result.diagnostics.routes.items():
                if report.status in _RAN:
                    self.routes.labels(route).observe(report.ms / 1000)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class Timing:
    """ASGI middleware: each request's latency, labelled by its route's path template
    (``/v1/cards/{card_id}``), method and status."""

    def __init__(self, app: Any, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = time.perf_counter(), [500]

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = scope.get("route")
            endpoint = getattr(route, "path", None) or (
                "/mcp" if scope["path"].startswith("/mcp") else "unmatched")
            self.metrics.requests.labels(scope["method"], endpoint, str(status[0])).observe(
                time.perf_counter() - started)


class _Live(Collector):
    """What is read when scraped: breakers, log head, projector lag, parked events."""

    def __init__(self, services: Services) -> None:
        self.services = services

    def collect(self) -> Iterator[Metric]:
        runner = self.services.queries.retriever.runner
        breakers = GaugeMetricFamily("palimpsest_retrieval_route_quarantined",
                                     "1 while a retrieval route's breaker holds it out.",
                                     labels=["route"])
        for route, state in runner.breakers.states(runner.monotonic()).items():
            breakers.add_metric([route], 1.0 if state == "quarantined" else 0.0)
        yield breakers
        yield from self._pipeline()

    def _pipeline(self) -> Iterator[Metric]:
        from projections.status import read_status

        if self.services.monitor is None:
            return
        try:
            found = read_status(self.services.monitor, self.services.settings)
        except Exception as exc:  # a scrape reports what it can; the database's state is /ready's
            log.warning("metrics: the projection's bookkeeping could not be read: %s", described(exc))
            return
        yield GaugeMetricFamily("palimpsest_log_head", "Newest notification id in the event log.",
                                value=found.head)
        lag = GaugeMetricFamily("palimpsest_projection_lag", "Newest notification id minus the "
                                "projection's position.", labels=["projection"])
        parked = GaugeMetricFamily("palimpsest_projection_parked", "Events the projection holds "
                                   "parked.", labels=["projection"])
        for projection in found.projections:
            lag.add_metric([projection.name], projection.lag)
            parked.add_metric([projection.name], len(projection.failures))
        yield lag
        yield parked
        if found.relay_lag is not None:
            yield GaugeMetricFamily("palimpsest_relay_lag", "Newest notification id minus the "
                                    "relay's position.", value=found.relay_lag)
