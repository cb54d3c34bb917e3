"""The cross-tenant read matrix as the runtime role (RELIABILITY "Tenants and input"): tenant A holds
data of every kind — slot values (one superseded), a multi-value item, an event that affects a slot,
knowledge evidenced by it, a commitment, a blocker, a pending arbitration case — projected into the
read models; tenant B, through the query side (``create_queries``: the runtime role, row-level
security forced), asks through every route, facts, history (by card id, slot id, subject/label),
the briefing, the prompt context and the status, and finds nothing of A; A still finds all of it.

B has data of its own that shares A's words (a Kubernetes event, a JWT note, a ``user/address``),
so B's routes have something to find, and a leak would show as A's card among B's hits."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import pytest

from domain.errors import CardNotFoundError
from infra.postgres import Database
from infra.settings import Settings
from projections.status import read_status
from projections.worker import project_log
from services.command.commands import Remember
from services.factory import create_app, create_queries
from services.query.context import render
from services.query.queries import Queries
from tests.support import Clock, new_tenant, state

pytestmark = pytest.mark.integration

#: The questions that exercise each route, and a card of A that route must find for A.
ROUTES = {
    "semantic": ("where does the user live?", "kaohsiung"),
    "tags": ("JWT 後端", "jwt"),
    "fuzzy": ("Kubernets operatrs", "talk"),
    "temporal": ("what did I do {ago} days ago?", "talk"),
    "graph": ("Kubernetes operators talk", "jwt"),  # the talk's evidenced_by neighbour
}
#: Text only A stored: none of it may reach B's prompt context.
A_TEXT = ("Kaohsiung", "Taipei", "Gave a talk", "stateless tokens", "design doc", "legal review",
          "August 1", "Python")


@dataclass
class World:
    queries: Queries
    a: str
    b: str
    #: A's cards by name; every card, slot and case id of A; B's card ids.
    ids: dict[str, UUID]
    theirs: set[UUID]
    own: set[UUID]
    settings: Settings
    talk_days_ago: int


def remember(app: Any, clock: Clock, tenant: str, command: Remember, days: float = 1) -> Any:
    clock.advance(days=days)
    return app.remember(tenant, command)


@pytest.fixture(scope="module")
def world(pg_settings: Settings, admin_db: Database):  # type: ignore[no-untyped-def]
    patient = pg_settings.retrieval.model_copy(update={"breaker_p95_ms": 10_000.0,
                                                       "route_timeout_ms": 10_000})
    settings = pg_settings.model_copy(update={"retrieval": patient})
    clock = Clock()
    app = create_app(settings, clock=clock)
    a, b = new_tenant(), new_tenant()
    ids: dict[str, UUID] = {}
    aggregates: set[UUID] = set()

    def write(key: str, tenant: str, command: Remember, days: float = 1) -> Any:
        result = remember(app, clock, tenant, command, days)
        if tenant == a:
            ids[key] = result.card_id
            aggregates.update(filter(None, (result.aggregate_id, result.case_id)))
        return result

    write("taipei", a, state("address", "Taipei"))
    address = write("kaohsiung", a, state("address", "Kaohsiung"), days=10)
    write("python", a, state("skills", "Python"))
    for day, value in enumerate(("June 1", "July 1", "July 2", "August 1")):
        queued = write(f"launch{day}", a, state("launch_date", value, subject="fibon"))
    assert queued.outcome == "queued"
    talk_at = clock.now
    talk = write("talk", a, Remember(kind="event", memory_type="event",
                                     content="Gave a talk about Kubernetes operators at the meetup",
                                     occurred_at=clock.now, tags=("kubernetes",),
                                     links=(address.aggregate_id,)))
    write("jwt", a, Remember(kind="knowledge", memory_type="pattern", title="JWT auth",
                             content="Short-lived JSON web tokens: stateless tokens, no session",
                             tags=("JWT", "後端"), links=(talk.card_id,)))
    write("doc", a, Remember(kind="state", memory_type="commitment", content="Send the design doc",
                             owner="user", due_at=clock.now + timedelta(days=30)))
    write("legal", a, Remember(kind="state", memory_type="blocker", content="Waiting on legal review"))
    own = [write("b-address", b, state("address", "Lisbon")).card_id,
           write("b-event", b, Remember(kind="event", memory_type="event", occurred_at=clock.now,
                                        content="Kubernetes operators workshop notes",
                                        tags=("kubernetes",))).card_id]
    own.append(write("b-note", b, Remember(kind="knowledge", memory_type="note", title="JWT notes",
                                           content="JWT rotation", tags=("JWT",),
                                           links=(own[1],))).card_id)
    clock.advance(days=2)
    project_log(settings, app, admin=admin_db)
    queries = create_queries(settings, clock)
    yield World(queries, a, b, ids, {*ids.values(), *aggregates}, set(own), settings,
                (clock.now - talk_at).days)
    queries.close()
    app.close()


def ids_of(result: Any) -> set[UUID]:
    return {card.card_id for card in result.results}


@pytest.mark.parametrize("route", list(ROUTES))
def test_every_route_finds_nothing_of_the_other_tenant(world: World, route: str) -> None:
    queries, a, b, ids, theirs, own = world.queries, world.a, world.b, world.ids, world.theirs, world.own
    text, expected = ROUTES[route]
    text = text.format(ago=world.talk_days_ago)
    question = queries.query(text, explain=True, top_n=50)
    mine, other = queries.search(a, question), queries.search(b, question)
    assert mine.diagnostics.routes[route].status == "ok" and mine.diagnostics.routes[route].hits > 0
    assert ids[expected] in ids_of(mine)
    assert other.diagnostics.routes[route].status in ("ok", "skipped")  # graph: B's seeds, if any
    assert not theirs & ids_of(other) and ids_of(other) <= own
    assert other.diagnostics.routes[route].hits <= len(own)
    if route != "temporal":  # B's words meet B's own cards: the probe is no empty tenant's
        assert other.diagnostics.routes[route].hits > 0 and ids_of(other)
    alerts = other.alerts
    assert not theirs & {*alerts.aging_facts, *alerts.stale_knowledge}
    assert not alerts.arbitrations and not alerts.contradictions
    assert not any(value in render(other, ZoneInfo("UTC")) for value in A_TEXT)


def test_facts_history_and_briefing_show_nothing_of_the_other_tenant(world: World) -> None:
    queries, b, theirs, own = world.queries, world.b, world.theirs, world.own
    assert [f.value for f in queries.facts(b, "user")] == ["Lisbon"]
    assert queries.facts(b, "fibon") == []
    for ref in theirs:  # every card, slot and case id of A
        with pytest.raises(CardNotFoundError):
            queries.history(b, str(ref))
    with pytest.raises(CardNotFoundError):
        queries.history(b, "fibon/launch_date")
    assert {h.card_id for h in queries.history(b, "user/address")} <= own
    briefing = queries.briefing(b)
    assert not any(briefing.counts.values()), briefing.counts


def test_the_tenant_still_sees_all_of_its_own(world: World) -> None:
    queries, a, ids = world.queries, world.a, world.ids
    facts = {f.value for f in queries.facts(a, "user")}
    assert {"Kaohsiung", "Python"} <= facts and "Taipei" not in facts
    assert {h.card_id for h in queries.history(a, "user/address")} == {ids["taipei"], ids["kaohsiung"]}
    for key in ("talk", "jwt", "doc", "legal", "launch0"):
        assert [h.card_id for h in queries.history(a, str(ids[key]))] == [ids[key]]
    briefing = queries.briefing(a)
    assert (len(briefing.open), len(briefing.blockers), len(briefing.arbitrations)) == (1, 1, 1)
    assert briefing.arbitrations[0]["proposed_value"] == "August 1"
    result = queries.search(a, "when is the fibon launch date?")
    assert [x.proposed_value for x in result.alerts.arbitrations] == ["August 1"]
    assert "Kaohsiung" in render(queries.search(a, "where does the user live?"), ZoneInfo("UTC"))


def test_status_as_the_runtime_role_shows_no_tenant_data(world: World, runtime_db: Database) -> None:
    status = read_status(runtime_db, world.settings)
    projection = status.projections[0]
    assert (status.cards, status.embeddings_pending) == (0, 0)  # no tenant set: no row is visible
    assert (projection.tenants, projection.failures) == (0, [])
