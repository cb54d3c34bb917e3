"""Slicing on the embedded PostgreSQL, as the runtime role: cards written through the commands,
projected by the catch-up, then listed and counted along each of the six axes, as of a past
moment, page by page, and never across tenants.

Tenant A's history runs from 20 May to 7 June 2026: an address (Taipei, then Kaohsiung), an
employer and a job title inferred by agents, knowledge about JWT and what argues with it, a talk
(an event that affects the address). Tenant B holds a JWT note with a contradiction of its own
and cards by an agent of the same name, so a leak would show as B's card in A's answer."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest

from domain.errors import InvalidCommandError
from infra.postgres import Database
from infra.settings import Settings
from projections.replay import catch_up, make_projector
from services.command.commands import Link, Remember
from services.factory import create_app
from services.query.readmodels import ReadModels
from services.query.slicing import AsOf, CardSlice, count_cards, list_cards
from tests.support import Clock, new_tenant, state

pytestmark = pytest.mark.integration

MAY_20 = datetime(2026, 5, 20, 9, tzinfo=UTC)
JUNE = datetime(2026, 6, 1, tzinfo=UTC)


@dataclass
class World:
    read: ReadModels
    a: str
    b: str
    ids: dict[str, UUID]
    #: B's cards by name.
    theirs: dict[str, UUID]
    now: datetime
    #: When A's edges were drawn.
    linked_at: datetime

    def ids_of(self, slice: CardSlice, tenant: str | None = None) -> set[UUID]:
        page = list_cards(self.read, tenant or self.a, slice.model_copy(update={"limit": 500}),
                          now=self.now)
        assert page.next_cursor is None
        return {card.card_id for card in page.cards}

    def names(self, slice: CardSlice) -> set[str]:
        found = self.ids_of(slice)
        named = {key for key, card_id in self.ids.items() if card_id in found}
        assert len(named) == len(found), "every card found is one of A's"
        return named


def knowledge(title: str, tags: tuple[str, ...], **extra: Any) -> Remember:
    return Remember(kind="knowledge", memory_type="note", title=title, content=f"About {title}.",
                    tags=tags, **extra)


@pytest.fixture(scope="module")
def world(pg_settings: Settings, admin_db: Database, runtime_db: Database):  # type: ignore[no-untyped-def]
    clock = Clock(now=MAY_20)
    app = create_app(pg_settings, clock=clock)
    a, b = new_tenant(), new_tenant()
    ids: dict[str, UUID] = {}
    theirs: dict[str, UUID] = {}

    def write(key: str, command: Remember, days: float = 1, tenant: str = a) -> Any:
        clock.advance(days=days)
        result = app.remember(tenant, command)
        (ids if tenant == a else theirs)[key] = result.card_id
        return result

    a1 = {"agent_id": "planner", "session_id": "s1"}
    inferred = {"source": "agent_inferred", "agent_id": "reader", "session_id": "s2"}
    taipei = write("taipei", state("address", "Taipei", **a1), days=0)
    write("jwt", knowledge("JWT", ("JWT", "auth"), scope="project", project_id="p1", **a1), days=5)
    write("sessions", knowledge("Server-side sessions", ("sessions",), agent_id="reader"), days=8)
    write("kaohsiung", state("address", "Kaohsiung", agent_id="planner", session_id="s3"))
    write("employer", state("employer", "Acme", inference_confidence=0.4, **inferred))
    write("title", state("job_title", "engineer", inference_confidence=0.8, **inferred))
    write("talk", Remember(kind="event", memory_type="event", content="Gave a talk on JWT",
                           occurred_at=clock.now, tags=("talk",), scope="group", group_id="g1",
                           agent_id="scribe", links=(taipei.aggregate_id,)), days=0.5)
    write("stateless", knowledge("Stateless tokens", ("tokens",), agent_id="reader"))
    write("oauth", knowledge("OAuth", ("oauth",), agent_id="reader"))
    linked_at = clock.advance(hours=1)
    app.link(a, Link(card_id=ids["sessions"], edge="contradicts", target_id=ids["jwt"]))
    app.link(a, Link(card_id=ids["jwt"], edge="contradicts", target_id=ids["stateless"]))
    app.link(a, Link(card_id=ids["oauth"], edge="related_to", target_id=ids["jwt"]))

    write("jwt", knowledge("JWT", ("jwt",), agent_id="planner"), tenant=b)
    write("against", knowledge("Cookies", ("cookies",), agent_id="planner"), tenant=b)
    app.link(b, Link(card_id=theirs["against"], edge="contradicts", target_id=theirs["jwt"]))

    projector = make_projector(pg_settings, app, admin=admin_db)
    catch_up(projector, app)
    read = ReadModels(runtime_db, pg_settings.read_schema)
    yield World(read, a, b, ids, theirs, clock.now, linked_at)
    read.close()
    projector.close()
    app.close()


# ---- the four questions of the design, one call each ------------------------------------------

def test_knowledge_cards_created_this_month(world: World) -> None:
    this_month = CardSlice(kinds=["knowledge"], recorded_during="this month")
    assert world.names(this_month) == {"sessions", "stateless", "oauth"}
    since_june = CardSlice(kinds=["knowledge"], recorded_after=JUNE)
    assert world.names(since_june) == {"sessions", "stateless", "oauth"}
    assert world.names(this_month.model_copy(update={"recorded_during": "上個月"})) == {"jwt"}


def test_cards_per_agent(world: World) -> None:
    counts = count_cards(world.read, world.a, CardSlice(group_by="agent_id"), now=world.now)
    per_agent = {c.key: c.count for c in counts.counts}
    assert per_agent == {"planner": 2, "reader": 5, "scribe": 1}
    assert counts.total == 8 and counts.group_by == "agent_id"


def test_agent_inferred_facts_under_a_confidence(world: World) -> None:
    unsure = CardSlice(memory_types=["fact"], sources=["agent_inferred"], confidence_below=0.6)
    assert world.names(unsure) == {"employer"}


def test_what_contradicts_jwt(world: World) -> None:
    """Either direction of the edge; related_to is not contradicts; B's JWT is not A's."""
    against = CardSlice(related_concept="JWT", edge="contradicts")
    assert world.names(against) == {"sessions", "stateless"}
    assert world.names(against.model_copy(update={"related_concept": "json web token"})) == {
        "sessions", "stateless"}
    assert world.ids_of(against, world.b) == {world.theirs["against"]}


# ---- each axis -------------------------------------------------------------------------------

def test_kind_and_memory_type(world: World) -> None:
    assert world.names(CardSlice(kinds=["event"])) == {"talk"}
    assert world.names(CardSlice(kinds=["state", "event"], memory_types=["event"])) == {"talk"}
    assert world.names(CardSlice(memory_types=["fact"])) == {"kaohsiung", "employer", "title"}


def test_time_axes(world: World) -> None:
    late_may = {"valid_from": datetime(2026, 5, 21, tzinfo=UTC),
                "valid_to": datetime(2026, 5, 22, tzinfo=UTC)}
    assert world.names(CardSlice(**late_may)) == set(), "Taipei held then, but is not current"
    assert world.names(CardSlice(**late_may, include_superseded=True)) == {"taipei"}
    assert world.names(CardSlice(valid_to=datetime(2026, 5, 30, tzinfo=UTC))) == {"jwt"}
    assert world.names(CardSlice(recorded_before=JUNE)) == {"jwt"}
    assert world.names(CardSlice(occurred_after=JUNE)) == {"talk"}
    assert world.names(CardSlice(occurred_before=JUNE)) == set()
    assert world.names(CardSlice(occurred_during="last week")) == {"talk"}, "1–7 June"
    assert world.names(CardSlice(occurred_during="yesterday")) == set()


def test_scope_project_group(world: World) -> None:
    assert world.names(CardSlice(scopes=["project"])) == {"jwt"}
    assert world.names(CardSlice(project_ids=["p1"])) == {"jwt"}
    assert world.names(CardSlice(group_ids=["g1"])) == {"talk"}
    assert world.names(CardSlice(scopes=["personal"], kinds=["knowledge"])) == {
        "sessions", "stateless", "oauth"}


def test_source_axis(world: World) -> None:
    assert world.names(CardSlice(agent_ids=["scribe", "planner"])) == {"jwt", "kaohsiung", "talk"}
    assert world.names(CardSlice(session_ids=["s2"])) == {"employer", "title"}
    assert world.names(CardSlice(agent_ids=["planner"], include_superseded=True)) == {
        "taipei", "jwt", "kaohsiung"}


def test_confidence_axis(world: World) -> None:
    assert world.names(CardSlice(confidence_above=0.6)) == {"title"}
    assert world.names(CardSlice(sources=["agent_inferred"])) == {"employer", "title"}
    assert world.names(CardSlice(sources=["user_stated"], kinds=["state"])) == {"kaohsiung"}


def test_relation_axis(world: World) -> None:
    ids = world.ids
    assert world.names(CardSlice(related_to=ids["jwt"])) == {"sessions", "stateless", "oauth"}
    assert world.names(CardSlice(related_to=ids["jwt"], edge="related_to")) == {"oauth"}
    # the talk affects the address slot: its current card, and (as of) its earlier one
    assert world.names(CardSlice(related_to=ids["talk"], edge="affects")) == {"kaohsiung"}
    assert world.names(CardSlice(related_to=ids["talk"], include_superseded=True)) == {
        "taipei", "kaohsiung"}
    assert world.names(CardSlice(related_to=ids["kaohsiung"])) == {"talk"}
    assert world.names(CardSlice(edge="contradicts")) == {"jwt", "sessions", "stateless"}
    assert world.names(CardSlice(related_concept="OAuth")) == {"jwt"}, "by title"


def test_concept_axis(world: World) -> None:
    assert world.names(CardSlice(tags=["json web token"])) == {"jwt"}
    assert world.names(CardSlice(tags=["JWT", "talk"])) == {"jwt", "talk"}, "normalised, any of"
    assert world.names(CardSlice(tags=["nothing-tagged-so"])) == set()


# ---- as of, pages, counts, tenancy ---------------------------------------------------------------

def test_as_of_shows_the_superseded_value_then_not_now(world: World) -> None:
    addresses = CardSlice(kinds=["state"], agent_ids=["planner"])
    assert world.names(addresses) == {"kaohsiung"}
    then = addresses.model_copy(update={"as_of": AsOf(valid_at=datetime(2026, 5, 25, tzinfo=UTC))})
    (card,) = list_cards(world.read, world.a, then, now=world.now).cards
    assert card.card_id == world.ids["taipei"] and card.content == "Taipei" and card.superseded
    known_then = CardSlice(as_of=AsOf(known_at=datetime(2026, 5, 26, tzinfo=UTC)))
    assert world.names(known_then) == {"taipei", "jwt"}, "nothing learned later"
    relations_then = CardSlice(related_to=world.ids["jwt"], as_of=AsOf(known_at=world.now))
    assert world.names(relations_then) == {"sessions", "stateless", "oauth"}
    before_links = CardSlice(edge="contradicts",
                             as_of=AsOf(known_at=world.linked_at - timedelta(minutes=30)))
    assert world.names(before_links) == set(), "the edges were not drawn yet"
    counted = count_cards(world.read, world.a, then.model_copy(update={"group_by": "source"}))
    assert [(c.key, c.count) for c in counted.counts] == [("user_stated", 1)]


def test_pages_are_disjoint_and_complete(world: World) -> None:
    every = CardSlice(include_superseded=True, limit=3)
    seen: list[UUID] = []
    cursor, pages = None, 0
    while True:
        page = list_cards(world.read, world.a, every.model_copy(update={"cursor": cursor}))
        seen += [card.card_id for card in page.cards]
        pages += 1
        if page.next_cursor is None:
            break
        assert len(page.cards) == 3
        cursor = page.next_cursor
    assert len(seen) == len(set(seen)) == len(world.ids) and set(seen) == set(world.ids.values())
    assert pages == 3
    whole = list_cards(world.read, world.a, every.model_copy(update={"limit": 500})).cards
    assert [card.card_id for card in whole] == seen, "latest recorded first, same order"
    recorded = [card.recorded_at for card in whole]
    assert recorded == sorted(recorded, reverse=True)


def test_a_cursor_belongs_to_its_slice(world: World) -> None:
    page = list_cards(world.read, world.a, CardSlice(limit=1))
    assert page.next_cursor is not None
    with pytest.raises(InvalidCommandError, match="cursor"):
        list_cards(world.read, world.a, CardSlice(kinds=["state"], cursor=page.next_cursor))
    with pytest.raises(InvalidCommandError, match="cursor"):
        list_cards(world.read, world.a, CardSlice(cursor="not-a-cursor"))


@pytest.mark.parametrize("group_by", ["kind", "memory_type", "scope", "project_id", "group_id",
                                      "agent_id", "session_id", "source", "month_recorded"])
def test_group_by_counts_every_card_once(world: World, group_by: str) -> None:
    every = CardSlice(include_superseded=True, group_by=group_by)
    counts = count_cards(world.read, world.a, every)
    assert counts.total == len(world.ids) == sum(c.count for c in counts.counts)
    listed = list_cards(world.read, world.a, every.model_copy(update={"limit": 500})).cards
    expected: dict[str | None, int] = {}
    for card in listed:
        key = (card.recorded_at.astimezone(UTC).strftime("%Y-%m") if group_by == "month_recorded"
               else getattr(card, group_by))
        expected[key] = expected.get(key, 0) + 1
    assert {c.key: c.count for c in counts.counts} == expected


def test_group_by_tag_and_month(world: World) -> None:
    tags = count_cards(world.read, world.a, CardSlice(kinds=["knowledge"], group_by="tag"))
    assert {c.key: c.count for c in tags.counts} == {
        "json web token": 1, "auth": 1, "sessions": 1, "tokens": 1, "oauth": 1}
    assert tags.total == 4
    untagged = count_cards(world.read, world.a, CardSlice(kinds=["state"], group_by="tag"))
    assert [(c.key, c.count) for c in untagged.counts] == [(None, 3)]
    months = count_cards(world.read, world.a, CardSlice(include_superseded=True,
                                                          group_by="month_recorded"))
    assert [(c.key, c.count) for c in months.counts] == [("2026-06", 7), ("2026-05", 2)]
    plain = count_cards(world.read, world.a, CardSlice(kinds=["knowledge"]))
    assert plain.counts == [] and plain.total == 4 and plain.group_by is None


def test_another_tenants_cards_never_appear(world: World, pg_settings: Settings) -> None:
    """As the runtime role, row-level security forced: B asks along every axis and sees only B."""
    with world.read.tenant(world.b) as conn:
        assert conn.execute("SELECT current_user AS role").fetchone()["role"] == \
            pg_settings.runtime_role
    slices = [CardSlice(), CardSlice(include_superseded=True), CardSlice(agent_ids=["planner"]),
              CardSlice(related_to=world.ids["jwt"]), CardSlice(related_concept="JWT"),
              CardSlice(edge="contradicts"), CardSlice(tags=["jwt"]),
              CardSlice(as_of=AsOf(known_at=world.now))]
    for each in slices:
        assert world.ids_of(each, world.b) <= set(world.theirs.values()), each
    assert world.ids_of(CardSlice(), world.b) == set(world.theirs.values())
    counts = count_cards(world.read, world.b, CardSlice(group_by="agent_id"))
    assert [(c.key, c.count) for c in counts.counts] == [("planner", 2)] and counts.total == 2
    assert not world.ids_of(CardSlice(include_superseded=True)) & set(world.theirs.values())


# ``palimpsest cards`` is a client of the server now: tests/integration/test_cli_remote_cards.py.
