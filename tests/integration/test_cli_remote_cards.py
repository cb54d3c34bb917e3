"""``palimpsest cards`` as a client of a running server, like the other read commands: the key's
tenant, the slicing filters as options, counts, cursor paging, ``--json`` for answers and errors,
and ids printed whole in its table (uvicorn in a thread on the embedded PostgreSQL, the read
models filled from the log as the projector fills them).

Tenant A: an address and an employer (states), knowledge about JWT and what argues with it, by two
agents. Tenant B: a JWT note and a contradiction of its own, by an agent of the same name, so a
leak would show as B's card in A's answer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import pytest
from typer.testing import CliRunner

from infra.postgres import Database
from infra.settings import Settings
from projections.replay import catch_up, make_projector
from services.bootstrap import Services, build_services
from services.command.commands import Link, Remember
from services.entrypoints.cli import cli
from tests.integration.rest_server import ServedApi
from tests.support import Clock, new_tenant, state

pytestmark = pytest.mark.integration


def knowledge(title: str, tags: tuple[str, ...], **extra: Any) -> Remember:
    return Remember(kind="knowledge", memory_type="note", title=title, content=f"About {title}.",
                    tags=tags, **extra)


class World:
    """Both tenants' cards, written through the commands and projected; a key for each."""

    def __init__(self, services: Services, clock: Clock) -> None:
        self.a, self.b = new_tenant(), new_tenant()
        self.ids: dict[str, UUID] = {}
        self.theirs: dict[str, UUID] = {}
        app = services.app
        planner, reader = {"agent_id": "planner"}, {"agent_id": "reader"}
        for key, command in (
                ("taipei", state("address", "Taipei", **planner)),
                ("jwt", knowledge("JWT", ("JWT", "auth"), scope="project", project_id="p1", **planner)),
                ("sessions", knowledge("Server-side sessions", ("sessions",), **reader)),
                ("employer", state("employer", "Acme", source="agent_inferred",
                                   inference_confidence=0.4, **reader)),
                ("stateless", knowledge("Stateless tokens", ("tokens",), **reader)),
                ("oauth", knowledge("OAuth", ("oauth",), **reader))):
            clock.advance(hours=1)
            self.ids[key] = app.remember(self.a, command).card_id
        app.link(self.a, Link(card_id=self.ids["sessions"], edge="contradicts", target_id=self.ids["jwt"]))
        app.link(self.a, Link(card_id=self.ids["jwt"], edge="contradicts", target_id=self.ids["stateless"]))
        app.link(self.a, Link(card_id=self.ids["oauth"], edge="related_to", target_id=self.ids["jwt"]))
        for key, command in (("jwt", knowledge("JWT", ("jwt",), **planner)),
                             ("cookies", knowledge("Cookies", ("cookies",), **planner))):
            self.theirs[key] = app.remember(self.b, command).card_id
        app.link(self.b, Link(card_id=self.theirs["cookies"], edge="contradicts",
                              target_id=self.theirs["jwt"]))
        scopes = ("memory:read",)
        self.key_a = services.keys.create(self.a, scopes, "cards test")[1]
        self.key_b = services.keys.create(self.b, scopes, "cards test")[1]

    def names(self, page: dict[str, Any]) -> set[str]:
        found = {UUID(card["card_id"]) for card in page["cards"]}
        named = {key for key, card_id in self.ids.items() if card_id in found}
        assert len(named) == len(found), "every card found is one of A's"
        return named


@pytest.fixture(scope="module")
def clock() -> Clock:
    return Clock()


@pytest.fixture(scope="module")
def services(pg_settings: Settings, admin_db: Database, clock: Clock) -> Iterator[Services]:
    built = build_services(pg_settings, clock=clock)
    yield built
    built.close()


@pytest.fixture(scope="module")
def world(services: Services, pg_settings: Settings, admin_db: Database, clock: Clock) -> World:
    made = World(services, clock)
    projector = make_projector(pg_settings, services.app, admin=admin_db)
    try:
        catch_up(projector, services.app)
    finally:
        projector.close()
    return made


@pytest.fixture(scope="module")
def served(services: Services) -> Iterator[ServedApi]:
    with ServedApi(services) as running:
        yield running


