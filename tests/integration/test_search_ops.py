"""The read schema's own search operators (decision 0018): the same answers as the stock ones;
made without a superuser as plain SQL, with a warning, and made LEAKPROOF by a superuser later."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from infra.postgres import Database
from infra.settings import Settings
from projections.search_ops import create_search_operators, has_classes, index_classes

pytestmark = pytest.mark.integration

SCHEMA = "search_ops_probe"

#: (condition with the schema's operator, the same with the stock one), on literal operands.
PAIRS = [
    ("ARRAY['ab','cd'] OPERATOR({s}.&&) ARRAY['cd','ef']", "ARRAY['ab','cd'] && ARRAY['cd','ef']"),
    ("ARRAY['ab'] OPERATOR({s}.&&) ARRAY['cd']", "ARRAY['ab'] && ARRAY['cd']"),
    ("ARRAY['ab','cd'] OPERATOR({s}.@>) ARRAY['cd']", "ARRAY['ab','cd'] @> ARRAY['cd']"),
    ("ARRAY['ab'] OPERATOR({s}.@>) ARRAY['ab','cd']", "ARRAY['ab'] @> ARRAY['ab','cd']"),
    ("ARRAY['ab'] OPERATOR({s}.<@) ARRAY['ab','cd']", "ARRAY['ab'] <@ ARRAY['ab','cd']"),
    ("'nubmer'::text OPERATOR({s}.<%) 'street number 40'", "'nubmer'::text <% 'street number 40'"),
    ("'river'::text OPERATOR({s}.<%) 'lives by the river'", "'river'::text <% 'lives by the river'"),
    ("'zebra'::text OPERATOR({s}.<%) 'lives by the river'", "'zebra'::text <% 'lives by the river'"),
    ("'street number 40'::text OPERATOR({s}.%>) 'nubmer'", "'street number 40'::text %> 'nubmer'"),
    ("NULL::text[] OPERATOR({s}.&&) ARRAY['ab']", "NULL::text[] && ARRAY['ab']"),
]


@pytest.fixture
def probe(admin_db: Database, pg_settings: Settings) -> Iterator[psycopg.Connection[Any]]:
    """An administrator's connection and an empty schema the projector role owns."""
    with admin_db.connect(autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
        conn.execute(sql.SQL("CREATE SCHEMA {} AUTHORIZATION {}").format(
            sql.Identifier(SCHEMA), sql.Identifier(pg_settings.projector_role)))
        try:
            yield conn
        finally:
            conn.execute("RESET ROLE")
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(SCHEMA)))


def answers(conn: psycopg.Connection[Any]) -> list[tuple[Any, Any]]:
    conn.execute("SET pg_trgm.word_similarity_threshold = 0.6")
    s = sql.Identifier(SCHEMA).as_string(conn)
    return [tuple(conn.execute(f"SELECT {ours.format(s=s)}, {stock}").fetchone() or ())
            for ours, stock in PAIRS]


def _leakproof(conn: psycopg.Connection[Any]) -> set[bool]:
    rows = conn.execute("SELECT proleakproof FROM pg_proc WHERE pronamespace = %s::regnamespace",
                        (SCHEMA,)).fetchall()
    return {row[0] for row in rows}


def test_the_schemas_operators_answer_as_the_stock_ones(probe: psycopg.Connection[Any]) -> None:
    assert create_search_operators(probe, SCHEMA)
    assert has_classes(probe, SCHEMA) and _leakproof(probe) == {True}
    found = answers(probe)
    assert all(ours == stock for ours, stock in found), found
    assert {ours for ours, _ in found} == {True, False, None}


def test_without_a_superuser_they_are_plain_and_a_superuser_makes_them_leakproof(
        probe: psycopg.Connection[Any], pg_settings: Settings, caplog: pytest.LogCaptureFixture) -> None:
    """A schema made by a role that is no superuser: plain SQL functions, the stock classes for
    the indexes, a warning; the same answers. A superuser's run later makes them LEAKPROOF and
    adds the classes, in place."""
    probe.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(pg_settings.projector_role)))
    with caplog.at_level(logging.WARNING, logger="projections.search_ops"):
        assert not create_search_operators(probe, SCHEMA)
    assert "not a superuser" in caplog.text
    assert not has_classes(probe, SCHEMA) and _leakproof(probe) == {False}
    assert [c.as_string(probe) for c in index_classes(probe, SCHEMA).values()] == [
        "array_ops", "gin_trgm_ops"]
    found = answers(probe)
    assert all(ours == stock for ours, stock in found), found
    probe.execute("RESET ROLE")
    assert create_search_operators(probe, SCHEMA)
    assert has_classes(probe, SCHEMA) and _leakproof(probe) == {True}
    assert answers(probe) == found
