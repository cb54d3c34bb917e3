"""The index of ``card_embeddings`` the semantic route reads (``PALIMPSEST_VECTOR_INDEX``): IVFFlat
by default, HNSW, or none (decision 0016).

IVFFlat splits the vectors into ``lists`` around centroids learnt from the rows present when it
is built; a query compares exactly every vector of its ``probes`` nearest lists. Cards that are
near copies of one another — a fact restated, events of one kind — fall in one list and are all
compared, where HNSW's walk of its graph passes most of them by: at 100k cards the top-5 overlap
with the exact answer was 0.96 at 10 probes against 0.75 for HNSW at ``ef_search`` 200, at the
same cost (docs/benchmarks.md).

Centroids learnt from few rows serve many rows badly, so the index follows the table: none below
:data:`MIN_ROWS` vectors (an exact scan of so few is cheap), then built with √rows lists, and
built again whenever the table has doubled since — concurrently, the old index serving until the
new one takes its name. :class:`VectorIndexKeeper` does that on a thread of the projector; a
rebuild of the read models builds it at once over the rows it copied.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import TYPE_CHECKING, Any, Literal

import psycopg
from psycopg import sql

if TYPE_CHECKING:
    from infra.postgres import Database

log = logging.getLogger(__name__)

Kind = Literal["ivfflat", "hnsw", "none"]

#: No IVFFlat index below this many vectors.
MIN_ROWS = 1_000
#: Built again once the table holds this many times the rows it was built over.
GROWTH = 2
NAMES: dict[Kind, str] = {"ivfflat": "card_embeddings_ivfflat", "hnsw": "card_embeddings_hnsw"}
_NEXT = "card_embeddings_ivfflat_next"


def lists_for(rows: int) -> int:
    """√rows lists: a probe compares about √rows vectors, and ten probes find nearly every
    exact neighbour at 100k and 1M cards (docs/benchmarks.md)."""
    return max(1, math.isqrt(max(rows, 1)))


def create_statement(schema: str, kind: Kind, rows: int, *, name: str | None = None,
                     concurrently: bool = False) -> sql.Composed | None:
    """The statement that builds ``kind``'s index over ``rows`` vectors; None when there is none
    to build (``none``, or an IVFFlat over fewer than :data:`MIN_ROWS`)."""
    if kind == "none" or (kind == "ivfflat" and rows < MIN_ROWS):
        return None
    how = "ivfflat (embedding vector_cosine_ops) WITH (lists = {lists})" if kind == "ivfflat" \
        else "hnsw (embedding vector_cosine_ops)"
    return sql.SQL("CREATE INDEX {concurrently}IF NOT EXISTS {name} ON {s}.card_embeddings USING "
                   + how).format(
        concurrently=sql.SQL("CONCURRENTLY " if concurrently else ""),
        name=sql.Identifier(name or NAMES[kind]), s=sql.Identifier(schema),
        lists=sql.Literal(lists_for(rows)))


def vector_rows(conn: psycopg.Connection[Any], schema: str) -> int:
    """How many vectors ``card_embeddings`` holds: the planner's estimate, counted when there is
    none yet (a table never analysed)."""
    row = conn.execute("SELECT reltuples FROM pg_class WHERE oid = to_regclass(%s)",
                       (f"{sql.Identifier(schema).as_string(conn)}.card_embeddings",)).fetchone()
    if row is not None and row[0] is not None and row[0] >= 0:
        return int(row[0])
    counted = conn.execute(sql.SQL("SELECT count(*) FROM {}.card_embeddings").format(
        sql.Identifier(schema))).fetchone()
    return int(counted[0]) if counted else 0


_INDEXES = """SELECT i.relname AS name, i.reloptions AS options
FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
WHERE x.indrelid = to_regclass(%s) AND i.relname LIKE 'card_embeddings_%%'
  AND i.relname <> 'card_embeddings_pkey'"""


def built_over(options: list[str] | None) -> int:
    """The rows an IVFFlat index was built over, from its lists (:func:`lists_for`'s inverse)."""
    lists = next((int(o.split("=", 1)[1]) for o in options or () if o.startswith("lists=")), 1)
    return lists * lists


def keep(conn: psycopg.Connection[Any], schema: str, kind: Kind) -> str | None:
    """Bring the vector index of ``schema`` to ``kind`` on ``conn`` (the tables' owner, in
    autocommit): build what is missing or due, concurrently, then drop what another kind left.
    Returns what it did, or None."""
    table = f"{sql.Identifier(schema).as_string(conn)}.card_embeddings"
    present = {row[0]: row[1] for row in conn.execute(_INDEXES, (table,))}
    done = []
    s = sql.Identifier(schema)
    if _NEXT in present:  # a build cut off (its index left invalid)
        conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}.{}").format(s, sql.Identifier(_NEXT)))
    if kind == "ivfflat":
        rows = vector_rows(conn, schema)
        built = NAMES["ivfflat"] in present
        if rows >= MIN_ROWS and (not built or rows >= GROWTH * built_over(present[NAMES["ivfflat"]])):
            started = time.perf_counter()
            statement = create_statement(schema, kind, rows, name=_NEXT, concurrently=True)
            assert statement is not None
            conn.execute(statement)
            with conn.transaction():
                conn.execute(sql.SQL("DROP INDEX IF EXISTS {}.{}").format(
                    s, sql.Identifier(NAMES["ivfflat"])))
                conn.execute(sql.SQL("ALTER INDEX {}.{} RENAME TO {}").format(
                    s, sql.Identifier(_NEXT), sql.Identifier(NAMES["ivfflat"])))
            done.append(f"IVFFlat index built over {rows:,} vectors ({lists_for(rows):,} lists) in "
                        f"{time.perf_counter() - started:.1f} s")
        elif not built:
            return None  # whatever else is there serves until there is one
    elif kind == "hnsw" and NAMES["hnsw"] not in present:
        started = time.perf_counter()
        statement = create_statement(schema, kind, 0, concurrently=True)
        assert statement is not None
        conn.execute(statement)
        done.append(f"HNSW index built in {time.perf_counter() - started:.1f} s")
    for other, name in NAMES.items():
        if other != kind and name in present:
            conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}.{}").format(s, sql.Identifier(name)))
            done.append(f"the {other} index dropped")
    return "; ".join(done) or None


class VectorIndexKeeper:
    """:func:`keep` every ``interval`` seconds on a daemon thread, in whichever of the projector
    processes holds the lease of the schema's vector index, until ``stop``."""

    def __init__(self, admin: Database, schema: str, kind: Kind, stop: threading.Event,
                 interval: float = 60.0) -> None:
        from infra.postgres import Lease  # infra.postgres makes the schema, with this module

        self.admin, self.schema, self.kind = admin, schema, kind
        self.stop, self.interval = stop, interval
        self.lease = Lease(admin.connect, f"palimpsest vector index {schema}")

    def tick(self) -> str | None:
        if not self.lease.held():
            return None
        try:
            with self.admin.connect(autocommit=True) as conn:
                done = keep(conn, self.schema, self.kind)
        except psycopg.Error as error:  # tried again next time; searches go on meanwhile
            log.warning("vector index of %s: %s", self.schema, error)
            return None
        if done:
            log.info("vector index of %s: %s", self.schema, done)
        return done

    def run(self) -> None:
        try:
            while not self.stop.wait(self.interval):
                self.tick()
        finally:
            self.lease.release()

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name="vector-index", daemon=True)
        thread.start()
        return thread
