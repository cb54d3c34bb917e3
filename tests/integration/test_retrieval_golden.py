"""The golden retrieval set (``golden_corpus``) through the real path: commands → event store →
cards projection and embeddings → the five routes → fusion and post-processing.

Quality floors (recall@5, MRR) sit just below what the set measures; the version rules (no
superseded card in a current answer, the right version as of a past moment, a successor above its
predecessor) and the scope rules hold for every question; HNSW ranks like exact cosine.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any
from uuid import UUID

import psycopg
import pytest
from psycopg import sql

from infra.postgres import Database, vector_search_available
from infra.settings import Settings
from projections.vector_index import MIN_ROWS, create_statement, vector_rows
from projections.worker import project_log
from services.command.commands import Merge, WriteResult
from services.command.memory import Palimpsest
from services.factory import create_app, create_queries
from services.query.queries import Queries
from services.query.retrieval import load as load_module
from services.query.retrieval.query import RetrievalQuery, RouteContext
from services.query.retrieval.results import RetrievalResult
from services.query.retrieval.routes import ROUTES
from services.query.retrieval.semantic import SemanticRoute
from tests.integration.golden_corpus import (
    CORPUS,
    NOW,
    QUERIES,
    SUCCESSORS,
    TIME_ZONE,
    Card,
    Golden,
    MergeCard,
)
from tests.support import Clock, new_tenant

pytestmark = pytest.mark.integration

#: Keys of the corpus's state cards of a slot (a subject and a label).
SLOT_CARDS = frozenset(step.key for step in CORPUS if isinstance(step, Card)
                       and step.command.kind == "state" and step.command.label)

#: Measured on this set (71 queries; embedded PostgreSQL 18 with pgvector, USE multilingual v3):
#: recall@5 1.000, MRR 1.000 (every kind 1.000). The floors sit just below; each kind has its own.
RECALL_AT_5_FLOOR = 0.97
MRR_FLOOR = 0.95
KIND_MRR_FLOOR = 0.9
#: The IVFFlat index sized as the projector sizes it (√rows lists over the suite's shared table, the
#: route's 10 probes): 0.94 measured among the whole suite's vectors, 0.98 over this module's alone.
INDEX_OVERLAP_FLOOR = 0.9
#: How deep the version and scope rules look: past the top 5, where a leak would hide.
DEEP = 30


@dataclass
class World:
    tenant: str
    queries: Queries
    ids: dict[str, UUID]
    keys: dict[UUID, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.keys = {card_id: key for key, card_id in self.ids.items()}

    def request(self, golden: Golden, top_n: int | None = None) -> RetrievalQuery:
        return self.queries.query(golden.text, now=NOW, project_id=golden.project_id,
                                  valid_at=golden.valid_at, known_at=golden.known_at, explain=True,
                                  top_n=top_n)

    def search(self, golden: Golden, top_n: int | None = None) -> RetrievalResult:
        return self.queries.search(self.tenant, self.request(golden, top_n))

    def table(self, name: str) -> sql.Composed:
        return sql.SQL("{}.{}").format(sql.Identifier(self.queries.settings.read_schema),
                                      sql.Identifier(name))

    def ranked(self, result: RetrievalResult) -> list[str]:
        return [self.keys.get(card.card_id, f"?{card.card_id}") for card in result.results]


def write_corpus(app: Palimpsest, clock: Clock, tenant: str) -> dict[str, UUID]:
    ids: dict[str, UUID] = {}
    slots: dict[str, UUID] = {}
    for step in sorted(CORPUS, key=lambda s: s.at):
        clock.now = step.at
        if isinstance(step, MergeCard):
            app.merge(tenant, Merge(card_id=ids[step.key], into=ids[step.into]))
            continue
        assert step.key not in ids, f"two cards are keyed {step.key!r}"
        links = tuple(slots.get(key) or ids[key] for key in step.links)
        result: WriteResult = app.remember(tenant, step.command.model_copy(update={"links": links}))
        assert result.outcome == step.outcome, (step.key, result)
        assert result.card_id is not None
        ids[step.key] = result.card_id
        if step.command.kind == "state" and step.command.label:
            slots[step.key] = result.aggregate_id  # type: ignore[assignment]
    return ids


@pytest.fixture(scope="module")
def world(pg_settings: Settings, admin_db: Database) -> Iterator[World]:
    if not vector_search_available(pg_settings):
        pytest.skip("this server cannot compute vector distances: python -m infra.pgvector_build")
    clock = Clock(NOW)
    app = create_app(pg_settings, clock=clock)
    tenant = new_tenant()
    try:
        ids = write_corpus(app, clock, tenant)
        project_log(pg_settings, app, admin_db)
    finally:
        app.close()
    # The breakers guard latency, not ranking: a slow CI machine must not quarantine a route here.
    retrieval = pg_settings.retrieval.model_copy(update={"breaker_p95_ms": 10_000.0,
                                                         "route_timeout_ms": 10_000})
    settings = pg_settings.model_copy(update={"time_zone": TIME_ZONE, "retrieval": retrieval})
    queries = create_queries(settings, clock=lambda: NOW)
    try:
        yield World(tenant, queries, ids)
    finally:
        queries.close()


@pytest.fixture(scope="module")
def answers(world: World) -> list[RetrievalResult]:
    return [world.search(golden) for golden in QUERIES]


@pytest.fixture(scope="module")
def deep_answers(world: World) -> list[RetrievalResult]:
    return [world.search(golden, top_n=DEEP) for golden in QUERIES]


def first_hit(world: World, golden: Golden, result: RetrievalResult) -> int | None:
    """1-based rank of the best expected card, None when none is in the results."""
    ranked = world.ranked(result)
    return next((rank for rank, key in enumerate(ranked, 1) if key in golden.expected), None)


def describe(world: World, golden: Golden, result: RetrievalResult) -> str:
    """What came back, and where the expected card stood on each route (from a deep search)."""
    lines = [f"  {golden.kind:<8} {golden.text!r} (expected {' | '.join(golden.expected)})"]
    for rank, card in enumerate(result.results, 1):
        routes = (card.explain or {}).get("routes", {})
        lines.append(f"      {rank}. {world.keys.get(card.card_id, '?'):<20} {card.score:.5f}  {routes}")
    deep = world.search(golden, top_n=200)
    found = [(rank, card) for rank, card in enumerate(deep.results, 1)
             if world.keys.get(card.card_id) in golden.expected]
    if found:
        rank, card = found[0]
        explain = card.explain or {}
        lines.append(f"      expected {world.keys[card.card_id]} at {rank}: routes {explain.get('routes')}, "
                     f"decay {explain.get('decay', {}).get('factor')}, "
                     f"boost {explain.get('scope_boost', {}).get('factor')}")
    else:
        lines.append("      expected card found by no route")
    lines.append(f"      cosine to the query: {cosines(world, golden)}")
    notes = {name: report.detail for name, report in deep.diagnostics.routes.items()
             if report.detail and name in ("tags", "temporal")}
    if notes:
        lines.append(f"      {notes}")
    return "\n".join(lines)


def cosines(world: World, golden: Golden) -> dict[str, float]:
    route = next(r for r in world.queries.retriever.routes if isinstance(r, SemanticRoute))
    with world.queries.read.tenant(world.tenant) as conn:
        rows = conn.execute(sql.SQL(
            "SELECT card_id, 1 - (embedding <=> %s::vector) AS similarity FROM {} "
            "WHERE card_id = ANY(%s::uuid[])").format(world.table("card_embeddings")),
            (route.vector(golden.text), [world.ids[key] for key in golden.expected])).fetchall()
    return {world.keys[row["card_id"]]: round(row["similarity"], 3) for row in rows}


# ---- the corpus landed as written --------------------------------------------------------------------


def test_the_corpus_is_projected_with_its_versions(world: World) -> None:
    with world.queries.read.tenant(world.tenant) as conn:
        rows = conn.execute(sql.SQL("SELECT card_id, valid_to, merged_into FROM {}").format(
            world.table("cards"))).fetchall()
    cards = {row["card_id"]: row for row in rows}
    assert set(world.ids.values()) <= set(cards)
    closed = {world.keys[card_id] for card_id, row in cards.items()
              if row["valid_to"] is not None or row["merged_into"] is not None}
    assert closed == set(SUCCESSORS)
    assert len(QUERIES) >= 40
    for golden in QUERIES:
        assert set(golden.expected) | set(golden.wrong) <= set(world.ids), golden


# ---- quality: recall@5 and MRR -----------------------------------------------------------------------


def test_recall_at_5_and_mrr(world: World, answers: list[RetrievalResult]) -> None:
    ranks = [first_hit(world, golden, result) for golden, result in zip(QUERIES, answers, strict=True)]
    recall = sum(rank is not None for rank in ranks) / len(ranks)
    mrr = sum(1 / rank for rank in ranks if rank) / len(ranks)
    by_kind: dict[str, list[int | None]] = defaultdict(list)
    for golden, rank in zip(QUERIES, ranks, strict=True):
        by_kind[golden.kind].append(rank)
    print(f"\ngolden retrieval: {len(ranks)} queries, recall@5 {recall:.3f}, MRR {mrr:.3f}")
    kind_mrr: dict[str, float] = {}
    for kind, kind_ranks in by_kind.items():
        hits = sum(rank is not None for rank in kind_ranks)
        kind_mrr[kind] = sum(1 / rank for rank in kind_ranks if rank) / len(kind_ranks)
        print(f"  {kind:<8} {hits}/{len(kind_ranks)}  MRR {kind_mrr[kind]:.3f}")
    misses = [(golden, result, rank) for golden, result, rank in zip(QUERIES, answers, ranks, strict=True)
              if rank != 1]
    if misses:
        print("not first:")
        for golden, result, rank in misses:
            print(f"  rank {rank}:\n" + describe(world, golden, result))
    assert recall >= RECALL_AT_5_FLOOR
    assert mrr >= MRR_FLOOR
    assert {kind: value for kind, value in kind_mrr.items() if value < KIND_MRR_FLOOR} == {}


def slot_question(world: World, golden: Golden) -> bool:
    """A question whose answer is the valid value (or items) of a slot: every expected card is a
    state card of a slot."""
    return all(key in SLOT_CARDS for key in golden.expected)


def test_a_slot_s_valid_value_comes_first_for_every_current_and_as_of_question(
        world: World, answers: list[RetrievalResult]) -> None:
    """hit@1 for every question about a slot's value now, and for every as-of question; and no
    unrelated card above the answer: a multi-value slot's expected items fill the first places."""
    wrong = []
    for golden, result in zip(QUERIES, answers, strict=True):
        if not (golden.as_of or slot_question(world, golden)):
            continue
        ranked = world.ranked(result)
        if golden.as_of:
            if not ranked or ranked[0] not in golden.expected:
                wrong.append((golden.text, ranked))
            continue
        leading = ranked[:len(golden.expected)]
        if set(leading) != set(golden.expected):
            wrong.append((golden.text, ranked))
    assert not wrong, wrong


