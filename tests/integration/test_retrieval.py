"""The query side on the embedded PostgreSQL: fused retrieval, as-of, the overlay, failing and slow
routes, breakers, tenants, facts / history / briefing and the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest

from domain.errors import CardNotFoundError
from infra.postgres import Database
from infra.settings import Settings
from projections.worker import project_log
from services.command.commands import Link, Move, Remember
from services.factory import create_app, create_queries
from services.query.pending import pending_state
from services.query.queries import Queries
from services.query.retrieval import load as load_module
from services.query.retrieval.query import Hits, PlainRoute
from tests.support import START, Clock, new_tenant, state

pytestmark = pytest.mark.integration

TALK_AT = START + timedelta(days=1)  # occurred_at is read before the write advances the clock


class Boom(PlainRoute):
    name = "tags"

    def __call__(self, conn: Any, query: Any, ctx: Any, **extra: Any) -> Hits:
        raise RuntimeError("index corrupted")


class Slow(PlainRoute):
    name = "fuzzy"

    def __call__(self, conn: Any, query: Any, ctx: Any, **extra: Any) -> Hits:
        conn.execute("SELECT pg_sleep(2)")
        return Hits([])


@pytest.fixture(scope="module")
def world(pg_settings: Settings, admin_db: Database):  # type: ignore[no-untyped-def]
    """One tenant's small history, projected; a second tenant with a card of its own."""
    # a loaded machine must not time routes out or quarantine them here: the breaker and the
    # timeout have tests of their own, with their own settings
    patient = pg_settings.retrieval.model_copy(
        update={"breaker_p95_ms": 10_000.0, "route_timeout_ms": 10_000})
    settings = pg_settings.model_copy(update={"time_zone": "Asia/Taipei", "retrieval": patient})
    clock = Clock()
    app = create_app(settings, clock=clock)
    tenant, other = new_tenant(), new_tenant()
    ids: dict[str, UUID] = {}

    def write(key: str, command: Remember, days: float = 1) -> None:
        clock.advance(days=days)
        ids[key] = app.remember(tenant, command).card_id  # type: ignore[assignment]

    write("taipei", state("address", "Taipei"))
    write("talk", Remember(kind="event", memory_type="event", occurred_at=clock.now,
                           content="Gave a talk about Kubernetes operators at the meetup"), days=3)
    write("kaohsiung", state("address", "Kaohsiung"), days=10)
    write("jwt", Remember(kind="knowledge", memory_type="pattern", title="JWT auth",
                          content="Short-lived JSON web tokens, no server session",
                          tags=("JWT", "後端")), days=1)
    write("doc", Remember(kind="state", memory_type="commitment", content="Send the design doc",
                          owner="user", due_at=clock.now + timedelta(days=2)))
    write("launch", state("launch_date", "2026-08-01", subject="fibon", scope="project",
                          project_id="fibon", memory_type="decision"))
    app.remember(other, state("address", "Secret other-tenant city"))
    clock.advance(days=5)
    project_log(settings, app, admin=admin_db)
    queries = create_queries(settings, clock)
    yield app, queries, clock, tenant, other, ids
    queries.close()
    app.close()


def found(result: Any) -> list[str]:
    return [card.value for card in result.results]


def test_a_current_question_finds_the_current_value_only(world) -> None:
    app, queries, clock, tenant, _, ids = world
    result = queries.search(tenant, "where does the user live?")
    assert found(result)[0] == "Kaohsiung"
    assert "Taipei" not in found(result)
    assert set(result.diagnostics.routes) == {"semantic", "tags", "fuzzy", "temporal", "graph"}
    assert all(r.status == "ok" for r in result.diagnostics.routes.values())


def test_as_of_works_on_the_whole_retrieval(world) -> None:
    _, queries, clock, tenant, _, ids = world
    before_move = clock.now - timedelta(days=15)
    result = queries.search(tenant, queries.query("where does the user live?", valid_at=before_move,
                                                  known_at=before_move))
    assert "Taipei" in found(result) and "Kaohsiung" not in found(result)
    assert result.valid_at == before_move
    # valid back then, as we know it now: Taipei, marked superseded since, kept because as-of
    later = queries.search(tenant, queries.query("where does the user live?", valid_at=before_move))
    taipei = next(c for c in later.results if c.card_id == ids["taipei"])
    assert taipei.superseded


