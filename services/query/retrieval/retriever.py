"""The read path end to end: the routes run concurrently on their own connections, each behind a
breaker and a timeout; RRF fuses them; the graph route walks from the fused seeds; the candidates
are loaded in one query and post-processed (``postprocess``). A route that fails, times out or is
quarantined is skipped and reported in the diagnostics, never fatal.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg

from domain.errors import InvalidCommandError
from domain.rules.commitments import reads_as
from infra.embedders import Embedder, model_loaded
from infra.settings import RetrievalSettings
from projections.text import loaded as text_loaded
from projections.text import query_terms, warm_up
from services.query.readmodels import ReadModels
from services.query.retrieval.breaker import Breakers, machine_load
from services.query.retrieval.candidates import alert_partners, load_arbitrations, load_candidates
from services.query.retrieval.fuzzy import FuzzyRoute
from services.query.retrieval.graph import GraphRoute
from services.query.retrieval.nearest import NearestRoute
from services.query.retrieval.postprocess import Outcome, PendingWrite, Tuning, process, slot_key
from services.query.retrieval.present import ConversationPrior, asks_about_now
from services.query.retrieval.query import GENERIC_PLANS, Hits, RetrievalQuery, Route, RouteContext
from services.query.retrieval.results import (
    Alerts,
    ContradictionAlert,
    Diagnostics,
    Match,
    RetrievalResult,
    RetrievedCard,
    RouteReport,
)
from services.query.retrieval.scoring import Candidate, DecayPolicy, ScopeBoost, by_score, rrf
from services.query.retrieval.semantic import SemanticRoute
from services.query.retrieval.slots import SlotFinder, SlotHits
from services.query.retrieval.tags import TagsRoute
from services.query.retrieval.temporal import TemporalRoute

log = logging.getLogger(__name__)

ROUTES = ("semantic", "tags", "fuzzy", "temporal", "graph")

#: Candidates loaded before the first ranking: at least this many, or this many per result asked.
LOAD_FIRST, LOAD_PER_RESULT = 40, 8


def tuning(settings: RetrievalSettings) -> Tuning:
    return Tuning(
        decay=DecayPolicy(settings.decay_single_value, settings.decay_multi_value,
                          settings.decay_event, settings.decay_knowledge,
                          floor=settings.decay_floor, bounded=settings.decay == "bounded"),
        boosts=ScopeBoost(settings.boost_current_project, settings.boost_personal,
                          settings.boost_group, settings.boost_global),
        rrf_k=settings.rrf_k, top_n=settings.top_n, aging_days=settings.aging_days,
        knowledge_stale_days=settings.knowledge_stale_days, weights=weights(settings),
        slot_items=settings.slot_items,
        conversation=ConversationPrior(settings.decay_conversation, settings.decay_conversation_floor,
                                       settings.conversation_matter_share,
                                       enabled=settings.conversation_recency))


def weights(settings: RetrievalSettings) -> dict[str, float]:
    """Each route's weight in the fusion, the slot stage's included."""
    return {name: getattr(settings, f"weight_{name}") for name in (*ROUTES, "slots")}


class Retriever:
    """One per process: it holds the breakers' windows and the routes' thread pool
    (``route_threads``)."""

    def __init__(self, read: ReadModels, schema: str, settings: RetrievalSettings,
                 embedder: Embedder | None, *, vector_search: bool = True,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.read = read
        self.settings = settings
        self.ctx = RouteContext(schema, settings)
        self.tuning = tuning(settings)
        self.monotonic = monotonic
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

    def warm_up(self) -> None:
        """Load the tokenizer and the embedding model now, not inside the first query's budget."""
        warm_up()
        for route in self.routes:
            if isinstance(route, SemanticRoute):
                route.vector("warm up 暖身")

    def search(self, tenant_id: str, query: RetrievalQuery,
               pending: Sequence[PendingWrite] = ()) -> RetrievalResult:
        started = time.perf_counter()
        reports = {name: RouteReport(status="unavailable", detail=why)
                   for name, why in self.unavailable.items()}
        # read before the routes run: a write projected while they run is then overlaid (it may
        # also be found; the overlay skips what was), never missed by both
        projected = self._projected(tenant_id) if pending else None
        found = self._run(tenant_id, query, [*self.routes, self.slots], reports,
                          self.settings.route_timeout_ms)
        found |= self._probe(tenant_id, query, found, reports)
        rankings = {name: hits.ranking() for name, hits in found.items()}
        fused = rrf(rankings, self.settings.rrf_k, self.tuning.weights)
        walked = {name: hits.ranking() for name, hits in self._run(
            tenant_id, query, [self.graph], reports, self.settings.graph_budget_ms,
            seeds=by_score(fused)[:self.settings.graph_seeds]).items()}
        for card_id, score in rrf(walked, self.settings.rrf_k, self.tuning.weights).items():
            fused[card_id] = fused.get(card_id, 0.0) + score  # RRF adds up per route
        rankings |= walked
        named = found.get("slots")
        leads = named.leads if isinstance(named, SlotHits) else ()
        with self.read.tenant(tenant_id, GENERIC_PLANS) as conn:
            unprojected = [w for w in pending if projected is None or w.position > projected]
            if not query.as_of:
                kept = [w for w in unprojected if query.keeps(
                    w.candidate.subject, w.agent_id, w.session_id)]
                fused |= fresh_scores(kept, query, leads, fused)
            present = asks_about_now(query)

            def rank(candidates: dict[UUID, Candidate]) -> Outcome:
                return process(rankings, candidates, now=query.reference_time, as_of=query.as_of,
                               current_project=query.project_id, tuning=self.tuning,
                               pending=unprojected, top=query.top_n, decay_at=decay_at(query),
                               explain=query.explain, fused=fused, leads=leads, present=present)

            first = list(named.ids) if named is not None and leads else []
            outcome, records = self._load_and_rank(conn, query, fused, rank, first)
            match: Match = "strong" if outcome.ranked else "none"
            if not outcome.ranked:  # nothing matched: the nearest the tenant has, marked weak
                rankings = {name: hits.ranking() for name, hits in self._run(
                    tenant_id, query, [self.nearest], reports, self.settings.route_timeout_ms,
                    probe=True).items()}
                fused = rrf(rankings, self.settings.rrf_k)
                outcome, records = self._load_and_rank(conn, query, fused, rank)
                match = "weak" if outcome.ranked else "none"
            chosen = [outcome.candidates[card_id] for card_id, _ in outcome.ranked]
            arbitrations = load_arbitrations(
                conn, self.ctx, query, [records[c.card_id]["aggregate_id"] for c in chosen
                                        if c.card_id in records])
        slots = reports.pop("slots", None)
        return RetrievalResult(
            query=query.text, now=query.now,
            valid_at=query.window[0] if query.as_of else None,
            known_at=query.window[1] if query.as_of else None,
            results=self._cards(outcome, records, pending, query), match=match,
            alerts=Alerts(
                contradictions=[ContradictionAlert(card_ids=c.card_ids, reason=c.reason)
                                for c in outcome.contradictions],
                arbitrations=arbitrations, aging_facts=outcome.aging, stale_knowledge=outcome.stale),
            diagnostics=Diagnostics(routes=reports, slots=slots, projected_position=projected,
                                    overlaid_writes=len(unprojected),
                                    candidates_found=len(fused), candidates_loaded=len(records),
                                    total_ms=round((time.perf_counter() - started) * 1000, 2)))

    def _projected(self, tenant_id: str) -> int:
        with self.read.tenant(tenant_id, GENERIC_PLANS) as conn:
            return self.read.position(conn, tenant_id)

    def _probe(self, tenant_id: str, query: RetrievalQuery, found: dict[str, Hits],
               reports: dict[str, RouteReport]) -> dict[str, Hits]:
        """A question whose routes found too little (fewer cards than it asks for) runs the
        quarantined routes as its probes: a quarantine must not leave an answer empty."""
        quarantined = [r for r in [*self.routes, self.slots] if reports.get(r.name) is not None
                       and reports[r.name].status == "quarantined"]
        if not quarantined:
            return {}
        found_cards = {card_id for hits in found.values() for card_id in hits.ids}
        if len(found_cards) >= (query.top_n or self.tuning.top_n):
            return {}
        return self._run(tenant_id, query, quarantined, reports, self.settings.route_timeout_ms,
                         probe=True)

    def _load_and_rank(self, conn: psycopg.Connection[Any], query: RetrievalQuery,
                       fused: dict[UUID, float], rank: Callable[[dict[UUID, Candidate]], Outcome],
                       first: Sequence[UUID] = ()) -> tuple[Outcome, dict[UUID, dict[str, Any]]]:
        """Load the candidates — the named slots' cards (``first``), then the best fused — and
        only as many as can still reach the top: decay never raises a score and no card is
        boosted more than the query's largest scope boost, so a card left unloaded scores at most
        its fused score times that boost. While the last card chosen on its score does not beat
        that for the best card left, as many again are loaded. Then the cards that would share an
        alert with a chosen one (its slot, a ``contradicts`` edge) are loaded too. ``explain``
        loads every candidate, for the trace."""
        order = list(dict.fromkeys([*first, *by_score(fused)]))
        top = query.top_n or self.tuning.top_n
        loaded = len(order) if query.explain else max(LOAD_FIRST, LOAD_PER_RESULT * top) + len(first)
        candidates, records = load_candidates(conn, self.ctx, query, order[:loaded])
        outcome = rank(candidates)
        largest = self.tuning.boosts.largest(query.project_id)
        while loaded < len(order) and (len(outcome.ranked) < top or _last_scored(outcome)
                                       <= fused.get(order[loaded], 0.0) * largest):
            more, more_records = load_candidates(conn, self.ctx, query, order[loaded:2 * loaded])
            candidates, records, loaded = candidates | more, records | more_records, 2 * loaded
            outcome = rank(candidates)
        rest = order[loaded:]
        if not rest:
            return outcome, records
        chosen = [card_id for card_id, _ in outcome.ranked if card_id in records]
        slots = [records[card_id]["aggregate_id"] for card_id in chosen
                 if outcome.candidates[card_id].is_single_state]
        partners = alert_partners(conn, self.ctx, chosen, slots, rest)
        if not partners:
            return outcome, records
        more, more_records = load_candidates(conn, self.ctx, query, partners)
        return rank(candidates | more), records | more_records

    def _cards(self, outcome: Outcome, records: dict[UUID, dict[str, Any]],
               pending: Sequence[PendingWrite], query: RetrievalQuery) -> list[RetrievedCard]:
        written = {w.candidate.card_id: w for w in pending}
        cards = []
        for card_id, score in outcome.ranked:
            card = outcome.candidates[card_id]
            record = records.get(card_id) or _pending_record(written[card_id])
            superseded = card.superseded or bool(record.get("superseded"))
            cards.append(RetrievedCard(**{
                **record, "superseded": superseded, "valid_to": card.valid_to,
                "status": reads_as(record.get("memory_type"), record.get("status"),
                                   record.get("due_at"), query.reference_time),
                "score": round(score, 6),
                "explain": outcome.trace.get(card_id) if query.explain else None}))
        return cards

    def _run(self, tenant_id: str, query: RetrievalQuery, routes: Sequence[Route],
             reports: dict[str, RouteReport], budget_ms: float, probe: bool = False,
             **extra: Any) -> dict[str, Hits]:
        """Run ``routes`` side by side, each within ``budget_ms``; a quarantined one is skipped
        unless it is its turn to probe (or ``probe``: the others found too little)."""
        futures: dict[str, Future[Called]] = {}
        for route in routes:
            if probe or self.breakers.allow(route.name, self.monotonic()):
                futures[route.name] = self.pool.submit(self._call, route, tenant_id, query, budget_ms,
                                                       extra)
            else:
                reports[route.name] = RouteReport(status="quarantined",
                                                  detail="slow in 3 of its last 10 calls; probing")
        wait(futures.values(), timeout=budget_ms / 1000 + 0.05)
        rankings = {}
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
                log.warning("route %s failed: %s", name, exc)
                continue
            if called.sample:
                self._record(name, called.ms)
            reports[name] = RouteReport(status="ok", hits=len(called.hits.ids), ms=round(called.ms, 2),
                                        detail=called.hits.note)
            rankings[name] = called.hits
        return rankings

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