# ---- versions ----------------------------------------------------------------------------------------


def test_no_superseded_card_in_a_current_answer(world: World, deep_answers: list[RetrievalResult]) -> None:
    predecessors = {world.ids[key] for key in SUCCESSORS}
    for golden, result in zip(QUERIES, deep_answers, strict=True):
        if golden.as_of:
            continue
        leaked = [world.keys[c.card_id] for c in result.results
                  if c.superseded or c.card_id in predecessors]
        assert not leaked, (golden.text, leaked)


def test_as_of_returns_the_version_of_that_moment(world: World, answers: list[RetrievalResult]) -> None:
    for golden, result in zip(QUERIES, answers, strict=True):
        if not golden.as_of:
            continue
        ranked = world.ranked(result)
        assert set(golden.expected) & set(ranked), (golden, ranked)


def test_wrong_versions_and_other_projects_never_come_back(world: World,
                                                            deep_answers: list[RetrievalResult]) -> None:
    for golden, result in zip(QUERIES, deep_answers, strict=True):
        ranked = world.ranked(result)
        assert not set(golden.wrong) & set(ranked), (golden.text, ranked)
        for card in result.results:
            assert card.scope in ("personal", "project"), (golden.text, card)
            if card.scope == "project":
                assert card.project_id == golden.project_id, (golden.text, world.keys[card.card_id])


