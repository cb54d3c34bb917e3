"""The first stage of the read path (DESIGN §3): the routes side by side on the thread pool, each in
its own transaction, behind its breaker and within its budget.

:func:`find` runs the first-stage routes (semantic, tags, fuzzy, temporal) together with the slot
stage; a question they answered too little (fewer cards than it asks for) runs the quarantined
ones as its probes: a quarantine must not leave an answer empty. The graph walk (``expand``) and
the nearest cards (``nearest``) run on the same :class:`RouteRunner`. A route that fails, times
out or is quarantined is skipped and reported, never fatal.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import psycopg

from domain.errors import InvalidCommandError
from infra.embedders import model_loaded
from infra.redact import described
from projections.text import loaded as text_loaded
from services.query.readmodels import ReadModels
from services.query.retrieval.breaker import Breakers, machine_load
from services.query.retrieval.query import Hits, RetrievalQuery, Route, RouteContext
from services.query.retrieval.results import RouteReport
from services.query.retrieval.scoring import LeadKey
from services.query.retrieval.slots import SlotHits

log = logging.getLogger(__name__)

ROUTES = ("semantic", "tags", "fuzzy", "temporal", "graph")


@dataclass(frozen=True)
class Found:
    """What routes found: the hits of each route that answered, and a report per route. From the
    slot stage, what the question names: ``leads``, the keys of what leads the answer (the surest
    first), and when something leads, ``named``: the named slots' cards, loaded first."""

    hits: dict[str, Hits]
    reports: dict[str, RouteReport]
    leads: tuple[LeadKey, ...] = ()
    named: tuple[UUID, ...] = ()


def find(runner: RouteRunner, routes: Sequence[Route], tenant_id: str, query: RetrievalQuery,
         unavailable: Mapping[str, str], top: int) -> Found:
    """The first-stage routes and the slot stage (``routes``) within the route timeout, then the
    quarantined ones as probes when all of them found fewer than ``top`` cards. ``unavailable``:
    the routes this server cannot run, and why."""
    budget = runner.ctx.settings.route_timeout_ms
    ran = runner.run(tenant_id, query, routes, budget)
    hits = ran.hits
    reports = {name: RouteReport(status="unavailable", detail=why)
               for name, why in unavailable.items()} | ran.reports
    quarantined = [r for r in routes if reports.get(r.name) is not None
                   and reports[r.name].status == "quarantined"]
    if quarantined and len({card_id for found in hits.values() for card_id in found.ids}) < top:
        probed = runner.run(tenant_id, query, quarantined, budget, probe=True)
        hits, reports = hits | probed.hits, reports | probed.reports
    named = hits.get("slots")
    leads = named.leads if isinstance(named, SlotHits) else ()
    return Found(hits, reports, leads, tuple(named.ids) if named is not None and leads else ())


@dataclass(frozen=True)
class Called:
    """A route's answer and how long it took; ``sample``: whether the breaker counts it (not
    when the route had nothing to look up, nor when the call warmed it up)."""

    hits: Hits
    ms: float
    sample: bool


def resources_loaded() -> bool:
    """The tokenizer and the offline embedding model are loaded: a call that loads them is a
    warm-up, not a sample of the route's health."""
    return text_loaded() and model_loaded()


class RouteRunner:
    """One per retriever: the routes' thread pool (``route_threads``) and their breakers'
    windows."""

    def __init__(self, read: ReadModels, ctx: RouteContext,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        settings = ctx.settings
        self.read = read
        self.ctx = ctx
        self.monotonic = monotonic
        self.breakers = Breakers((*ROUTES, "slots", "nearest"), window=settings.breaker_window,
                                 limit_ms=settings.breaker_p95_ms,
                                 quarantine_s=settings.breaker_quarantine_s,
                                 probe_every_s=settings.breaker_probe_s,
                                 slow_samples=settings.breaker_slow_samples,
                                 load=machine_load, busy_load=settings.breaker_busy_load)
        #: Routes that have run once: a route's first call (connections, plans) warms it up.
        self._warm: set[str] = set()
        self.pool = ThreadPoolExecutor(max_workers=settings.route_threads, thread_name_prefix="route")

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    def run(self, tenant_id: str, query: RetrievalQuery, routes: Sequence[Route], budget_ms: float,
            probe: bool = False, **extra: Any) -> Found:
        """Run ``routes`` side by side, each within ``budget_ms``; a quarantined one is skipped
        unless it is its turn to probe (or ``probe``: the others found too little)."""
        reports: dict[str, RouteReport] = {}
        futures: dict[str, Future[Called]] = {}
        for route in routes:
            if probe or self.breakers.allow(route.name, self.monotonic()):
                futures[route.name] = self.pool.submit(self._call, route, tenant_id, query, budget_ms,
                                                       extra)
            else:
                reports[route.name] = RouteReport(status="quarantined",
                                                  detail="slow in 3 of its last 10 calls; probing")
        wait(futures.values(), timeout=budget_ms / 1000 + 0.05)
        hits: dict[str, Hits] = {}
        for name, future in futures.items():
            if not future.done():
                future.cancel()
                self._record(name, budget_ms)
                reports[name] = RouteReport(status="timeout", ms=budget_ms,
                                            detail=f"no answer within {budget_ms:.0f} ms")
                continue
            try:
                called = future.result()
            except InvalidCommandError as exc:  # the question, not the route: no strike against it
                reports[name] = RouteReport(status="skipped", detail=str(exc))
                continue
            except Exception as exc:  # a failing route is reported, never fatal
                self._record(name, budget_ms)
                reports[name] = RouteReport(status="error", detail=f"{type(exc).__name__}: {exc}")
                log.warning("route %s failed: %s", name, described(exc))
                continue
            if called.sample:
                self._record(name, called.ms)
            reports[name] = RouteReport(status="ok", hits=len(called.hits.ids), ms=round(called.ms, 2),
                                        detail=called.hits.note)
            hits[name] = called.hits
        return Found(hits, reports)

    def _record(self, name: str, ms: float) -> None:
        if self.breakers.record(name, ms, self.monotonic()):
            log.warning("route %s quarantined: slow in %d of its last %d calls while the others "
                        "were not", name, self.breakers[name].slow(), len(self.breakers[name].samples))

    def _call(self, route: Route, tenant_id: str, query: RetrievalQuery, budget_ms: float,
              extra: dict[str, Any]) -> Called:
        started = time.perf_counter()
        if (reason := route.idle(query, **extra)) is not None:
            return Called(Hits([], reason), (time.perf_counter() - started) * 1000, sample=False)
        warm = route.name in self._warm and resources_loaded()
        with self.route_transaction(route, tenant_id, budget_ms) as conn:
            hits = route(conn, query, self.ctx, tenant_id=tenant_id, **extra)
        self._warm.add(route.name)
        return Called(hits, (time.perf_counter() - started) * 1000, sample=warm)

    @contextmanager
    def route_transaction(self, route: Route, tenant_id: str, budget_ms: float | None = None,
                          ) -> Iterator[psycopg.Connection[Any]]:
        """The transaction ``route`` runs in: the tenant and the route's own settings, no
        parallel workers (the routes already run side by side on few cores), and with
        ``budget_ms`` a statement timeout a little beyond it (the caller stops waiting first; the
        server then cancels, and the connection is back in the pool soon after)."""
        settings = {"max_parallel_workers_per_gather": "0", **route.settings(self.ctx)}
        if budget_ms is not None:
            settings["statement_timeout"] = str(int(budget_ms) + 250)
        with self.read.tenant(tenant_id, settings) as conn:
            yield conn
