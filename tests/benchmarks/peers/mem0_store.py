"""mem0 OSS (``mem0.Memory``, mem0ai 2.2) in a database of its own beside Palimpsest's: its pgvector
store (an HNSW index, cosine), our embedder behind its embedding calls, and no LLM.

Memories go straight into its vector store, in the payload mem0's ``add`` writes (``data``,
``text_lemmatized``, ``hash``, ``created_at``, ``updated_at``, ``user_id``), with the vectors
Palimpsest's ``card_embeddings`` hold and the text they were made from
(``projections.embeddings.EMBEDDED_TEXT``). ``add`` itself would first ask an LLM to extract facts
from a conversation: the benchmark compares searches, not extractions.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from infra.embedders import Embedder
from infra.postgres import Database
from infra.vectors import VectorTypes
from projections.embeddings import EMBEDDED_TEXT
from tests.benchmarks.bench_retrieval import Progress

DATABASE, COLLECTION = "mem0_bench", "memories"
BATCH = 500

_CARDS = ("SELECT c.card_id, " + EMBEDDED_TEXT + ", c.recorded_at, e.embedding FROM {s}.cards c "
          "JOIN {s}.card_embeddings e ON e.tenant_id = c.tenant_id AND e.card_id = c.card_id "
          "WHERE c.tenant_id = %s ORDER BY c.card_id")
_PROBE = ("SELECT c.card_id, " + EMBEDDED_TEXT + " FROM {s}.cards c "
          "WHERE c.tenant_id = %s AND c.kind = 'knowledge' ORDER BY c.card_id LIMIT 1")
#: The statement mem0 2.2's ``PGVector.search`` runs (``mem0/vector_stores/pgvector.py``), with the
#: ``user_id`` filter its ``search`` passes down.
_VECTOR_QUERY = ("SELECT id, vector <=> %s::vector AS distance, payload FROM {} "
                 "WHERE payload->>%s = %s ORDER BY distance LIMIT %s")
_VECTOR = re.compile(r"'\[[^\]]*\]'::vector")


class Mem0Embedder:
    """Our embedder behind mem0's ``EmbeddingBase`` calls: mem0 embeds a question with the model
    Palimpsest's vectors come from, afresh each time (mem0 caches no embedding)."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder

    def embed(self, text: str, memory_action: str | None = None) -> list[float]:
        return self.embedder.embed([text])[0]

    def embed_batch(self, texts: Sequence[str], memory_action: str | None = "add") -> list[list[float]]:
        return self.embedder.embed(texts)


class NoLLM:
    """Stands in for mem0's LLM: a search never needs one, and a call would leave the machine."""

    def generate_response(self, *args: Any, **kwargs: Any) -> str:
        raise AssertionError("the benchmark never asks mem0's LLM")


def payload(text: str, user_id: str, at: datetime, lemmatized: str) -> dict[str, Any]:
    """A memory's payload as mem0's ``add`` writes it (``Memory._create_memory``)."""
    created = at.isoformat()
    return {"data": text, "text_lemmatized": lemmatized, "hash": hashlib.md5(text.encode()).hexdigest(),
            "created_at": created, "updated_at": created, "user_id": user_id}


