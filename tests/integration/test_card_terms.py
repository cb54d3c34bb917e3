"""``card_terms``: the words index the database keeps from ``cards`` in the same transaction, as
the projector role writes, and still after a rebuilt schema is swapped into place."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg import sql

from infra.postgres import Database, projector_database
from infra.settings import Settings
from projections.replay import swap
from projections.schema import create_read_indexes, create_read_schema
from projections.text import slot_words
from tests.support import new_tenant

pytestmark = pytest.mark.integration

NOW = datetime(2026, 11, 1, tzinfo=UTC)


@pytest.fixture
def schema(admin_db: Database, pg_settings: Settings) -> Iterator[str]:
    name = f"palimpsest_terms_{uuid.uuid4().hex[:8]}"
    with admin_db.connect(autocommit=True) as conn:
        create_read_schema(conn, name, reader=pg_settings.runtime_role, writer=pg_settings.projector_role,
                           dimensions=pg_settings.embedding_dimensions, vector_index="none")
    yield name
    with admin_db.connect(autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def put_card(conn: psycopg.Connection[Any], schema: str, tenant: str, **values: Any) -> uuid.UUID:
    card_id = uuid.uuid4()
    row = {"tenant_id": tenant, "card_id": card_id, "aggregate_id": uuid.uuid4(), "kind": "state",
           "memory_type": "fact", "scope": "personal", "content": "x", "recorded_at": NOW,
           "updated_at": NOW, "source": "user_stated", "valid_from": NOW, **values}
    if row.get("label"):  # what the projection takes from the card's slot
        row["slot_words"] = list(slot_words(row.get("subject"), row["label"]))
    s = sql.Identifier(schema)
    conn.execute(sql.SQL("INSERT INTO {}.nodes (tenant_id, node_id, node_kind) VALUES (%s, %s, 'card')")
                 .format(s), (tenant, card_id))
    conn.execute(sql.SQL("INSERT INTO {}.cards ({}) VALUES ({})").format(
        s, sql.SQL(", ").join(map(sql.Identifier, row)), sql.SQL(", ").join(sql.Placeholder() * len(row))),
        list(row.values()))
    return card_id


def words(conn: psycopg.Connection[Any], schema: str, card_id: uuid.UUID) -> dict[str, bool]:
    rows = conn.execute(sql.SQL("SELECT term, live FROM {}.card_terms WHERE card_id = %s").format(
        sql.Identifier(schema)), (card_id,)).fetchall()
    return {row[0]: row[1] for row in rows}


@pytest.fixture
def writer(admin_db: Database, pg_settings: Settings) -> Iterator[tuple[Database, str]]:
    tenant = new_tenant()
    yield projector_database(admin_db, pg_settings), tenant


def as_tenant(db: Database, tenant: str) -> psycopg.Connection[Any]:
    conn = db.connect(autocommit=True)
    conn.execute("SELECT set_config('palimpsest.tenant', %s, false)", (tenant,))
    return conn


def test_a_slot_card_is_found_by_its_terms_its_slot_its_label_and_its_type(writer, schema) -> None:  # type: ignore[no-untyped-def]
    db, tenant = writer
    with as_tenant(db, tenant) as conn:
        card = put_card(conn, schema, tenant, subject="fibon", label="launch_date",
                        cardinality="single_value", terms=["上线", "launch"])
        mine = put_card(conn, schema, tenant, subject="user", label="address",
                        cardinality="single_value", terms=["kaohsiung"])
        event = put_card(conn, schema, tenant, kind="event", memory_type="event", terms=["會議"],
                         occurred_at=NOW, subject="user", label="ignored")
        assert words(conn, schema, card) == dict.fromkeys(
            ["上线", "launch", "fibon", "date", "=label:launch_date", "=type:fact"], True)
        assert set(words(conn, schema, mine)) == {"kaohsiung", "address", "=label:address", "=type:fact"}, \
            "the user's own subject says nothing"
        assert set(words(conn, schema, event)) == {"會議", "=type:event"}, "only slot cards have slot words"


def test_superseding_retracting_and_editing_keep_the_index_in_step(writer, schema) -> None:  # type: ignore[no-untyped-def]
    db, tenant = writer
    s = sql.Identifier(schema)
    with as_tenant(db, tenant) as conn:
        card = put_card(conn, schema, tenant, memory_type="preference", terms=["咖啡", "latte"])
        conn.execute(sql.SQL("UPDATE {}.cards SET valid_to = %s WHERE card_id = %s").format(s), (NOW, card))
        assert words(conn, schema, card) == dict.fromkeys(["咖啡", "latte", "=type:preference"], False)
        conn.execute(sql.SQL("UPDATE {}.cards SET valid_to = NULL, terms = %s WHERE card_id = %s").format(s),
                     (["茶"], card))
        assert words(conn, schema, card) == dict.fromkeys(["茶", "=type:preference"], True)
        conn.execute(sql.SQL("UPDATE {}.cards SET retracted_at = %s WHERE card_id = %s").format(s),
                     (NOW, card))
        assert words(conn, schema, card) == dict.fromkeys(["茶", "=type:preference"], False)


def test_the_index_follows_a_rebuilt_schema_swapped_into_place(admin_db, pg_settings, writer,
                                                                schema) -> None:  # type: ignore[no-untyped-def]
    db, tenant = writer
    fresh = schema + "_next"
    with admin_db.connect(autocommit=True) as conn:
        create_read_schema(conn, fresh, reader=pg_settings.runtime_role, writer=pg_settings.projector_role,
                           dimensions=pg_settings.embedding_dimensions, vector_index="none")
    swap(admin_db, schema, fresh)  # ``schema`` is now the one made as ``fresh``
    with as_tenant(db, tenant) as conn:
        card = put_card(conn, schema, tenant, terms=["renamed"])
        assert words(conn, schema, card) == {"renamed": True, "=type:fact": True}


def test_another_tenant_reads_no_words(writer, schema, runtime_db) -> None:  # type: ignore[no-untyped-def]
    db, tenant = writer
    with as_tenant(db, tenant) as conn:
        put_card(conn, schema, tenant, terms=["secret"])
    with as_tenant(runtime_db, tenant) as conn:
        assert conn.execute(sql.SQL("SELECT count(*) FROM {}.card_terms").format(
            sql.Identifier(schema))).fetchone() == (2,)
    with as_tenant(runtime_db, new_tenant()) as conn:
        assert conn.execute(sql.SQL("SELECT count(*) FROM {}.card_terms").format(
            sql.Identifier(schema))).fetchone() == (0,)


def test_cards_stored_before_the_trigger_get_their_words_when_it_is_made(admin_db, pg_settings,
                                                                         writer) -> None:  # type: ignore[no-untyped-def]
    """A rebuild copies cards into a schema without indexes; making them writes the words."""
    db, tenant = writer
    name = f"palimpsest_terms_{uuid.uuid4().hex[:8]}"
    with admin_db.connect(autocommit=True) as conn:
        create_read_schema(conn, name, reader=pg_settings.runtime_role, writer=pg_settings.projector_role,
                           dimensions=pg_settings.embedding_dimensions, vector_index="none", indexes=False)
    try:
        with as_tenant(db, tenant) as conn:
            early = put_card(conn, name, tenant, terms=["early"])
            assert words(conn, name, early) == {}
        with admin_db.connect(autocommit=True) as conn:
            create_read_indexes(conn, name, vector_index="none")
        with as_tenant(db, tenant) as conn:
            late = put_card(conn, name, tenant, terms=["late"])
            assert words(conn, name, early) == {"early": True, "=type:fact": True}
            assert words(conn, name, late) == {"late": True, "=type:fact": True}
    finally:
        with admin_db.connect(autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