def test_temporal_words_resolve_against_the_clock(world) -> None:
    _, queries, clock, tenant, _, ids = world
    ago = (clock.now - TALK_AT).days
    result = queries.search(tenant, f"what did I do {ago} days ago?")
    explained = queries.search(tenant, queries.query(f"what did I do {ago} days ago?", explain=True))
    assert found(result)[0].startswith("Gave a talk"), [(c.value, c.explain) for c in explained.results]
    assert "days ago" in (result.diagnostics.routes["temporal"].detail or "")


def test_an_ambiguous_time_word_skips_the_route_with_its_reason(world) -> None:
    _, queries, _, tenant, _, _ = world
    before = queries.retriever.runner.breakers["temporal"].samples
    result = queries.search(tenant, "what did I do recently?")
    report = result.diagnostics.routes["temporal"]
    assert report.status == "skipped" and "ambiguous" in (report.detail or "")
    assert queries.retriever.runner.breakers["temporal"].samples == before  # a refusal is no strike
    assert result.diagnostics.routes["semantic"].status == "ok"


def test_project_cards_need_the_project_and_pending_arbitration_is_none_here(world) -> None:
    _, queries, _, tenant, _, ids = world
    assert ids["launch"] not in {c.card_id for c in queries.search(tenant, "fibon launch date").results}
    scoped = queries.search(tenant, queries.query("fibon launch date", project_id="fibon"))
    assert scoped.results[0].card_id == ids["launch"]


def test_tags_fold_scripts_and_synonyms(world) -> None:
    _, queries, _, tenant, _, ids = world
    for text in ("JWT", "json web token", "后端"):
        result = queries.search(tenant, text)
        assert result.results[0].card_id == ids["jwt"], text


def test_explain_shows_routes_and_every_step(world) -> None:
    _, queries, _, tenant, _, _ = world
    result = queries.search(tenant, queries.query("Kaohsiung", explain=True))
    trace = result.results[0].explain
    assert trace is not None and set(trace) >= {"routes", "rrf", "decay", "scope_boost", "final"}
    assert trace["final"]["rank"] == 1


def without_graph(pg_settings: Settings) -> Settings:
    """Routes that never time out here, and no graph walk."""
    patient = pg_settings.retrieval.model_copy(
        update={"breaker_p95_ms": 10_000.0, "route_timeout_ms": 10_000, "graph_seeds": 0})
    return pg_settings.model_copy(update={"retrieval": patient})


def loading_one_first(settings: Settings, clock: Clock, tenant: str, text: str, monkeypatch: Any,
                      only: str | None = None) -> tuple[Any, Any]:
    """The top answer to ``text`` when one candidate is loaded first, and the same with
    ``explain`` (every candidate loaded); with ``only``, that route alone."""
    monkeypatch.setattr(load_module, "LOAD_FIRST", 1)
    monkeypatch.setattr(load_module, "LOAD_PER_RESULT", 1)
    queries = create_queries(settings, clock)
    try:
        if only is not None:
            queries.retriever.routes = [r for r in queries.retriever.routes if r.name == only]
        question = queries.query(text, top_n=1)
        return queries.search(tenant, question), queries.search(tenant, replace(question, explain=True))
    finally:
        queries.close()