def decay_at(query: RetrievalQuery) -> datetime:
    """A question that names a time is about that time: decay counts to the end of the latest
    range it names (never past the reference time); otherwise to the reference time."""
    try:
        ranges = query.time_ranges
    except InvalidCommandError:
        ranges = []
    return min([query.reference_time, *(r.end for r in ranges[-1:])])


def _last_scored(outcome: Outcome) -> float:
    """The lowest score among the cards chosen on their score (the named slots' lead whatever
    their scores)."""
    scored = [score for card_id, score in outcome.ranked if card_id not in outcome.led]
    return min(scored, default=float("inf"))


def _pending_record(write: PendingWrite) -> dict[str, Any]:
    c = write.candidate
    return {"card_id": c.card_id, "aggregate_id": c.card_id, "kind": c.kind, "memory_type": "fact",
            "scope": c.scope, "project_id": c.project_id, "group_id": c.group_id, "subject": c.subject,
            "label": c.label, "cardinality": c.cardinality, "value": c.value, "title": None,
            "status": None, "valid_from": c.valid_from, "valid_to": c.valid_to,
            "occurred_at": c.occurred_at, "recorded_at": c.recorded_at, "verified_at": c.verified_at,
            "superseded": c.superseded, "source": "pending", "agent_id": write.agent_id,
            "inference_confidence": None, "due_at": None, "owner": None}


def fresh_scores(unprojected: Sequence[PendingWrite], query: RetrievalQuery,
                 leads: Sequence[Any], fused: dict[UUID, float]) -> dict[UUID, float]:
    """The caller's writes the read models do not hold yet, that no route could find, scored as
    the best card found: those in a slot the question names, or sharing one of its terms (in the
    subject, label or value). What they supersede, if anything, the overlay marks."""
    terms = set(query_terms(query.text))
    named = set(leads)
    best = max(fused.values(), default=1.0)
    scores = {}
    for write in unprojected:
        card = write.candidate
        if card.card_id in fused:
            continue
        words = query_terms(" ".join(filter(None, (card.subject, card.label, card.value))))
        if (card.is_single_state and slot_key(card) in named) or terms.intersection(words):
            scores[card.card_id] = best
    return scores
