"""Vectors over the wire: the present casts against ``pgvector.psycopg.register_vector`` (binary).

    .venv/bin/python -m tests.benchmarks.bench_vectors [--vectors 5000] [--queries 200] [--rounds 3]
        [--data-dir PATH]

On a throwaway embedded PostgreSQL (as ``bench_retrieval`` starts one), in one run and one table
layout (``card_embeddings``' columns, ``vector(512)``; writes into a table with no index), each of
the three paths vectors take today, both ways:

- write: N vectors, one ``INSERT … ON CONFLICT`` each in one transaction (the embedding
  projection's statement). Casts: a text literal ``'[0.1,…]'`` and ``%s::vector``; adapter: a
  float32 ``numpy`` array, dumped in pgvector's binary format;
- query: top-20 by cosine distance for random query vectors (the semantic route's ``<=>``), p50 /
  p95 per query, by an exact scan and then through an HNSW index built for it. Casts:
  ``%s::vector`` on a text literal; adapter: the array, binary;
- read: every vector back by key, 256 keys a statement (the embedding cache's lookup). Casts:
  ``embedding::real[]`` in binary (what the cache does); adapter: ``embedding`` loaded by the
  binary loader.

The adapter's own cost — ``register_vector`` fetches four types' oids on every new connection — is
timed apart. Each pair runs ``--rounds`` times, alternating which goes first; the figures are the
medians over rounds, and the ratio is casts / adapter (above 1: the adapter is faster).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from pgvector.psycopg import register_vector

from infra.postgres import Database, admin_database, vector_search_available
from infra.settings import Settings

DIMS = 512
TOP_K = 20
READ_BATCH = 256
SCHEMA = "bench_vectors"

_TABLE = f"""CREATE TABLE {SCHEMA}.{{name}} (
    tenant_id text NOT NULL, card_id integer NOT NULL, model text NOT NULL,
    content_hash bytea NOT NULL, embedding vector({DIMS}) NOT NULL,
    PRIMARY KEY (tenant_id, card_id))"""
_UPSERT = (f"INSERT INTO {SCHEMA}.{{name}} (tenant_id, card_id, model, content_hash, embedding) "
           "VALUES (%s, %s, %s, %s, {value}) ON CONFLICT (tenant_id, card_id) DO UPDATE SET "
           "model = excluded.model, content_hash = excluded.content_hash, embedding = excluded.embedding")
_TOP = (f"SELECT card_id, embedding <=> {{value}} AS distance FROM {SCHEMA}.{{name}} "
        f"WHERE model = 'bench' ORDER BY distance LIMIT {TOP_K}")
_READ = f"SELECT card_id, {{column}} FROM {SCHEMA}.{{name}} WHERE tenant_id = 't' AND card_id = ANY(%s)"


def literal(vector: np.ndarray) -> str:
    """The text literal the casts send (``projections.embeddings._literal``)."""
    return "[" + ",".join(map(repr, vector.tolist())) + "]"


class Way:
    """One way of moving vectors: how a value is passed, how a vector is read, how a connection is
    prepared."""

    def __init__(self, name: str, value: str, column: str, encode: Callable[[np.ndarray], Any],
                 prepare: Callable[[psycopg.Connection[Any]], None]) -> None:
        self.name = name
        self.table = name
        self.value = value
        self.column = column
        self.encode = encode
        self.prepare = prepare


CASTS = Way("casts", "%s::vector", "embedding::real[]", literal, lambda conn: None)
ADAPTER = Way("adapter", "%s", "embedding", lambda vector: vector, register_vector)


def write(conn: psycopg.Connection[Any], way: Way, vectors: np.ndarray) -> float:
    """Seconds to upsert every vector, one statement each, in one transaction."""
    statement = _UPSERT.format(name=way.table, value=way.value)
    digest = b"\x00" * 32
    started = time.perf_counter()
    with conn.transaction():
        for card_id, vector in enumerate(vectors):
            conn.execute(statement, ("t", card_id, "bench", digest, way.encode(vector)))
    return time.perf_counter() - started


def query(conn: psycopg.Connection[Any], way: Way, questions: np.ndarray) -> list[float]:
    """Milliseconds of each top-20 query (encoding the question included)."""
    statement = _TOP.format(name=way.table, value=way.value)
    samples = []
    for question in questions:
        started = time.perf_counter()
        rows = conn.execute(statement, (way.encode(question),)).fetchall()
        samples.append((time.perf_counter() - started) * 1_000)
        assert len(rows) == TOP_K
    return samples


def read(conn: psycopg.Connection[Any], way: Way, count: int) -> tuple[float, list[np.ndarray]]:
    """Seconds to read every vector back by key, ``READ_BATCH`` keys a statement, in binary."""
    statement = _READ.format(name=way.table, column=way.column)
    found: list[np.ndarray] = []
    started = time.perf_counter()
    for start in range(0, count, READ_BATCH):
        keys = list(range(start, min(start + READ_BATCH, count)))
        rows = conn.execute(statement, (keys,), binary=True).fetchall()
        found.extend(np.asarray(row[1] if way is CASTS else row[1].to_numpy(), dtype=np.float32)
                     for row in sorted(rows))
    return time.perf_counter() - started, found


def registration(database: Database, times: int = 20) -> float:
    """Milliseconds ``register_vector`` adds to a new connection (median of ``times``)."""
    samples = []
    for _ in range(times):
        with database.connect(autocommit=True) as conn:
            started = time.perf_counter()
            register_vector(conn)
            samples.append((time.perf_counter() - started) * 1_000)
    return statistics.median(samples)


def p95(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[max(0, round(0.95 * len(ordered)) - 1)]


def measure(database: Database, vectors: np.ndarray, questions: np.ndarray,
            rounds: int) -> dict[str, dict[str, list[float]]]:
    keys = ("write", "p50", "p95", "hnsw p50", "hnsw p95", "read")
    figures = {way.name: {key: list[float]() for key in keys} for way in (CASTS, ADAPTER)}
    for round_ in range(rounds):
        for way in (CASTS, ADAPTER) if round_ % 2 == 0 else (ADAPTER, CASTS):
            with database.connect(autocommit=True) as conn:
                way.prepare(conn)
                conn.execute(f"TRUNCATE {SCHEMA}.{way.table}")
                figures[way.name]["write"].append(write(conn, way, vectors))
                conn.execute(f"VACUUM ANALYZE {SCHEMA}.{way.table}")
                samples = query(conn, way, questions)
                figures[way.name]["p50"].append(statistics.median(samples))
                figures[way.name]["p95"].append(p95(samples))
                conn.execute(f"CREATE INDEX {way.table}_hnsw ON {SCHEMA}.{way.table} "
                             "USING hnsw (embedding vector_cosine_ops)")
                samples = query(conn, way, questions)
                conn.execute(f"DROP INDEX {SCHEMA}.{way.table}_hnsw")
                figures[way.name]["hnsw p50"].append(statistics.median(samples))
                figures[way.name]["hnsw p95"].append(p95(samples))
                seconds, found = read(conn, way, len(vectors))
                figures[way.name]["read"].append(seconds)
                if not np.array_equal(np.stack(found), vectors):
                    raise SystemExit(f"{way.name}: the vectors read back differ from those written")
    return figures


def report(figures: dict[str, dict[str, list[float]]], count: int, queries: int, register_ms: float) -> None:
    casts = {key: statistics.median(values) for key, values in figures["casts"].items()}
    adapter = {key: statistics.median(values) for key, values in figures["adapter"].items()}
    rows = [
        (f"write {count:,} × {DIMS}-d (vectors/s)", count / casts["write"], count / adapter["write"],
         casts["write"] / adapter["write"]),
        (f"top-{TOP_K} cosine p50 (ms)", casts["p50"], adapter["p50"], casts["p50"] / adapter["p50"]),
        (f"top-{TOP_K} cosine p95 (ms)", casts["p95"], adapter["p95"], casts["p95"] / adapter["p95"]),
        (f"top-{TOP_K} cosine, HNSW, p50 (ms)", casts["hnsw p50"], adapter["hnsw p50"],
         casts["hnsw p50"] / adapter["hnsw p50"]),
        (f"top-{TOP_K} cosine, HNSW, p95 (ms)", casts["hnsw p95"], adapter["hnsw p95"],
         casts["hnsw p95"] / adapter["hnsw p95"]),
        (f"read {count:,} back (vectors/s)", count / casts["read"], count / adapter["read"],
         casts["read"] / adapter["read"]),
    ]
    print(f"\n{'':34} {'casts':>12} {'adapter':>12} {'casts/adapter':>14}")
    for name, left, right, ratio in rows:
        print(f"{name:34} {left:>12,.2f} {right:>12,.2f} {ratio:>13.2f}×")
    print(f"\n{queries} queries a round; medians of {len(figures['casts']['write'])} rounds; ratio is the "
          "time the casts take over the adapter's (above 1: the adapter is faster)")
    print(f"register_vector on a new connection: {register_ms:.2f} ms (four type lookups)")


def run(settings: Settings, count: int, queries: int, rounds: int) -> None:
    admin = admin_database(settings)
    rng = np.random.default_rng(5)
    vectors = rng.normal(size=(count, DIMS)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    questions = rng.normal(size=(queries, DIMS)).astype(np.float32)
    with admin.connect(autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        conn.execute(f"CREATE SCHEMA {SCHEMA}")
        for way in (CASTS, ADAPTER):
            conn.execute(_TABLE.format(name=way.table))
        row = conn.execute("SELECT current_setting('server_version'), "
                           "(SELECT extversion FROM pg_extension WHERE extname = 'vector')").fetchone()
    if row:
        print(f"PostgreSQL {row[0]} (embedded), pgvector {row[1]}; {count:,} vectors of {DIMS} dimensions",
              flush=True)
    figures = measure(admin, vectors, questions, rounds)
    report(figures, count, queries, registration(admin))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--vectors", type=int, default=5_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--data-dir", type=Path, help="default: a temporary folder, removed at the end")
    args = parser.parse_args()
    folder = args.data_dir or Path(tempfile.mkdtemp(prefix="palimpsest-bench-vectors-"))
    settings = Settings(data_dir=folder / "data")
    if not vector_search_available(settings):
        raise SystemExit("this server cannot compute vector distances: run python -m infra.pgvector_build")
    try:
        run(settings, args.vectors, args.queries, args.rounds)
    finally:
        if settings.database_url is None:
            import pgserver

            pgserver.get_server(Path(settings.data_dir).resolve() / "pg").cleanup()
        if args.data_dir is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