def test_a_card_left_unloaded_still_raises_its_contradiction(pg_settings, admin_db, monkeypatch) -> None:
    """The retriever loads the best fused candidates first and stops when the rest cannot reach
    the top; a low-ranked card that ``contradicts`` a chosen one is loaded for the alert anyway.
    (It projects the whole log: it runs before the test that leaves a write unprojected.)"""
    settings = without_graph(pg_settings)  # a walk would rank the old card: only the alert may load it
    clock, tenant = Clock(), new_tenant()
    app = create_app(settings, clock=clock)
    try:
        old = app.remember(tenant, Remember(kind="knowledge", memory_type="pattern", title="Release rule",
                                            content="Never ship on a Friday")).card_id
        clock.advance(days=400)
        for n in range(12):
            clock.advance(minutes=1)
            app.remember(tenant, Remember(kind="event", memory_type="event", occurred_at=clock.now,
                                          content=f"Friday deploy checklist, item {n}"))
        clock.advance(minutes=1)
        new = app.remember(tenant, Remember(kind="knowledge", memory_type="pattern", title="Friday deploys",
                                            content="A Friday deploy is fine with feature flags")).card_id
        app.link(tenant, Link(card_id=new, edge="contradicts", target_id=old))
        project_log(settings, app, admin=admin_db)
    finally:
        app.close()
    # the newest card tops both routes: the best answer stands clear of every other candidate
    lean, full = loading_one_first(settings, clock, tenant, "Friday deploy", monkeypatch)
    assert [c.card_id for c in lean.results] == [c.card_id for c in full.results] == [new]
    assert lean.diagnostics.candidates_loaded == 2 < lean.diagnostics.candidates_found, lean.diagnostics
    assert [a.card_ids for a in lean.alerts.contradictions] == [tuple(sorted((new, old)))]
    assert lean.alerts == full.alerts


def test_loading_grows_until_the_rest_cannot_reach_the_top(pg_settings, admin_db, monkeypatch) -> None:
    """Decay can sink the best fused candidates far below the rest: the retriever then loads as
    many again, and stops as soon as the best card left unloaded cannot beat the answer."""
    settings = without_graph(pg_settings)
    clock, tenant = Clock(), new_tenant()
    app = create_app(settings, clock=clock)
    try:
        for n in range(20):  # one word of the question each, the oldest last among equals
            clock.advance(minutes=1)
            app.remember(tenant, Remember(kind="event", memory_type="event", occurred_at=clock.now,
                                          content=f"Friday lunch number {n}"))
        for n in range(12):  # both words, but long ago by the time of the question
            clock.advance(minutes=1)
            app.remember(tenant, Remember(kind="event", memory_type="event", occurred_at=clock.now,
                                          content=f"Friday deploy checklist, item {n}"))
        clock.advance(days=400)
        new = app.remember(tenant, Remember(kind="event", memory_type="event", occurred_at=clock.now,
                                            content="The deploy went fine")).card_id
        project_log(settings, app, admin=admin_db)
    finally:
        app.close()
    lean, full = loading_one_first(settings, clock, tenant, "Friday deploy", monkeypatch, only="tags")
    # tags rank: 12 old two-word events, then the new card (newest of the one-word ones), then
    # 20 more: loads of 1, 2, 4, 8, 16 reach it, and the 17th cannot beat it after the boost
    assert [c.card_id for c in lean.results] == [c.card_id for c in full.results] == [new]
    assert lean.diagnostics.candidates_found == 33
    assert lean.diagnostics.candidates_loaded == 16, lean.diagnostics


def one_route_over_events(pg_settings: Settings, admin_db: Database, route: str,
                          contents: list[str], questions: list[str]) -> tuple[list[Any], list[Any]]:
    """A fresh tenant's event cards of ``contents``, projected; each question's answer by
    ``route`` alone."""
    clock, tenant = Clock(), new_tenant()
    app = create_app(pg_settings, clock=clock)
    try:
        ids = [app.remember(tenant, Remember(kind="event", memory_type="event", occurred_at=clock.now,
                                             content=content)).card_id for content in contents]
        project_log(pg_settings, app, admin=admin_db)
    finally:
        app.close()
    queries = create_queries(pg_settings, clock)
    try:
        queries.retriever.routes = [r for r in queries.retriever.routes if r.name == route]
        return ids, [queries.search(tenant, question) for question in questions]
    finally:
        queries.close()


