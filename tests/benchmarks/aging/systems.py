"""The systems compared, on the same data in the same run:

- ``palimpsest``: ``Queries.search`` as configured (breakers lifted);
- ``palimpsest-unbounded-decay``: the same with ``decay="unbounded"`` (the old, unfloored decay);
- ``pgvector-topk``: every statement ever written, one row each, embedded with the same embedder,
  ``ORDER BY embedding <=> q LIMIT k`` among the tenant's statements recorded by the asked moment;
- ``bm25``: BM25 (``bm25s``) over the same statements, tokenised by ``projections.text.terms``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

import bm25s
import numpy as np
import psycopg
from psycopg import sql

from infra.embedders import Embedder
from infra.postgres import Database
from infra.settings import Settings
from projections.text import terms
from services.factory import create_queries
from services.query.retrieval.results import RetrievalResult
from tests.benchmarks.aging.records import Answer, Item, Question, RefMap, SlotKey, Statement, slot_key


class System(Protocol):
    name: str

    def prepare(self, statements: Sequence[Statement]) -> None:
        """Take in the statements written since the last checkpoint."""

    def ask(self, question: Question, now: datetime) -> Answer: ...

    def close(self) -> None: ...


class PalimpsestSystem:
    def __init__(self, name: str, settings: Settings, refs: RefMap) -> None:
        self.name, self.refs, self.settings = name, refs, settings
        self.queries = create_queries(settings)
        self.routes: Counter[str] = Counter()

    def prepare(self, statements: Sequence[Statement]) -> None:
        """The runner projects the log into the read models; the query side starts afresh, so
        what it caches for a while (each tenant's card count, its slots) is read from this
        checkpoint's read models, not the last one's, whatever the run's timing."""
        self.queries.close()
        self.queries = create_queries(self.settings)

    def ask(self, question: Question, now: datetime) -> Answer:
        query = self.queries.query(question.text, now=now, valid_at=question.valid_at,
                                   known_at=question.known_at, top_n=question.top_n)
        started = time.perf_counter()
        try:
            result = self.queries.search(question.tenant, query)
        except Exception as error:  # a refused question counts as an empty answer, reported
            ms = (time.perf_counter() - started) * 1000
            return Answer([], ms, set(), f"{type(error).__name__}: {error}")
        ms = (time.perf_counter() - started) * 1000
        for route, report in result.diagnostics.routes.items():
            self.routes[f"{route}:{report.status}"] += 1
        return Answer(self._items(result), ms, self._alerted(result))

    def _items(self, result: RetrievalResult) -> list[Item]:
        aging = set(result.alerts.aging_facts)
        items = []
        for card in result.results:
            known = self.refs.get(card.card_id)
            items.append(Item(card.kind, card.subject, card.label, card.value, known.ref if known else None,
                              card.superseded, card.card_id in aging))
        return items

    def _alerted(self, result: RetrievalResult) -> set[SlotKey]:
        alerted = {slot_key(a.subject, a.label) for a in result.alerts.arbitrations}
        for alert in result.alerts.contradictions:
            alerted |= {known.slot for card_id in alert.card_ids
                        if (known := self.refs.get(card_id)) is not None and known.slot is not None}
        return alerted

    def close(self) -> None:
        self.queries.close()


def _vector(values: Sequence[float]) -> str:
    return "[" + ",".join(f"{v:.7f}" for v in values) + "]"


class PgvectorSystem:
    """What most memory systems do: embed every statement, return the k nearest."""

    name = "pgvector-topk"
    BATCH = 256

    def __init__(self, admin: Database, embedder: Embedder, schema: str = "bench_baseline") -> None:
        self.embedder, self.schema = embedder, sql.Identifier(schema)
        self.conn: psycopg.Connection[Any] = admin.connect(autocommit=True)
        home = self.conn.execute("SELECT n.nspname FROM pg_extension e JOIN pg_namespace n "
                                 "ON n.oid = e.extnamespace WHERE e.extname = 'vector'").fetchone()
        self.conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(self.schema))
        self.conn.execute(sql.SQL("SET search_path TO {}, {}").format(
            self.schema, sql.Identifier(home[0] if home else "public")))
        self.conn.execute("DROP TABLE IF EXISTS statements")
        self.conn.execute(f"""CREATE TABLE statements (ref int PRIMARY KEY, tenant text NOT NULL,
            kind text NOT NULL, subject text, label text, value text, text text NOT NULL,
            recorded_at timestamptz NOT NULL,
            embedding vector({embedder.dimensions}) NOT NULL)""")

    def prepare(self, statements: Sequence[Statement]) -> None:
        for i in range(0, len(statements), self.BATCH):
            batch = statements[i:i + self.BATCH]
            vectors = self.embedder.embed([s.text for s in batch])
            columns = "ref, tenant, kind, subject, label, value, text, recorded_at, embedding"
            with self.conn.cursor() as cur, cur.copy(f"COPY statements ({columns}) FROM STDIN") as copy:
                for s, vector in zip(batch, vectors, strict=True):
                    copy.write_row((s.ref, s.tenant, s.kind, s.subject, s.label, s.value or s.text, s.text,
                                    s.recorded_at, _vector(vector)))
        self.conn.execute("ANALYZE statements")

    def ask(self, question: Question, now: datetime) -> Answer:
        started = time.perf_counter()
        vector = _vector(self.embedder.embed([question.text])[0])
        rows = self.conn.execute(
            "SELECT ref, kind, subject, label, value FROM statements WHERE tenant = %s AND recorded_at <= %s "
            "ORDER BY embedding <=> %s::vector LIMIT %s",
            (question.tenant, question.known_at or now, vector, question.top_n)).fetchall()
        ms = (time.perf_counter() - started) * 1000
        items = [Item(kind, subject, label, value, ref) for ref, kind, subject, label, value in rows]
        return Answer(items, ms)

    def close(self) -> None:
        self.conn.close()


class Bm25System:
    """BM25 over every statement, one index per tenant, rebuilt at each checkpoint. Ties keep the
    order the statements were written in; statements recorded after the asked moment are left out."""

    name = "bm25"

    def __init__(self) -> None:
        self.statements: list[Statement] = []
        self.indexes: dict[str, tuple[bm25s.BM25, list[Statement]]] = {}

    def prepare(self, statements: Sequence[Statement]) -> None:
        self.statements.extend(statements)
        self.indexes = {}
        for tenant in sorted({s.tenant for s in self.statements}):
            docs = [s for s in self.statements if s.tenant == tenant]
            index = bm25s.BM25()
            index.index([list(terms(s.text)) for s in docs], show_progress=False)
            self.indexes[tenant] = (index, docs)

    def ask(self, question: Question, now: datetime) -> Answer:
        started = time.perf_counter()
        items: list[Item] = []
        tokens = list(terms(question.text))
        if question.tenant in self.indexes and tokens:
            index, docs = self.indexes[question.tenant]
            scores = np.asarray(index.get_scores(tokens))
            known = question.known_at or now
            order = np.argsort(-scores, kind="stable")
            for i in order:
                if len(items) >= question.top_n or scores[i] <= 0:
                    break
                s = docs[i]
                if s.recorded_at <= known:
                    items.append(Item(s.kind, s.subject, s.label, s.value or s.text, s.ref))
        return Answer(items, (time.perf_counter() - started) * 1000)

    def close(self) -> None:
        self.indexes = {}
