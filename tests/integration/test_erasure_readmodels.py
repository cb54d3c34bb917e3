"""Every read model forgets (DESIGN §7, issue 22), on the embedded PostgreSQL: a person written
through every path (``tests.erasure_story``), projected and embedded, then erased — subject and
session — leaves none of their texts in any column of any table of the read schema or the event
schema (the event table's stored bytes and the key table included), while the other person's
stay, searchable. A card, a session and a tenant are erased the same way. Rebuilds after the
erasures (by one process and by several, and as known before them) equal the incremental read
models; search never returns a tombstone; history and the listings show it as erased."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import Any
from uuid import UUID, uuid4

import numpy as np
import pytest
from psycopg import sql

from infra.embedders import CACHE_TABLE, CachedEmbedder, CacheKeys, Embedder
from infra.postgres import Database, projector_database
from infra.settings import Settings
from projections.embeddings import EmbeddingProjection
from projections.replay import build_indexes, catch_up, project_into, rebuild
from services.command.commands import Erase
from services.command.memory import Palimpsest
from services.query.queries import Queries
from services.query.readmodels import ReadModels
from services.query.retrieval.retriever import Retriever
from services.query.slicing import CardSlice, list_cards
from tests.erasure_story import arbitrate, forget, person, tell
from tests.support import new_tenant, state

pytestmark = pytest.mark.integration

#: The tables a rebuild writes, compared per tenant with the incremental ones.
REBUILT = ("nodes", "slots", "cards", "card_terms", "card_versions", "card_relations",
           "arbitration_queue", "proposals", "ingestions", "erasures", "projection_tracking")


class Words(Embedder):
    """A deterministic stand-in for a model: each word of a text hashed into one of 512 axes."""

    dimensions = 512

    def __init__(self) -> None:
        self.model = f"fake-erasure-{uuid4().hex[:8]}"
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        vectors = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                vectors[row, int(hashlib.sha256(word.encode()).hexdigest(), 16) % 512] += 1.0
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return (vectors / np.where(norms == 0, 1.0, norms)).tolist()  # type: ignore[no-any-return]


@pytest.fixture
def words() -> Words:
    return Words()


@pytest.fixture
def reads(runtime_db: Database, pg_settings: Settings) -> Iterator[ReadModels]:
    made = ReadModels(runtime_db, pg_settings.read_schema)
    yield made
    made.close()


@pytest.fixture
def queries(reads: ReadModels, pg_settings: Settings, words: Words, app: Palimpsest) -> Queries:
    retriever = Retriever(reads, pg_settings.read_schema, pg_settings.retrieval, words)
    return Queries(reads, retriever, pg_settings, app.test_clock)  # type: ignore[attr-defined]


def embed(settings: Settings, admin: Database, app: Palimpsest, words: Words) -> CachedEmbedder:
    """Every pending card embedded by ``words`` behind the cache, as the projector role."""
    connect = projector_database(admin, settings).connect
    cache = CachedEmbedder(words, connect, schema=settings.event_schema, keys=CacheKeys(app.keyring))
    EmbeddingProjection(connect, settings.read_schema, cache).embed_all()
    return cache


def project(settings: Settings, admin: Database, app: Palimpsest, projector: Any,
            words: Words) -> None:
    catch_up(projector, app)
    embed(settings, admin, app, words)


def dump(admin: Database, schemas: Sequence[str]) -> tuple[str, list[bytes]]:
    """Every row of every table of ``schemas`` as text, lower-cased, and every bytea value as
    stored (the event table's states, the key table's material …)."""
    texts: list[str] = []
    blobs: list[bytes] = []
    with admin.connect() as conn:
        tables = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.tables "
            "WHERE table_schema = ANY(%s) AND table_type = 'BASE TABLE'", (list(schemas),)).fetchall()
        for schema, table in tables:
            name = sql.Identifier(schema, table)
            texts += [row[0] for row in conn.execute(
                sql.SQL("SELECT t::text FROM {} t").format(name)).fetchall()]
            for (column,) in conn.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
                    "AND table_name = %s AND data_type = 'bytea'", (schema, table)).fetchall():
                blobs += [bytes(v) for (v,) in conn.execute(sql.SQL("SELECT {} FROM {}").format(
                    sql.Identifier(column), name)).fetchall() if v is not None]
    names = {table for _, table in tables}
    assert {"cards", "card_versions", "card_terms", "card_embeddings", "erasures"} <= names
    return "\n".join(texts).lower(), blobs


def found_in(dumped: tuple[str, list[bytes]], canaries: Sequence[str]) -> list[str]:
    text, blobs = dumped
    return [c for c in canaries
            if c in text or any(c.encode() in blob or c.capitalize().encode() in blob
                                for blob in blobs)]


def rows(admin: Database, schema: str, table: str, tenant: str) -> list[tuple[Any, ...]]:
    with admin.connect() as conn:
        found = conn.execute(sql.SQL("SELECT * FROM {} WHERE tenant_id = %s").format(
            sql.Identifier(schema, table)), (tenant,)).fetchall()
    return sorted(found, key=repr)


def cache_rows(admin: Database, settings: Settings, tenant: str) -> set[bytes]:
    with admin.connect() as conn:
        return {bytes(digest) for (digest,) in conn.execute(sql.SQL(
            "SELECT content_hash FROM {} WHERE tenant_id = %s").format(
            sql.Identifier(settings.event_schema, CACHE_TABLE)), (tenant,)).fetchall()}


def embedded(admin: Database, settings: Settings, tenant: str) -> dict[UUID, bytes]:
    with admin.connect() as conn:
        return {card_id: bytes(digest) for card_id, digest in conn.execute(sql.SQL(
            "SELECT card_id, content_hash FROM {} WHERE tenant_id = %s").format(
            sql.Identifier(settings.read_schema, "card_embeddings")), (tenant,)).fetchall()}


def found_cards(queries: Queries, tenant: str, text: str) -> set[UUID]:
    return {card.card_id for card in queries.search(tenant, text).results}


def drop(admin: Database, schema: str) -> None:
    with admin.connect(autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def assert_rebuilds_equal(settings: Settings, admin: Database, app: Palimpsest, tenant: str,
                          workers: int) -> None:
    schema = f"palimpsest_read_erasure_{workers}"
    try:
        rebuild(settings, app, into=schema, workers=workers)
        for table in REBUILT:
            assert rows(admin, schema, table, tenant) == rows(
                admin, settings.read_schema, table, tenant), f"{table} differs after a rebuild"
    finally:
        drop(admin, schema)


def test_a_person_erased_leaves_no_text_anywhere_and_the_other_stays_searchable(
        pg_settings, admin_db, app, projector, queries, words) -> None:
    clock, tenant = app.test_clock, new_tenant()
    mira, noah = tell(app, tenant, clock, person("mira")), tell(app, tenant, clock, person("noah"))
    arbitrate(app, tenant, mira)
    project(pg_settings, admin_db, app, projector, words)
    schemas = (pg_settings.read_schema, pg_settings.event_schema)
    assert _tables(admin_db, pg_settings.event_schema) >= {
        "palimpsest_events", "erasure_keys", "embedding_cache", "api_keys"}
    assert found_in(dump(admin_db, schemas), mira.projected) == mira.projected, "written"
    assert mira.cards["city2"] in found_cards(queries, tenant, mira.canary("city2"))
    cached = cache_rows(admin_db, pg_settings, tenant)
    theirs = {card_id: digest for card_id, digest in embedded(admin_db, pg_settings, tenant).items()
              if card_id in mira.cards.values()}
    assert theirs and set(theirs.values()) <= cached
    moment = clock.now
    clock.advance(days=1)
    erased_at = clock.now
    results = forget(app, tenant, mira)
    project(pg_settings, admin_db, app, projector, words)

    dumped = dump(admin_db, schemas)
    assert found_in(dumped, mira.canaries) == [], "no erased text in any table"
    assert found_in(dumped, noah.projected) == noah.projected, "the other person's texts stay"
    for name in ("city2", "skill2", "title2", "body1", "promise", "turn2"):
        found = found_cards(queries, tenant, mira.canary(name))
        assert not found & set(mira.cards.values()), f"{name}: no tombstone found"
        assert found_cards(queries, tenant, noah.canary(name)), f"{name}: still found"
    assert not cache_rows(admin_db, pg_settings, tenant) & set(theirs.values()), "cache forgot"
    assert not set(embedded(admin_db, pg_settings, tenant)) & set(mira.cards.values())
    assert cache_rows(admin_db, pg_settings, tenant) <= set(
        embedded(admin_db, pg_settings, tenant).values()) | cached

    (history,) = queries.history(tenant, str(mira.cards["city1"]))
    assert history.erased and history.erased_at == erased_at and history.kind == "state"
    assert (history.subject, history.label) == (None, None), "the slot's names went with it"
    assert len(history.versions) > 1 and all(v.value is None and v.erased for v in history.versions)
    page = list_cards(queries.read, tenant, CardSlice(include_superseded=True, limit=500))
    listed = {card.card_id: card for card in page.cards}
    assert listed[mira.cards["event"]].erased and listed[mira.cards["event"]].content is None
    assert not listed[noah.cards["event"]].erased
    listing = queries.erasures(tenant)
    assert [e["erasure_id"] for e in listing] == [r.erasure_id for r in reversed(results)]
    assert listing[-1]["unit"] == "subject" and listing[-1]["cards"] == len(results[0].card_ids)
    assert set(listing[0]) == {"erasure_id", "unit", "target", "basis", "requested_by",
                               "erased_at", "keys_destroyed", "cards"}

    for workers in (1, 3):
        assert_rebuilds_equal(pg_settings, admin_db, app, tenant, workers)
    past = rebuild(pg_settings, app, known_at=moment, workers=2)
    projected = "palimpsest_read_erasure_projected"
    try:
        assert found_in(dump(admin_db, (past.schema,)), mira.canaries) == []
        assert noah.canary("city3") in dump(admin_db, (past.schema,))[0]
        stamps = {row[0] for row in _select(admin_db, past.schema, "cards", "erased_at", tenant)}
        assert stamps == {None, erased_at}, "as known before: the tombstones, at the erasure's time"
        assert not rows(admin_db, past.schema, "erasures", tenant)
        project_into(pg_settings, app, admin_db, projected, past.head, moment)
        build_indexes(admin_db, projected, vector_index="none", words=True, connections=1)
        for table in REBUILT:
            assert rows(admin_db, projected, table, tenant) == rows(
                admin_db, past.schema, table, tenant), f"{table}: projected as known differs"
    finally:
        drop(admin_db, past.schema)
        drop(admin_db, projected)


def _tables(admin: Database, schema: str) -> set[str]:
    with admin.connect() as conn:
        return {name for (name,) in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (schema,)).fetchall()}


def _select(admin: Database, schema: str, table: str, column: str, tenant: str) -> list[Any]:
    with admin.connect() as conn:
        return conn.execute(sql.SQL("SELECT {} FROM {} WHERE tenant_id = %s").format(
            sql.Identifier(column), sql.Identifier(schema, table)), (tenant,)).fetchall()


def test_an_erased_card_is_a_tombstone_everywhere_and_its_slot_still_works(
        pg_settings, admin_db, app, projector, queries, words) -> None:
    tenant, clock = new_tenant(), app.test_clock
    canary = f"zqcard{uuid4().hex[:6]}"
    old = app.remember(tenant, state("diet", f"{canary}vegetarian"))
    clock.advance(days=2)
    app.remember(tenant, state("diet", f"{canary}pescatarian"))
    project(pg_settings, admin_db, app, projector, words)
    clock.advance(days=1)
    erased = app.erase(tenant, Erase(unit="card", card_id=old.card_id))
    clock.advance(days=1)
    after = app.remember(tenant, state("diet", f"{canary}vegan"))
    verified = app.remember(tenant, state("diet", f"{canary}vegan"))
    assert verified.card_id == after.card_id, "the same value again verifies"
    project(pg_settings, admin_db, app, projector, words)
    with admin_db.connect() as conn:
        row = conn.execute(sql.SQL(
            "SELECT content, title, tags, terms, bigrams, fuzzy_text, slot_words, item_key, "
            "erased_at, label, kind, memory_type, valid_from, recorded_at, aggregate_id "
            "FROM {s}.cards WHERE tenant_id = %s AND card_id = %s").format(
            s=sql.Identifier(pg_settings.read_schema)), (tenant, old.card_id)).fetchone()
        words_left = conn.execute(sql.SQL(
            "SELECT count(*) FROM {s}.card_terms WHERE tenant_id = %s AND card_id = %s").format(
            s=sql.Identifier(pg_settings.read_schema)), (tenant, old.card_id)).fetchone()
        vacuumed = conn.execute(
            "SELECT last_vacuum FROM pg_stat_all_tables WHERE schemaname = %s "
            "AND relname = 'cards'", (pg_settings.read_schema,)).fetchone()
    assert row[:9] == (None, None, [], [], [], "", None, None, row[8]) and row[8] is not None
    assert row[9:12] == ("diet", "state", "fact") and row[14] == old.aggregate_id
    assert words_left == (0,) and vacuumed[0] is not None, "no words; the tables were vacuumed"
    assert erased.card_ids == (old.card_id,)
    assert old.card_id not in found_cards(queries, tenant, f"{canary}vegetarian")
    assert after.card_id in found_cards(queries, tenant, f"{canary}vegan")
    assert found_in(dump(admin_db, (pg_settings.read_schema,)), [f"{canary}vegetarian"]) == []
    assert_rebuilds_equal(pg_settings, admin_db, app, tenant, 2)


def test_an_erased_session_and_an_erased_tenant(pg_settings, admin_db, app, projector,
                                                  words) -> None:
    tenant, clock = new_tenant(), app.test_clock
    mira, noah = tell(app, tenant, clock, person("mira")), tell(app, tenant, clock, person("noah"))
    project(pg_settings, admin_db, app, projector, words)
    app.erase(tenant, Erase(unit="session", session_id=noah.session))
    project(pg_settings, admin_db, app, projector, words)
    dumped = dump(admin_db, (pg_settings.read_schema,))
    gone = [noah.canary(n) for n in ("cafe2", "title2", "body1", "ktag1", "turn1", "turn2",
                                     "error", "why", "note")]
    assert found_in(dumped, gone) == [], "the session's turns and what was made of them"
    assert found_in(dumped, [noah.canary("city3"), noah.canary("skill2")]) == [
        noah.canary("city3"), noah.canary("skill2")], "the person's other cards stay"
    assert found_in(dumped, mira.projected) == mira.projected
    assert_rebuilds_equal(pg_settings, admin_db, app, tenant, 1)

    other, theirs = new_tenant(), f"zqother{uuid4().hex[:6]}"
    app.remember(other, state("city", theirs))
    app.erase(tenant, Erase(unit="tenant", basis="offboarding"))
    project(pg_settings, admin_db, app, projector, words)
    assert not cache_rows(admin_db, pg_settings, tenant), "a tenant's cache goes with it"
    assert cache_rows(admin_db, pg_settings, other)
    dumped = dump(admin_db, (pg_settings.read_schema, pg_settings.event_schema))
    assert found_in(dumped, [*mira.canaries, *noah.canaries]) == []
    assert found_in(dumped, [theirs]) == [theirs], "another tenant's stays"
    assert_rebuilds_equal(pg_settings, admin_db, app, tenant, 2)


def test_the_broker_topics_and_the_logs_carry_no_erased_text(  # type: ignore[no-untyped-def]
        pg_settings, admin_db, app, projector, words, broker, caplog) -> None:
    """The relay publishes what the store holds, read from offset 0 after the erasure: every
    event is there, none carries a canary of either person in the clear (sealed fields are
    ciphertext), and nothing logged while the story was told, erased and projected holds one."""
    from infra.relay import Relay
    from infra.relay_messages import decode_messages
    from tests.integration.test_relay import consume, relay_until

    caplog.set_level("DEBUG")
    clock, tenant = app.test_clock, new_tenant()
    mira, noah = tell(app, tenant, clock, person("mira")), tell(app, tenant, clock, person("noah"))
    project(pg_settings, admin_db, app, projector, words)
    forget(app, tenant, mira)
    project(pg_settings, admin_db, app, projector, words)
    topic = f"erasure-{uuid4().hex[:8]}"
    relay = Relay(app.recorder, broker.bootstrap, topic=topic, name=f"relay-{topic}")
    try:
        last = app.recorder.max_notification_id() or 0
        relay_until(relay, last)
        records = consume(broker.bootstrap, topic, at_least=last)
    finally:
        relay.close()
    carried = [m for r in records for m in decode_messages(r.value)]
    logged = [n.id for n in app.recorder.select_notifications(start=1, limit=10**7, stop=last)]
    assert sorted(m.notification_id for m in carried) == logged, "every event, each once"
    payload = b"".join(bytes(r.value) + bytes(r.key or b"") for r in records)
    assert found_in(("", [payload]), mira.canaries) == [], "no erased text on the broker"
    assert found_in(("", [payload]), noah.canaries) == [], "nor any text in the clear"
    assert found_in((caplog.text, []), mira.canaries + noah.canaries) == [], "nor in the logs"