def test_fuzzy_needs_two_shared_bigrams_when_the_question_has_two(pg_settings, admin_db) -> None:
    """One shared character pair is chance: 工作 sits in 工作室 as in 工作坊. A question of one
    pair matches it alone."""
    # neither 工作 nor 作坊 is a word of either card (工作坊, 工作室 are): both go to fuzzy
    (workshop, studio), (two, one) = one_route_over_events(
        pg_settings, admin_db, "fuzzy", ["週末 監控告警工作坊", "週末 兼職工作室"], ["工作 作坊", "工作"])
    assert [c.card_id for c in two.results] == [workshop], two.diagnostics.routes["fuzzy"]
    assert {c.card_id for c in one.results} == {workshop, studio}, one.diagnostics.routes["fuzzy"]


def test_a_question_word_finds_no_card_by_itself(pg_settings, admin_db) -> None:
    """什麼 asks; it is not what the question is about, any more than "what" is."""
    (dinner, review), (asked, food) = one_route_over_events(
        pg_settings, admin_db, "tags", ["還沒決定晚餐要吃什麼", "和 Emma 做 code review"],
        ["我和 Emma 做了什麼", "晚餐吃什麼"])
    assert [c.card_id for c in asked.results] == [review], asked.diagnostics.routes["tags"]
    assert [c.card_id for c in food.results] == [dinner], food.diagnostics.routes["tags"]
    assert "什" not in (asked.diagnostics.routes["tags"].detail or "")


def test_a_write_not_yet_projected_replaces_what_it_supersedes(world) -> None:
    app, queries, clock, tenant, _, ids = world
    command = state("address", "Tainan")
    written = app.remember(tenant, command)
    pending = pending_state(command, written, clock.now)
    assert pending is not None
    result = queries.search(tenant, queries.query("where does the user live?"), pending=[pending])
    assert found(result)[0] == "Tainan" and "Kaohsiung" not in found(result)
    assert result.diagnostics.overlaid_writes == 1
    # a caller who passes nothing sees the read models as they are
    assert found(queries.search(tenant, "where does the user live?"))[0] == "Kaohsiung"


def test_a_failing_route_is_reported_not_fatal(world) -> None:
    _, shared, clock, tenant, _, _ = world
    queries: Queries = create_queries(shared.settings, clock)  # its breakers remember the failure
    queries.retriever.routes = [r if r.name != "tags" else Boom() for r in queries.retriever.routes]
    try:
        result = queries.search(tenant, "Kaohsiung")
    finally:
        queries.close()
    assert result.diagnostics.routes["tags"].status == "error"
    assert "index corrupted" in (result.diagnostics.routes["tags"].detail or "")
    assert found(result)[0] == "Kaohsiung"