def test_every_route_reports_on_every_query(answers: list[RetrievalResult]) -> None:
    for result in answers:
        routes = result.diagnostics.routes
        assert set(routes) == set(ROUTES), result.query
        failed = {name: report for name, report in routes.items() if report.status != "ok"}
        assert not failed, (result.query, failed)


# ---- HNSW against exact cosine -----------------------------------------------------------------------


class Recording:
    """A connection that remembers the last statement run on it, so its plan can be read."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.last: tuple[Any, Any] | None = None

    def execute(self, statement: Any, params: Any = None) -> Any:
        self.last = (statement, params)
        return self.conn.execute(statement, params)

    def plan(self) -> str:
        assert self.last is not None
        statement, params = self.last
        if not isinstance(statement, str):
            statement = statement.as_string(self.conn)
        rows = self.conn.execute("EXPLAIN " + statement, params).fetchall()
        return "\n".join(next(iter(row.values())) for row in rows)


def semantic_top(world: World, golden: Golden, *settings: str) -> tuple[list[UUID], str]:
    """The semantic route's top 5 under these planner settings, with no similarity cut (the
    ordering is compared, not the threshold), and the plan it ran."""
    route = next(r for r in world.queries.retriever.routes if isinstance(r, SemanticRoute))
    ctx = world.queries.retriever.ctx
    ctx = RouteContext(ctx.schema, ctx.settings.model_copy(update={"semantic_min_similarity": 0.0}))
    with world.queries.retriever.route_transaction(route, world.tenant) as conn:
        for setting in settings:
            conn.execute(sql.SQL("SET LOCAL {}").format(sql.SQL(setting)))
        recording = Recording(conn)
        hits = route(recording, world.request(golden), ctx)  # type: ignore[arg-type]
        return hits.ids[:5], recording.plan()


@pytest.fixture
def ivfflat(admin_db: Database, pg_settings: Settings) -> Iterator[str]:
    """The IVFFlat index the projector keeps, built now over the shared table (sized as for
    :data:`MIN_ROWS` vectors at least, so that the route's probes see a part of it), dropped after."""
    schema = pg_settings.read_schema
    with admin_db.connect(autocommit=True) as conn:
        rows = max(vector_rows(conn, schema), MIN_ROWS)
        statement = create_statement(schema, "ivfflat", rows, name="golden_ivfflat")
        assert statement is not None
        conn.execute(statement)
        try:
            yield "golden_ivfflat"
        finally:
            conn.execute(sql.SQL("DROP INDEX {}.golden_ivfflat").format(sql.Identifier(schema)))


def test_the_vector_index_ranks_like_exact_cosine(world: World, ivfflat: str) -> None:
    overlaps = []
    for golden in QUERIES:
        # A corpus this small is cheaper to sort than to read through an index: make the planner
        # take it, at the route's own probes.
        approximate, index_plan = semantic_top(world, golden, "enable_seqscan = off",
                                               "enable_bitmapscan = off", "enable_sort = off")
        exact, exact_plan = semantic_top(world, golden, "enable_indexscan = off")
        assert ivfflat in index_plan, index_plan
        assert ivfflat not in exact_plan, exact_plan
        assert len(exact) == 5, (golden.text, exact)
        overlaps.append(len(set(approximate) & set(exact)) / len(exact))
    mean = sum(overlaps) / len(overlaps)
    print(f"\nIVFFlat vs exact cosine: mean top-5 overlap {mean:.3f} over {len(overlaps)} queries")
    assert mean >= INDEX_OVERLAP_FLOOR


# ---- known defects: each flips to a failure (XPASS) once fixed ---------------------------------------


def test_as_of_never_marks_an_event_superseded(world: World, deep_answers: list[RetrievalResult]) -> None:
    events = [(golden.text, world.keys[card.card_id], card.superseded)
              for golden, result in zip(QUERIES, deep_answers, strict=True) if golden.as_of
              for card in result.results if card.kind == "event"]
    assert events
    assert not [event for event in events if event[2]], events


def test_the_graph_walks_from_an_event_to_the_state_it_affected(world: World) -> None:
    result = world.search(Golden("搬家到高雄，租屋處在苓雅區", ("ev_move",), "graph"), top_n=DEEP)
    routes = {world.keys.get(card.card_id): (card.explain or {}).get("routes", {}) for card in result.results}
    assert routes["ev_move"].get("semantic") == 1
    assert "graph" in routes.get("addr_kaohsiung", {}), routes


def test_without_explain_the_answers_are_the_same(world: World, answers: list[RetrievalResult],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The golden answers load every candidate (``explain``); without it, the retriever loads the
    best fused first, as few as it can, and stops when the rest cannot reach the top (its own
    test: ``test_retrieval``). Same cards, scores and alerts on every query."""
    monkeypatch.setattr(load_module, "LOAD_FIRST", 1)
    monkeypatch.setattr(load_module, "LOAD_PER_RESULT", 1)
    for golden, full in zip(QUERIES, answers, strict=True):
        lean = world.queries.search(world.tenant, replace(world.request(golden), explain=False))
        assert [(c.card_id, c.score) for c in lean.results] == [(c.card_id, c.score) for c in full.results], \
            golden.text
        assert lean.alerts == full.alerts, golden.text
        assert full.diagnostics.candidates_loaded == full.diagnostics.candidates_found
