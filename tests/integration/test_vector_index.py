"""The vector index follows the table: none below MIN_ROWS, IVFFlat with √rows lists once there
are enough, built again when the table has doubled, another kind's index dropped; the semantic
route reads through it."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
import pytest
from psycopg import sql

from infra.postgres import Database, vector_search_available
from infra.settings import Settings
from projections.schema import create_read_schema
from projections.vector_index import (
    MIN_ROWS,
    NAMES,
    VectorIndexKeeper,
    built_over,
    keep,
    lists_for,
)

pytestmark = pytest.mark.integration

SCHEMA = "vector_index_test"
TENANT = "t-vectors"


@pytest.fixture
def schema(admin_db: Database, pg_settings: Settings) -> Iterator[psycopg.Connection[Any]]:
    if not vector_search_available(pg_settings):
        pytest.skip("this server cannot compute vector distances: python -m infra.pgvector_build")
    with admin_db.connect(autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
        create_read_schema(conn, SCHEMA, reader=pg_settings.runtime_role,
                           writer=pg_settings.projector_role, vector_index="hnsw")
        try:
            yield conn
        finally:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(SCHEMA)))


def add_vectors(conn: psycopg.Connection[Any], count: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(count, 512)).astype(np.float32)
    ids = [uuid.UUID(int=int(rng.integers(2**62)) << 64 | i) for i in range(count)]
    s = sql.Identifier(SCHEMA)
    with conn.transaction():
        with conn.cursor().copy(sql.SQL("COPY {}.nodes (tenant_id, node_id, node_kind) FROM STDIN")
                                .format(s)) as copy:
            for card_id in ids:
                copy.write_row((TENANT, card_id, "card"))
        with conn.cursor().copy(sql.SQL(
                "COPY {}.card_embeddings (tenant_id, card_id, model, content_hash, embedding) "
                "FROM STDIN").format(s)) as copy:
            for card_id, vector in zip(ids, vectors, strict=True):
                copy.write_row((TENANT, card_id, "m", b"h",
                                "[" + ",".join(f"{x:.5f}" for x in vector) + "]"))
    conn.execute(sql.SQL("ANALYZE {}.card_embeddings").format(s))


def indexes(conn: psycopg.Connection[Any]) -> dict[str, list[str] | None]:
    rows = conn.execute(
        "SELECT i.relname, i.reloptions FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
        "WHERE x.indrelid = to_regclass(%s) AND i.relname <> 'card_embeddings_pkey'",
        (f"{SCHEMA}.card_embeddings",))
    return {row[0]: row[1] for row in rows}


def test_lists_grow_with_the_square_root_of_the_rows() -> None:
    assert [lists_for(n) for n in (0, 1_000, 125_000, 1_250_000)] == [1, 31, 353, 1118]
    assert built_over(["lists=353"]) == 353 * 353 <= 125_000


def test_ivfflat_waits_for_rows_then_follows_the_table(schema: psycopg.Connection[Any]) -> None:
    conn = schema
    assert NAMES["hnsw"] in indexes(conn)
    add_vectors(conn, MIN_ROWS // 2, seed=1)
    assert keep(conn, SCHEMA, "ivfflat") is None  # too few vectors: an exact scan, the HNSW kept
    assert NAMES["hnsw"] in indexes(conn)

    add_vectors(conn, MIN_ROWS, seed=2)
    done = keep(conn, SCHEMA, "ivfflat")
    assert done is not None and "IVFFlat index built over 1,500 vectors (38 lists)" in done
    assert "the hnsw index dropped" in done
    assert indexes(conn) == {NAMES["ivfflat"]: ["lists=38"]}
    assert keep(conn, SCHEMA, "ivfflat") is None  # not grown enough to be built again

    add_vectors(conn, 1_600, seed=3)  # 3,100 ≥ 2 × 38²
    done = keep(conn, SCHEMA, "ivfflat")
    assert done is not None and "(55 lists)" in done
    assert indexes(conn) == {NAMES["ivfflat"]: ["lists=55"]}


def test_a_build_cut_off_is_dropped_and_another_kind_replaces_it(
        schema: psycopg.Connection[Any]) -> None:
    conn = schema
    add_vectors(conn, MIN_ROWS, seed=4)
    conn.execute(sql.SQL("CREATE INDEX card_embeddings_ivfflat_next ON {}.card_embeddings "
                         "(tenant_id)").format(sql.Identifier(SCHEMA)))
    keep(conn, SCHEMA, "ivfflat")
    assert set(indexes(conn)) == {NAMES["ivfflat"]}
    assert keep(conn, SCHEMA, "none") == "the ivfflat index dropped"
    assert indexes(conn) == {}


def test_the_keeper_builds_in_the_process_holding_its_lease(
        schema: psycopg.Connection[Any], admin_db: Database) -> None:
    add_vectors(schema, MIN_ROWS, seed=5)
    stop = threading.Event()
    first = VectorIndexKeeper(admin_db, SCHEMA, "ivfflat", stop)
    second = VectorIndexKeeper(admin_db, SCHEMA, "ivfflat", stop)
    try:
        assert first.tick() is not None
        assert second.tick() is None  # standing by: the first holds the lease
        assert NAMES["ivfflat"] in indexes(schema)
    finally:
        first.lease.release()
        second.lease.release()