def test_a_route_with_nothing_to_look_up_takes_no_connection(world) -> None:
    _, shared, clock, tenant, _, _ = world
    queries: Queries = create_queries(shared.settings, clock)
    opened: list[str] = []
    real = queries.retriever.runner.route_transaction

    def recording(route: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(route.name)
        return real(route, *args, **kwargs)

    queries.retriever.runner.route_transaction = recording  # type: ignore[method-assign]
    try:
        plain = queries.search(tenant, "Kaohsiung")
        plain_opened, opened[:] = sorted(opened), []
        timed = queries.search(tenant, "what did I do last week?")
    finally:
        queries.close()
    assert plain.diagnostics.routes["temporal"].detail == "no time expression"
    assert plain.diagnostics.routes["temporal"].status == "ok"
    assert "temporal" not in plain_opened and "semantic" in plain_opened
    assert "temporal" in opened and timed.diagnostics.routes["temporal"].status == "ok"
    assert found(plain)[0] == "Kaohsiung"


def test_a_slow_route_times_out_and_its_breaker_quarantines_it(pg_settings, world) -> None:
    _, _, clock, tenant, _, _ = world
    # timed-out calls count as 500 ms, over the 400 ms limit; the real routes stay well under it
    fast = pg_settings.retrieval.model_copy(update={"route_timeout_ms": 500, "breaker_window": 3,
                                                    "breaker_p95_ms": 400.0})
    settings = pg_settings.model_copy(update={"retrieval": fast})
    queries: Queries = create_queries(settings, clock)
    now = [0.0]
    queries.retriever.runner.monotonic = lambda: now[0]
    queries.retriever.runner.breakers.load = lambda: 0.1  # a quiet machine: the route alone is sick
    queries.retriever.routes = [r if r.name != "fuzzy" else Slow() for r in queries.retriever.routes]
    enough = queries.query("Kaohsiung", top_n=1)  # the other routes find all it asks for
    try:
        statuses = []
        for _ in range(4):
            started = time.perf_counter()
            result = queries.search(tenant, enough)
            assert time.perf_counter() - started < 1.5  # never waits for the slow route
            statuses.append(result.diagnostics.routes["fuzzy"].status)
            now[0] += 1
        assert statuses == ["timeout", "timeout", "timeout", "quarantined"]
        assert found(result)[0] == "Kaohsiung"
        now[0] += 31  # a probe is let through after 30 s
        assert queries.search(tenant, enough).diagnostics.routes["fuzzy"].status == "timeout"
    finally:
        queries.close()


def test_a_question_the_other_routes_answer_too_little_runs_the_quarantined_route(world) -> None:
    """The breaker must not turn load into empty answers: the quarantined route is its probe."""
    _, shared, clock, tenant, _, _ = world
    queries: Queries = create_queries(shared.settings, clock)
    try:
        for _ in range(3):
            queries.retriever.runner.breakers.record("semantic", 900.0, 0.0)
        queries.retriever.runner.breakers["semantic"].trip(queries.retriever.runner.monotonic())
        result = queries.search(tenant, "which city is home these days")  # only semantic knows
        assert result.diagnostics.routes["semantic"].status == "ok"
        assert found(result) and found(result)[0] == "Kaohsiung"
    finally:
        queries.close()


def test_a_question_nothing_matches_gets_the_nearest_cards_marked_weak(pg_settings, world) -> None:
    """The floor orders an answer, it never empties one while the tenant holds cards in scope:
    a question that shares no word with any card and whose embedding is nowhere near one (the
    floor set high here, so that nothing is) gets the nearest cards, and says the match is weak."""
    _, _, clock, tenant, _, _ = world
    strict = pg_settings.retrieval.model_copy(update={
        "semantic_min_similarity": 0.99, "breaker_p95_ms": 10_000.0, "route_timeout_ms": 10_000})
    queries = create_queries(pg_settings.model_copy(update={"retrieval": strict}), clock)
    try:
        result = queries.search(tenant, "qwxv zjkp")
        assert result.match == "weak"
        assert result.results, "never an empty answer while the tenant holds cards"
        assert result.diagnostics.routes["semantic"].hits == 0
        assert result.diagnostics.routes["nearest"].status == "ok"
        assert "Secret other-tenant city" not in found(result)
        strong = queries.search(tenant, "where does the user live?")
        assert strong.match == "strong" and "nearest" not in strong.diagnostics.routes
        assert found(strong)[0] == "Kaohsiung"
    finally:
        queries.close()


def test_a_paraphrase_sharing_no_word_with_the_card_still_finds_it(world) -> None:
    _, queries, _, tenant, _, ids = world
    result = queries.search(tenant, "did I present anything to a community group?")
    assert result.match in ("strong", "weak")
    assert ids["talk"] in [c.card_id for c in result.results[:3]], [
        (c.value, c.score) for c in result.results]


def test_a_question_that_may_see_no_card_says_so(world) -> None:
    _, queries, _, tenant, _, _ = world
    nobody = queries.search(new_tenant(), "where does the user live?")
    assert (nobody.match, nobody.results) == ("none", [])
    narrowed = queries.search(tenant, queries.query("qwxv zjkp", subjects=("nobody-at-all",)))
    assert (narrowed.match, narrowed.results) == ("none", [])


def test_another_tenant_finds_nothing_of_the_first(world) -> None:
    _, queries, _, tenant, other, _ = world
    mine = found(queries.search(tenant, "Secret other-tenant city"))
    theirs = found(queries.search(other, "Kaohsiung Taipei talk JWT"))
    assert "Secret other-tenant city" not in mine
    assert set(theirs) <= {"Secret other-tenant city"}


def test_the_cross_tenant_matrix_reads_nothing_through_any_path(world) -> None:
    _, queries, clock, tenant, other, ids = world
    theirs = set(ids.values())
    ago = (clock.now - TALK_AT).days
    for text in ("Kaohsiung", "Kubernetes operators talk", "Kubernets", f"what did I do {ago} days ago?",
                 "JWT json web token 後端", "where does the user live?"):
        result = queries.search(other, queries.query(text, explain=True))
        assert not theirs & {card.card_id for card in result.results}, text
        assert all(r.status == "ok" for r in result.diagnostics.routes.values()), (text, result.diagnostics)
    for card_id in theirs:
        with pytest.raises(CardNotFoundError):
            queries.history(other, str(card_id))
    assert [f.value for f in queries.facts(other, "user")] == ["Secret other-tenant city"]
    assert not any(queries.briefing(other).counts.values())
    assert ids["jwt"] in {c.card_id for c in queries.search(tenant, "JWT").results}


def test_facts_history_and_briefing(world) -> None:
    _, queries, clock, tenant, _, ids = world
    assert [f.value for f in queries.facts(tenant, "user") if f.label == "address"] == ["Kaohsiung"]
    past = clock.now - timedelta(days=15)
    assert [f.value for f in queries.facts(tenant, "user", valid_at=past, known_at=past)] == ["Taipei"]
    history = queries.history(tenant, "user/address")
    taipei = next(h for h in history if h.card_id == ids["taipei"])
    assert [v.change for v in taipei.versions] == ["recorded", "validity closed"]
    assert taipei.versions[1].valid_to is not None and taipei.versions[0].known_to is not None
    briefing = queries.briefing(tenant)
    assert [i.card_id for i in briefing.overdue] == [ids["doc"]]
    assert briefing.counts["overdue"] == 1 and briefing.counts["open"] == 0


def test_an_expired_commitment_leaves_the_briefing(world) -> None:
    app, queries, clock, tenant, _, ids = world
    app.move(tenant, Move(card_id=ids["doc"], to="expire"))
    project_log(queries.settings, app)
    assert queries.briefing(tenant).counts["overdue"] == 0


def test_the_command_line_speaks_json(world) -> None:
    """``palimpsest search`` and ``context`` as clients of a server on this tenant's read models."""
    from services.bootstrap import build_services
    from tests.integration.rest_server import ServedApi

    _, queries, clock, tenant, _, _ = world
    services = build_services(queries.settings, clock=clock)
    try:
        with ServedApi(services) as served:
            key = services.keys.create(tenant, ("memory:read",), "retrieval test")[1]
            env = {**os.environ, "PALIMPSEST_URL": served.url, "PALIMPSEST_KEY": key}

            def run(*args: str) -> subprocess.CompletedProcess[str]:
                return subprocess.run([sys.executable, "-m", "services.entrypoints.cli", *args], env=env,
                                      capture_output=True, text=True, timeout=120)

            done = run("search", "json web token", "--json")
            assert done.returncode == 0, done.stderr
            answer = json.loads(done.stdout)
            assert answer["results"] and answer["results"][0]["value"].startswith("Short-lived JSON"), answer
            assert {"kind", "scope", "valid_from", "recorded_at", "superseded"} <= set(answer["results"][0])
            assert set(answer) >= {"alerts", "diagnostics"}
            bad = run("search", "x", "--valid-at", "yesterday-ish", "--json")
            assert bad.returncode == 2 and "ISO 8601" in json.loads(bad.stdout)["error"]["message"]
            context = run("context", "JWT")
            assert context.returncode == 0 and "<current_time>" in context.stdout
            assert "JWT auth: Short-lived JSON web tokens" in context.stdout
    finally:
        services.close()
