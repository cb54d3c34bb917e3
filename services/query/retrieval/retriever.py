"""The read path end to end (DESIGN §3), its stages in order, a module each:

1. ``routes`` — the first-stage routes and the slot stage side by side, each on its own
   connection, behind its breaker and a timeout; a route that fails, times out or is quarantined
   is skipped and reported in the diagnostics, never fatal;
2. ``fuse`` — RRF of their rankings, with each route's strengths and weight;
3. ``expand`` — the graph route's walk from the fused seeds, and the caller's writes the read
   models do not hold yet;
4. ``load`` — the candidates, only as many as can still reach the top, ranked as they come;
5. ``rank`` — decay, scope boost, the overlay, superseded cards dropped, the named slots first;
6. ``alerts`` — contradictions, aging facts, stale knowledge, pending arbitrations.

Each stage hands the next a value of its own: ``Found`` (each route's hits), ``Fused`` (each card's
fused score), ``Loaded`` (the rows and their ``Ranked``), ``Alerts``. A card's score is its fused
score (``fuse``, the graph's added in ``expand``) times its decay and its scope boost (``rank``);
``explain`` traces every step. A question nothing matched gets the tenant's nearest cards
(``nearest``), fused, loaded and ranked the same way, and its match is marked weak.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from functools import partial
from typing import Any

import psycopg

from domain.rules.commitments import reads_as
from infra.embedders import Embedder
from infra.settings import RetrievalSettings
from projections.text import warm_up
from services.query.readmodels import ReadModels
from services.query.retrieval.alerts import alerts
from services.query.retrieval.expand import expand
from services.query.retrieval.fuse import fuse
from services.query.retrieval.fuzzy import FuzzyRoute
from services.query.retrieval.graph import GraphRoute
from services.query.retrieval.load import Loaded, load
from services.query.retrieval.nearest import NearestRoute
from services.query.retrieval.query import GENERIC_PLANS, RetrievalQuery, Route, RouteContext
from services.query.retrieval.rank import asked, rank
from services.query.retrieval.results import Diagnostics, Match, RetrievalResult, RetrievedCard
from services.query.retrieval.routes import RouteRunner, find
from services.query.retrieval.scoring import PendingWrite
from services.query.retrieval.semantic import SemanticRoute
from services.query.retrieval.slots import SlotFinder
from services.query.retrieval.tags import TagsRoute
from services.query.retrieval.temporal import TemporalRoute
from services.query.retrieval.tuning import Tuning


class Retriever:
    """One per process: the routes, and what runs them (``runner``: the routes' thread pool and
    their breakers' windows)."""

    def __init__(self, read: ReadModels, schema: str, settings: RetrievalSettings,
                 embedder: Embedder | None, *, vector_search: bool = True,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.read = read
        self.settings = settings
        self.ctx = RouteContext(schema, settings)
        self.tuning = Tuning.from_settings(settings)
        self.unavailable: dict[str, str] = {}
        semantic = SemanticRoute(embedder) if embedder is not None and vector_search else None
        if semantic is None:
            self.unavailable["semantic"] = ("no embedder configured" if embedder is None else
                                            "this server cannot compute vector distances")
        self.slots = SlotFinder(semantic.array if semantic else None,
                                semantic.embedder.embed if semantic else None)
        first: list[Route] = [TagsRoute(self.slots.subjects), FuzzyRoute(), TemporalRoute()]
        self.routes = [semantic, *first] if semantic is not None else first
        self.graph = GraphRoute()
        self.nearest = NearestRoute(semantic)
        self.runner = RouteRunner(read, self.ctx, monotonic)

    def close(self) -> None:
        self.runner.close()

    def warm_up(self) -> None:
        """Load the tokenizer and the embedding model now, not inside the first query's budget."""
        warm_up()
        for route in self.routes:
            if isinstance(route, SemanticRoute):
                route.vector("warm up 暖身")

    def route_transaction(self, route: Route, tenant_id: str,
                          ) -> AbstractContextManager[psycopg.Connection[Any]]:
        """The transaction ``route`` runs in (:meth:`RouteRunner.route_transaction`), for running
        one route by hand."""
        return self.runner.route_transaction(route, tenant_id)

    def search(self, tenant_id: str, query: RetrievalQuery,
               pending: Sequence[PendingWrite] = ()) -> RetrievalResult:
        started = time.perf_counter()
        # read before the routes run: a write projected while they run is then overlaid (it may
        # also be found; the overlay skips what was), never missed by both
        projected = self._projected(tenant_id) if pending else None
        unprojected = [w for w in pending if projected is None or w.position > projected]
        found = find(self.runner, [*self.routes, self.slots], tenant_id, query, self.unavailable,
                     query.top_n or self.tuning.top_n)
        fused = fuse(found.hits, self.tuning)
        fused, walked = expand(self.runner, self.graph, tenant_id, query, fused, self.tuning,
                               unprojected=unprojected, leads=found.leads)
        reports = found.reports | walked.reports
        ranking = partial(rank, asked=asked(query, found.leads, unprojected), tuning=self.tuning)
        with self.read.tenant(tenant_id, GENERIC_PLANS) as conn:
            loaded = load(conn, self.ctx, query, fused, ranking, self.tuning, found.named)
            match: Match = "strong" if loaded.ranked.chosen else "none"
            if not loaded.ranked.chosen:  # nothing matched: the nearest the tenant has, marked weak
                nearest = self.runner.run(tenant_id, query, [self.nearest],
                                          self.settings.route_timeout_ms, probe=True)
                reports |= nearest.reports
                fused = fuse(nearest.hits, self.tuning)
                loaded = load(conn, self.ctx, query, fused, ranking, self.tuning)
                match = "weak" if loaded.ranked.chosen else "none"
            raised = alerts(conn, self.ctx, query, loaded, self.tuning)
        slots = reports.pop("slots", None)
        return RetrievalResult(
            query=query.text, now=query.now,
            valid_at=query.window[0] if query.as_of else None,
            known_at=query.window[1] if query.as_of else None,
            results=_cards(loaded, pending, query), match=match, alerts=raised,
            diagnostics=Diagnostics(routes=reports, slots=slots, projected_position=projected,
                                    overlaid_writes=len(unprojected),
                                    candidates_found=len(fused.scores),
                                    candidates_loaded=len(loaded.records),
                                    total_ms=round((time.perf_counter() - started) * 1000, 2)))

    def _projected(self, tenant_id: str) -> int:
        with self.read.tenant(tenant_id, GENERIC_PLANS) as conn:
            return self.read.position(conn, tenant_id)


def _cards(loaded: Loaded, pending: Sequence[PendingWrite], query: RetrievalQuery) -> list[RetrievedCard]:
    """The chosen cards as an answer shows them: their rows (a pending write's own), as ranked."""
    written = {w.candidate.card_id: w for w in pending}
    ranked, cards = loaded.ranked, []
    for card_id, score in ranked.chosen:
        card = ranked.candidates[card_id]
        record = loaded.records.get(card_id) or _pending_record(written[card_id])
        superseded = card.superseded or bool(record.get("superseded"))
        cards.append(RetrievedCard(**{
            **record, "superseded": superseded, "valid_to": card.valid_to,
            "status": reads_as(record.get("memory_type"), record.get("status"),
                               record.get("due_at"), query.reference_time),
            "score": round(score, 6),
            "explain": ranked.trace.get(card_id) if query.explain else None}))
    return cards


def _pending_record(write: PendingWrite) -> dict[str, Any]:
    c = write.candidate
    return {"card_id": c.card_id, "aggregate_id": c.card_id, "kind": c.kind, "memory_type": "fact",
            "scope": c.scope, "project_id": c.project_id, "group_id": c.group_id, "subject": c.subject,
            "label": c.label, "cardinality": c.cardinality, "value": c.value, "title": None,
            "status": None, "valid_from": c.valid_from, "valid_to": c.valid_to,
            "occurred_at": c.occurred_at, "recorded_at": c.recorded_at, "verified_at": c.verified_at,
            "superseded": c.superseded, "source": "pending", "agent_id": write.agent_id,
            "inference_confidence": None, "due_at": None, "owner": None}