def create_database(admin: Database) -> Database:
    """A fresh database for mem0 on Palimpsest's server, with pgvector."""
    with admin.connect(autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(DATABASE)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
    db = replace(admin, dbname=DATABASE)
    with db.connect(autocommit=True) as conn:
        conn.execute("CREATE EXTENSION vector")
    return db


@contextmanager
def open_memory(db: Database, embedder: Embedder, folder: Path) -> Iterator[Any]:
    """``mem0.Memory`` on ``db``: telemetry off, its files under ``folder``, our embedder, no LLM;
    its connection pool closed on the way out."""
    os.environ["MEM0_TELEMETRY"] = "False"  # read once, when mem0 is first imported
    os.environ["MEM0_DIR"] = str(folder)
    os.environ.setdefault("OPENAI_API_KEY", "unused")  # its default LLM and embedder: built, never called
    import mem0.memory.telemetry
    from mem0 import Memory
    from mem0.configs.base import MemoryConfig

    if mem0.memory.telemetry.MEM0_TELEMETRY:
        raise RuntimeError("mem0 was imported before its telemetry was turned off")
    folder.mkdir(parents=True, exist_ok=True)
    conninfo = make_conninfo(host=db.host, port=db.port, dbname=db.dbname, user=db.user,
                             password=db.password)
    memory = Memory(MemoryConfig(
        vector_store={"provider": "pgvector", "config": {
            "connection_string": conninfo, "collection_name": COLLECTION, "hnsw": True,
            "diskann": False, "embedding_model_dims": embedder.dimensions}},
        history_db_path=str(folder / "history.db")))
    memory.embedding_model, memory.llm = Mem0Embedder(embedder), NoLLM()
    try:
        yield memory
    finally:
        memory.vector_store.connection_pool.close()
        memory.db.close()


def _batches(conn: psycopg.Connection[Any], schema: str, tenant: str) -> Iterator[list[tuple[Any, ...]]]:
    """The tenant's cards (id, embedded text, recorded at, vector), ``BATCH`` at a time."""
    VectorTypes().register(conn)
    statement = sql.SQL(_CARDS).format(s=sql.Identifier(schema))
    with conn.transaction(), conn.cursor(name=f"mem0-{tenant}", binary=True) as cursor:
        cursor.execute(statement, (tenant,))
        while rows := cursor.fetchmany(BATCH):
            yield rows


def load(memory: Any, conn: psycopg.Connection[Any], schema: str, users: dict[str, str]) -> int:
    """Every card of each tenant in ``users`` into mem0's store, as the mem0 user named for it;
    ``conn`` reads Palimpsest's read models. Returns how many."""
    from mem0.utils.lemmatization import lemmatize_for_bm25

    total = 0
    for tenant, user_id in users.items():
        counted = conn.execute(sql.SQL("SELECT count(*) FROM {}.card_embeddings WHERE tenant_id = %s")
                               .format(sql.Identifier(schema)), (tenant,)).fetchone()
        progress = Progress(f"mem0 {user_id}", counted[0] if counted else 0, every=5_000)
        for rows in _batches(conn, schema, tenant):
            memory.vector_store.insert(
                vectors=[vector.to_list() for *_, vector in rows],
                payloads=[payload(text, user_id, at, lemmatize_for_bm25(text)) for _, text, at, _ in rows],
                ids=[str(card_id) for card_id, *_ in rows])
            for _ in rows:
                progress.tick()
        progress.done()
        total += progress.count
    return total


def settle(db: Database) -> None:
    """``VACUUM ANALYZE`` mem0's table, as autovacuum would in time (Palimpsest's tables had theirs)."""
    with db.connect(autocommit=True) as conn:
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(COLLECTION)))


def probe(memory: Any, conn: psycopg.Connection[Any], schema: str, tenant: str, user_id: str) -> str:
    """Asks mem0 for a knowledge card's own text and checks the card comes back (the store, the
    payloads and the embedder line up); returns the text of its first answer."""
    row = conn.execute(sql.SQL(_PROBE).format(s=sql.Identifier(schema)), (tenant,)).fetchone()
    if row is None:
        raise RuntimeError(f"no knowledge card in tenant {tenant}")
    found = memory.search(row[1], top_k=10, filters={"user_id": user_id})["results"]
    if str(row[0]) not in {hit["id"] for hit in found}:
        raise RuntimeError(f"mem0 did not find card {row[0]} by its own text {row[1]!r}: {found[:3]}")
    return str(found[0]["memory"])


def vector_plan(db: Database, vector: list[float], user_id: str, limit: int) -> str:
    """How the server runs mem0's vector query (``EXPLAIN ANALYZE``: its nodes, the vector shown as
    ``$1``)."""
    statement = sql.SQL("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) " + _VECTOR_QUERY).format(
        sql.Identifier(COLLECTION))
    with db.connect(autocommit=True) as conn:
        rows = conn.execute(statement, (vector, "user_id", user_id, limit)).fetchall()
    lines = (_VECTOR.sub("$1", str(row[0])).strip(" ->") for row in rows)
    return " | ".join(line for line in lines if not line.startswith(("Buffers", "Planning")))
