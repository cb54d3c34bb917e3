"""A rebuild's binary COPY (``projections.copying``) stores every value as the incremental
projector's INSERT stores it: texts that a text COPY would have to escape, arrays with NULLs,
empty and open ranges, a ``real`` confidence, times at another offset."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from uuid import uuid4

import pytest
from psycopg import sql
from psycopg.types.range import Range

from infra.postgres import Database
from projections.copying import copy_tables
from projections.ops import CARD_COLUMNS, CASE_COLUMNS, VERSION_COLUMNS
from projections.schema import create_read_schema
from projections.sinks import _param

pytestmark = pytest.mark.integration

TEXTS = ['a "quoted" word', "back\\slash", "comma, brace {}", "", "NULL", "資料庫", "tab\tand\nline",
         "emoji 🧭"]


def rows(tenant: str) -> dict[str, tuple[tuple[str, ...], list[tuple[Any, ...]]]]:
    at = datetime(2026, 9, 1, 9, 0, 0, 17, tzinfo=UTC)
    taipei = datetime(2026, 9, 1, 17, 30, tzinfo=timezone(timedelta(hours=8)))
    card, other, slot, case = uuid4(), uuid4(), uuid4(), uuid4()
    ranges = [Range(at, None, "[)"), Range(at, at, "[]"), Range(None, taipei, "(]"),
              Range(empty=True), Range(at, taipei + timedelta(days=1), "[)")]
    versions = [(tenant, card, n + 1, TEXTS[n % len(TEXTS)], None if n % 2 else "title", "open",
                 valid, ranges[0], bool(n % 2), taipei if n % 2 else None, None)
                for n, valid in enumerate(ranges)]
    case_row = (tenant, case, slot, "subject", "label", [*TEXTS, None], [card, None, other],
                TEXTS[0], card, taipei, "why", at, "user_stated", None, "s1", 1 / 3)
    cards = [card_row(tenant, card, slot, at, 0.1), card_row(tenant, other, slot, taipei, 1 / 3)]
    return {
        "nodes": (("tenant_id", "node_id", "node_kind"),
                  [(tenant, card, "card"), (tenant, other, "card"), (tenant, slot, "slot")]),
        "cards": ((*CARD_COLUMNS, "version"), cards),
        "card_versions": (VERSION_COLUMNS, versions),
        "arbitration_queue": (CASE_COLUMNS, [case_row]),
    }


def card_row(tenant: str, card: Any, slot: Any, at: datetime, confidence: float
             ) -> tuple[Any, ...]:
    """A state card's row, its text and words awkward to write as literals, its confidence a
    ``real``."""
    row: dict[str, Any] = dict.fromkeys(CARD_COLUMNS)
    row.update(tenant_id=tenant, card_id=card, aggregate_id=slot, kind="state", memory_type="fact",
               scope="personal", content=TEXTS[0], label=TEXTS[1], recorded_at=at, updated_at=at,
               valid_from=at, source="agent_inferred", inference_confidence=confidence,
               tags=TEXTS, terms=[], bigrams=["台北", None], fuzzy_text=TEXTS[2],
               slot_words=None)
    return (*row.values(), 2)


def inserted(conn: Any, schema: str, tables: dict[str, Any]) -> None:
    """The rows as the incremental sink writes them: one INSERT each, its parameters."""
    for table, (columns, values) in tables.items():
        statement = sql.SQL("INSERT INTO {}.{} ({}) VALUES ({})").format(
            sql.Identifier(schema), sql.Identifier(table),
            sql.SQL(", ").join(map(sql.Identifier, columns)),
            sql.SQL(", ").join(sql.Placeholder() * len(columns)))
        for row in values:
            conn.execute(statement, [_param(c, v) for c, v in zip(columns, row, strict=True)])


def stored(conn: Any, schema: str, table: str) -> list[str]:
    return sorted(r[0] for r in conn.execute(sql.SQL("SELECT t::text FROM {}.{} t").format(
        sql.Identifier(schema), sql.Identifier(table))))


def test_a_binary_copy_stores_what_an_insert_stores(admin_db: Database, pg_settings) -> None:
    tenant, schemas = f"t-{uuid4().hex[:8]}", [f"copying_{uuid4().hex[:8]}" for _ in range(2)]
    tables = rows(tenant)
    with admin_db.connect(autocommit=True) as conn:
        for schema in schemas:
            create_read_schema(conn, schema, reader=pg_settings.runtime_role,
                               writer=pg_settings.projector_role, indexes=False)
    try:
        with admin_db.connect() as conn, conn.transaction(), conn.cursor() as cur:
            assert copy_tables(cur, schemas[0], tables) == {t: len(r) for t, (_, r) in tables.items()}
            inserted(conn, schemas[1], tables)
        with admin_db.connect() as conn:
            for table in tables:
                copied, inserts = stored(conn, schemas[0], table), stored(conn, schemas[1], table)
                assert copied == inserts and len(copied) == len(tables[table][1])
            confidence = conn.execute(sql.SQL(
                "SELECT proposed_confidence FROM {}.arbitration_queue").format(
                sql.Identifier(schemas[0]))).fetchone()
            assert confidence == (1 / 3,)
    finally:
        with admin_db.connect(autocommit=True) as conn:
            for schema in schemas:
                conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