class Cards:
    """``palimpsest cards`` in this process, at the served API with one key, on an 80-column
    terminal, from a folder that holds no database."""

    def __init__(self, url: str, key: str) -> None:
        self.env = {"PALIMPSEST_URL": url, "PALIMPSEST_KEY": key, "COLUMNS": "80",
                    "PALIMPSEST_DATA_DIR": "/nonexistent/palimpsest"}

    def run(self, *args: str) -> Any:
        return CliRunner().invoke(cli, ["cards", *args], env=self.env)

    def json(self, *args: str, code: int = 0) -> dict[str, Any]:
        done = self.run(*args, "--json")
        assert done.exit_code == code, (args, done.stdout, done.stderr)
        answer: dict[str, Any] = json.loads(done.stdout)
        return answer


def test_cards_lists_counts_and_filters_over_the_server(world: World, served: ServedApi) -> None:
    mine = Cards(served.url, world.key_a)
    assert world.names(mine.json("--kind", "knowledge")) == {"jwt", "sessions", "stateless", "oauth"}
    assert world.names(mine.json("--kind", "state", "--type", "fact", "--source", "agent_inferred",
                                 "--confidence-below", "0.6")) == {"employer"}
    assert world.names(mine.json("--scope", "project", "--project", "p1")) == {"jwt"}
    per_agent = mine.json("--group-by", "agent_id")
    assert {c["key"]: c["count"] for c in per_agent["counts"]} == {"planner": 2, "reader": 4}
    assert per_agent["total"] == 6 and mine.json("--count")["total"] == 6
    against = mine.json("--concept", "JWT", "--edge", "contradicts")
    assert world.names(against) == {"sessions", "stateless"}
    theirs = Cards(served.url, world.key_b).json()
    assert {UUID(c["card_id"]) for c in theirs["cards"]} == set(world.theirs.values())


def test_cards_pages_with_the_cursor_or_all_at_once(world: World, served: ServedApi) -> None:
    mine = Cards(served.url, world.key_a)
    first = mine.json("--limit", "4")
    following = mine.json("--limit", "4", "--cursor", first["next_cursor"])
    assert len(first["cards"]) == 4 and following["next_cursor"] is None
    assert world.names(first) | world.names(following) == set(world.ids)
    assert not world.names(first) & world.names(following)
    every = mine.json("--limit", "2", "--all")
    assert world.names(every) == set(world.ids) and every["next_cursor"] is None
    said = mine.run("--limit", "4")
    assert said.exit_code == 0 and f"more: --cursor {first['next_cursor']}" in said.stdout


def test_the_table_prints_each_id_whole_to_copy_into_the_next_command(world: World,
                                                                     served: ServedApi) -> None:
    mine = Cards(served.url, world.key_a)
    said = mine.run("--concept", "JWT", "--edge", "contradicts")
    assert said.exit_code == 0, said.output
    words = " ".join(said.stdout.split())  # the content column wraps
    assert "Server-side sessions" in words and "Stateless tokens" in words and "OAuth" not in words
    starts = [line.split()[0] for line in said.stdout.splitlines()[1:] if line.strip()]
    assert {UUID(s) for s in starts if len(s) == 36} == {world.ids["sessions"], world.ids["stateless"]}
    history = CliRunner().invoke(cli, ["history", starts[0], "--json"], env=mine.env)
    assert history.exit_code == 0 and json.loads(history.stdout)["cards"][0]["card_id"] == starts[0]
    wide = mine.run("--concept", "JWT", "--edge", "contradicts", "--wide")
    assert "reader" in wide.stdout.splitlines()[1], "--wide keeps the agent column"


def test_a_refused_slice_is_one_json_object(world: World, served: ServedApi) -> None:
    mine = Cards(served.url, world.key_a)
    refused = mine.json("--kind", "fact", code=2)["error"]
    assert refused["code"] == "invalid_kind" and "kinds[0]" in refused["message"]
    assert mine.json("--related-to", "not-an-id", code=2)["error"]["code"] == "invalid_request"
    assert mine.json("--tenant", world.b, code=2)["error"]["code"] == "usage_error"
    nobody = Cards(served.url, "pk_not_a_key").json(code=2)["error"]
    assert nobody["code"] == "unauthenticated"
