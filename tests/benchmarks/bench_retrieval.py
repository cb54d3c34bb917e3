"""Fused-retrieval latency at 10k, 100k and 1M cards, beside a bare pgvector top-k query in the same run.

    .venv/bin/python -m tests.benchmarks.bench_retrieval [--sizes 10000,100000] [--queries 200]
        [--data-dir PATH] [--keep] [--reuse] [--breakers] [--json]

``--keep`` leaves the loaded folder behind; ``--reuse`` with ``--data-dir`` measures the corpus a
kept run left there (one size: the one it was loaded to) instead of loading again. ``--json``
prints one JSON object last: ``{"sizes": {"100000": {"fused_p50_ms", "fused_p95_ms" (as paid),
"cached_p95_ms", "bare_p95_ms", "recall_at_5", …, "index", "index_build_s", "disk_mb",
"index_mb", "server_rss_mb"}, …}}`` (:func:`as_json`). ``PALIMPSEST_VECTOR_INDEX=hnsw`` measures
the HNSW index instead of IVFFlat.

Fills the read models of a throwaway embedded PostgreSQL (``synchronous_commit = off``) straight
with COPY — nodes, slots, cards (their words index follows by its trigger), card embeddings and a
few thousand card relations — for one tenant and a second "noise" tenant a quarter its size. Cards
are mixed Chinese / English, built from templates: state cards in slots (single-value slots keep one
current card, the earlier ones closed), commitments, events spread over two years, knowledge with
tags. Their text columns come from the projection's own helpers
(``projections.cards._text_columns``). A few thousand distinct template texts are embedded with the
real embedder; each card takes the vector of its template plus a little gaussian noise, normalised.
``card_versions`` stays empty: only as-of queries read it, and the bench asks current ones. The
vector index (``PALIMPSEST_VECTOR_INDEX``, IVFFlat by default, sized as the projector sizes it:
``projections.vector_index``) is built after each load (timed), then ``VACUUM ANALYZE``. The same
tenant grows from the first size to the next.

At each size, after a warm-up, the bench queries (mixed zh / en; some with time words such as
上週 / "last week", some with tag words; half in project ``proj-a``) run one after the other:

- fused: ``Queries.search`` end to end as the caller sees it (wall clock), the question's
  embedding included ("as paid", the headline figure), and again with it cached (the figure
  releases before this one printed), with every route's time from the diagnostics and what is left
  besides the routes;
- bare: ``SELECT card_id FROM card_embeddings ORDER BY embedding <=> $1 LIMIT 20`` as the runtime
  role, timed as its whole transaction (the tenant set, the query, the commit), at the index's
  defaults (``ivfflat.probes`` 1, ``hnsw.ef_search`` 40; the planner's choice of plan is printed:
  it may be an exact scan) and at the semantic route's settings (its probes, or ``ef_search``,
  with iterative scans); interleaved with the fused queries so both see the
  machine's load alike. Query vectors are computed beforehand for both: the query-embedding time
  is reported on its own;
- exact: the bare query with ``SET LOCAL enable_indexscan = off``, and the mean share of its top 5
  the index's answers hold (recall of the index for these queries, at both settings);
- the scans each route's statement plans for two sample queries, as the runtime role.

The route breakers are lifted (``breaker_p95_ms`` 1e9) so every query runs every route and the
figures are the whole cost; ``--breakers`` keeps the configured ones (a quarantined route is then
skipped, which makes the fused figure faster and the answer poorer). Targets: fused p95 ≤ 40 ms at
100k cards, and ≤ 4× the bare query's p95 at the route's settings; ≤ 80 ms at 1M.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import statistics
import struct
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from domain.rules.tags import normalise_tag
from infra.embedders import Embedder, content_hash, create_embedder
from infra.postgres import (
    admin_database,
    bootstrap,
    runtime_database,
    vector_index_kind,
    vector_search_available,
)
from infra.settings import Settings
from projections.cards import _text_columns
from projections.ops import CARD_COLUMNS, SLOT_COLUMNS
from projections.text import slot_words
from projections.vector_index import NAMES, Kind, create_statement, lists_for
from services.factory import create_queries
from services.query.queries import Queries
from services.query.retrieval.breaker import nearest_rank
from services.query.retrieval.semantic import SemanticRoute
from tests.benchmarks import cpu_hog

MAIN, NOISE = "bench-main", "bench-noise"
NOISE_DIVISOR = 4  # the noise tenant holds a quarter as many cards as the main one
EDGE_DIVISOR = 25  # one card relation per 25 cards
SIGMA = 0.015  # per-dimension noise around a template's vector: cosine to it ≈ 0.95
TARGET_P95_MS, TARGET_RATIO = 40.0, 4.0
#: At a million cards (and more) the fused p95 target is this.
TARGET_1M_P95_MS = 80.0
FIRST_ROUTES = ("semantic", "tags", "fuzzy", "temporal")

PEOPLE = ("王小明", "李美玲", "陳志豪", "林佳慧", "張偉", "黃建國", "吳雅婷", "劉家豪", "周杰", "蔡依林",
          "Alice", "Bob", "Carol", "David", "Emma", "Frank", "Grace", "Kenji", "Yuki", "Hannah")
SUBJECTS = ("user", *PEOPLE, *(s + g for s in "陳林黃張李王吳劉蔡楊"
                               for g in ("志明", "淑芬", "建宏", "怡君", "俊傑", "雅琪", "家豪", "美華")),
            "Ivan", "Julia", "Kevin", "Laura", "Mike", "Nina", "Oscar", "Paula", "Quinn", "Rita")
PLACES = ("台北", "高雄", "臺南", "新竹", "台中", "京都", "大阪", "東京", "Kyoto", "Berlin", "San Francisco",
          "Seoul")
PROJECTS = ("proj-a", "proj-b", "proj-c")
#: Topic → the tags a card about it carries.
TOPICS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("資料庫設計", ("資料庫", "設計")), ("後端開發", ("後端",)), ("Kafka 串流", ("Kafka", "串流")),
    ("PostgreSQL 調校", ("PostgreSQL", "效能")), ("JWT auth", ("JWT", "後端", "security")),
    ("Rust 重構", ("Rust",)), ("前端效能", ("前端", "效能")), ("牛肉湯料理", ("料理",)),
    ("機器學習模型", ("機器學習", "ML")), ("API rate limiting", ("API",)), ("向量搜尋", ("pgvector", "搜尋")),
    ("部署流程", ("部署", "DevOps")), ("code review", ("review",)), ("預算規劃", ("預算",)),
    ("招募面試", ("招募",)), ("產品路線圖", ("產品", "roadmap")), ("資安稽核", ("資安", "security")),
    ("日文課", ("日文",)), ("馬拉松訓練", ("跑步",)), ("咖啡烘焙", ("咖啡",)),
    ("Kubernetes 升級", ("Kubernetes", "DevOps")), ("監控告警", ("監控",)),
    ("event sourcing", ("event sourcing", "架構")), ("CQRS 讀模型", ("CQRS", "架構")),
    ("中文分詞", ("NLP", "中文")), ("搜尋排序", ("搜尋", "ranking")), ("成本優化", ("成本",)),
    ("客戶訪談", ("客戶",)), ("季度報告", ("報告",)), ("旅行計畫", ("旅行",)),
)
EVENTS = (
    "和 {person} 在 {place} 開會討論 {topic}", "Met {person} in {place} to discuss {topic}",
    "{person} 在 {place} 分享了 {topic} 的經驗", "Call with {person} ({place}) about {topic}",
    "在 {place} 參加 {topic} 工作坊，{person} 也在", "Wrote a design doc on {topic} with {person} in {place}",
    "跟 {person} 在 {place} 吃飯，聊到 {topic}", "Reviewed {person}'s pull request on {topic} from {place}",
    "到 {place} 出差，和 {person} 處理 {topic} 問題",
    "Debugged a production issue in {topic} with {person} while in {place}",
)
SUFFIXES = ("", "", "", "，約一小時", " (follow-up next week)", "，決定下週再談", " — notes in the wiki",
            "，結論待確認", " (remote)", "，順利結束")
#: Label → (cardinality, memory type, values).
LABELS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "address": ("single_value", "fact", ("台北市大安區", "高雄市前鎮區", "臺南市東區", "新竹市東區",
                                         "Kyoto, Sakyo-ku", "Berlin Mitte", "台中市西屯區", "大阪市北區")),
    "employer": ("single_value", "fact", ("台積電", "Google Taiwan", "Line Taiwan", "趨勢科技", "Shopify",
                                          "樂天", "Appier", "中華電信")),
    "job_title": ("single_value", "fact", ("資深後端工程師", "Staff Engineer", "技術主管",
                                           "Product Manager", "資料科學家", "SRE")),
    "favorite_food": ("single_value", "preference", ("牛肉麵", "拉麵", "小籠包", "sushi", "鹹酥雞", "pho",
                                                     "牛肉湯")),
    "skills": ("multi_value", "fact", ("Python", "PostgreSQL", "Kafka", "資料庫設計", "後端開發", "Rust",
                                       "JWT auth", "Kubernetes", "React", "機器學習")),
    "interests": ("multi_value", "preference", ("爬山", "攝影", "jazz", "馬拉松", "咖啡烘焙", "桌遊",
                                                "日本旅行", "紅酒")),
    "languages": ("multi_value", "fact", ("中文", "English", "日本語", "台語", "Deutsch")),
}
COMMITMENTS = ("答應 {person} 在月底前完成 {topic}", "Promised {person} to finish the {topic} review")
KNOWLEDGE = ("{topic} 的重點整理：{tip}", "Notes on {topic}: {tip}", "{topic} 踩過的坑：{tip}",
             "How we handle {topic}: {tip}")
TIPS = ("先量測再優化", "always add an index before going live", "避免 N+1 查詢",
        "keep the batch size under 500", "設定合理的 timeout", "write the runbook first",
        "用 feature flag 逐步上線", "review the error budget weekly", "資料要先備份",
        "prefer idempotent consumers", "記得寫測試", "document the rollback path")
EDGES = ("related_to",) * 6 + ("evidenced_by", "extends", "supersedes", "contradicts")

#: Bench queries by family; ``{person}`` / ``{place}`` / ``{topic}`` are filled at random.
QUERIES: dict[str, tuple[str, ...]] = {
    "zh": ("我現在住在哪裡", "{person} 在哪裡工作", "關於 {topic} 的筆記", "{topic} 有什麼要注意的",
           "我和 {person} 討論過什麼", "{place} 的行程", "我會哪些技能", "我喜歡吃什麼"),
    "en": ("where do I live now", "what does {person} do for work", "notes about {topic}",
           "what did I discuss with {person} about {topic}", "meetings in {place}", "what are my skills",
           "anything on {topic} best practices"),
    "time": ("上週和 {person} 開會討論了什麼", "上週 {topic} 的進度", "last week meetings about {topic}",
             "昨天做了什麼", "三天前 和 {person} 聊了什麼", "what happened last month in {place}",
             "去年四月 在 {place} 做了什麼", "{topic} since last month", "上個月 {topic}"),
    "tags": ("JWT 後端", "资料库 设计", "Kafka 串流", "PostgreSQL 效能", "DevOps Kubernetes", "security 資安",
             "pgvector 搜尋", "CQRS event sourcing", "{topic}"),
}


# --- template texts and their vectors -----------------------------------------------------------


def event_base(t: int, topic: int, place: int) -> str:
    """The embedded stand-in of every event drawn from (template, topic, place)."""
    person = PEOPLE[(7 * t + 3 * topic + place) % len(PEOPLE)]
    return EVENTS[t].format(person=person, place=PLACES[place], topic=TOPICS[topic][0])


def state_base(label: str, value: str) -> str:
    return f"user {label.replace('_', ' ')}: {value}"


def commitment_base(c: int, topic: int) -> str:
    return COMMITMENTS[c].format(person=PEOPLE[topic % len(PEOPLE)], topic=TOPICS[topic][0])


def knowledge_base(k: int, topic: int, tip: int) -> str:
    name = TOPICS[topic][0]
    return f"{name}\n{KNOWLEDGE[k].format(topic=name, tip=TIPS[tip])}"


def base_texts() -> list[str]:
    texts = [event_base(t, o, p) for t in range(len(EVENTS)) for o in range(len(TOPICS))
             for p in range(len(PLACES))]
    texts += [state_base(label, v) for label, (_, _, values) in LABELS.items() for v in values]
    texts += [commitment_base(c, o) for c in range(len(COMMITMENTS)) for o in range(len(TOPICS))]
    texts += [knowledge_base(k, o, t) for k in range(len(KNOWLEDGE)) for o in range(len(TOPICS))
              for t in range(len(TIPS))]
    return list(dict.fromkeys(texts))


@dataclass
class Bases:
    """The template texts, embedded once: row i of ``vectors`` is ``texts[i]``'s vector."""

    texts: list[str]
    vectors: np.ndarray
    index: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.index = {text: i for i, text in enumerate(self.texts)}


def embed_bases(embedder: Embedder) -> Bases:
    texts = base_texts()
    started, vectors = time.perf_counter(), []
    for i in range(0, len(texts), 256):
        vectors.extend(embedder.embed(texts[i:i + 256]))
    seconds = time.perf_counter() - started
    print(f"template texts   {len(texts):>9,} embedded ({embedder.model}) in {seconds:.1f} s "
          f"({len(texts) / seconds:,.0f} texts/s)", flush=True)
    return Bases(texts, np.asarray(vectors, dtype=np.float32))


# --- cards -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Embedding:
    card_id: uuid.UUID
    digest: bytes
    base: int


@dataclass
class Batch:
    nodes: list[tuple[Any, ...]] = field(default_factory=list)
    slots: list[tuple[Any, ...]] = field(default_factory=list)
    cards: list[tuple[Any, ...]] = field(default_factory=list)
    embeddings: list[Embedding] = field(default_factory=list)
    relations: list[tuple[Any, ...]] = field(default_factory=list)


class Generator:
    """Cards of one tenant drawn from the templates; remembers its slots, cards and edges, so the
    tenant can grow."""

    def __init__(self, tenant: str, seed: int, now: datetime, bases: Bases) -> None:
        self.tenant, self.now, self.bases = tenant, now, bases
        self.rng = random.Random(seed)
        self.slots: dict[tuple[str, str, str | None], uuid.UUID] = {}
        self.card_ids: list[uuid.UUID] = []
        self.edges: set[tuple[uuid.UUID, uuid.UUID, str]] = set()
        self.columns: dict[tuple[str, str | None, tuple[str, ...]], dict[str, Any]] = {}
        self.batch = Batch()

    def draw(self, cards: int, edges: int) -> Batch:
        self.batch = Batch()
        started = time.perf_counter()
        for i in range(1, cards + 1):
            r = self.rng.random()
            kind = self._event if r < 0.45 else self._state if r < 0.78 else (
                self._commitment if r < 0.80 else self._knowledge)
            kind()
            if i % 25_000 == 0 or i == cards:
                rate = i / (time.perf_counter() - started)
                print(f"  {self.tenant}: {i:,}/{cards:,} cards drawn ({rate:,.0f} cards/s, "
                      f"{len(self.columns):,} distinct texts)", flush=True)
        for _ in range(edges):
            self._edge()
        return self.batch

    def _id(self) -> uuid.UUID:
        return uuid.UUID(int=self.rng.getrandbits(128), version=4)

    def _moment(self) -> datetime:
        return self.now - timedelta(seconds=self.rng.uniform(0, 730 * 86_400))

    def _text(self, content: str, title: str | None, tags: tuple[str, ...]) -> dict[str, Any]:
        key = (content, title, tags)
        found = self.columns.get(key)
        if found is None:
            found = self.columns[key] = _text_columns(content, title, tags=tags)
        return found

    def _scope(self) -> dict[str, Any]:
        r = self.rng.random()
        if r < 0.70:
            return {"scope": "personal"}
        if r < 0.90:
            return {"scope": "project", "project_id": self.rng.choice(PROJECTS)}
        return {"scope": "group", "group_id": "team-core"} if r < 0.95 else {"scope": "global"}

    def _provenance(self) -> dict[str, Any]:
        r = self.rng.random()
        if r < 0.80:
            return {"source": "user_stated"}
        if r < 0.95:
            return {"source": "agent_inferred", "agent_id": f"agent-{self.rng.randrange(5)}",
                    "inference_confidence": round(self.rng.uniform(0.5, 0.95), 2)}
        return {"source": "imported"}

    def _add(self, card_id: uuid.UUID, embedded: str, base: str, **values: Any) -> None:
        row: dict[str, Any] = dict.fromkeys(CARD_COLUMNS)
        row.update(tenant_id=self.tenant, card_id=card_id, updated_at=values["recorded_at"],
                   **self._provenance(), **values)
        if self.rng.random() < 0.015:
            row["retracted_at"] = min(self.now, row["recorded_at"] + timedelta(days=1))
        self.batch.nodes.append((self.tenant, card_id, "card"))
        self.batch.cards.append(tuple(row[c] for c in CARD_COLUMNS))
        self.batch.embeddings.append(Embedding(card_id, content_hash(embedded), self.bases.index[base]))
        self.card_ids.append(card_id)

    def _event(self) -> None:
        rng = self.rng
        t, topic, place = rng.randrange(len(EVENTS)), rng.randrange(len(TOPICS)), rng.randrange(len(PLACES))
        text = EVENTS[t].format(person=rng.choice(PEOPLE), place=PLACES[place],
                                topic=TOPICS[topic][0]) + rng.choice(SUFFIXES)
        tags = _tags(TOPICS[topic][1]) if rng.random() < 0.5 else ()
        occurred = self._moment()
        recorded = min(self.now, occurred + timedelta(hours=rng.uniform(0, 48)))
        card_id = self._id()
        self._add(card_id, text, event_base(t, topic, place), aggregate_id=card_id, kind="event",
                  memory_type="event", content=text, valid_from=occurred, occurred_at=occurred,
                  recorded_at=recorded, **self._scope(), **self._text(text, None, tags))

    def _slot(self, subject: str, label: str, project: str | None) -> tuple[uuid.UUID, dict[str, Any]]:
        scope = {"scope": "project", "project_id": project} if project else {"scope": "personal"}
        key = (subject, label, project)
        slot_id = self.slots.get(key)
        if slot_id is None:
            slot_id = self.slots[key] = self._id()
            row = {"tenant_id": self.tenant, "slot_id": slot_id, "group_id": None, "subject": subject,
                   "label": label, "cardinality": LABELS[label][0], "project_id": None,
                   "slot_words": list(slot_words(subject, label)), "erased_at": None, **scope}
            self.batch.nodes.append((self.tenant, slot_id, "slot"))
            self.batch.slots.append(tuple(row[c] for c in SLOT_COLUMNS))
        return slot_id, scope

    def _state(self) -> None:
        rng = self.rng
        label = rng.choice(tuple(LABELS))
        cardinality, memory_type, values = LABELS[label]
        subject = "user" if rng.random() < 0.3 else rng.choice(SUBJECTS)
        slot_id, scope = self._slot(subject, label, rng.choice(PROJECTS) if rng.random() < 0.15 else None)
        value, since = rng.choice(values), self._moment()
        embedded = f"{subject} {label.replace('_', ' ')}: {value}"
        self._add(self._id(), embedded, state_base(label, value), aggregate_id=slot_id, kind="state",
                  memory_type=memory_type, subject=subject, label=label, cardinality=cardinality,
                  slot_words=list(slot_words(subject, label)), content=value, valid_from=since,
                  recorded_at=min(self.now, since + timedelta(hours=1)), **scope,
                  **self._text(value, None, ()))

    def _commitment(self) -> None:
        rng = self.rng
        c, topic = rng.randrange(len(COMMITMENTS)), rng.randrange(len(TOPICS))
        text = COMMITMENTS[c].format(person=rng.choice(PEOPLE), topic=TOPICS[topic][0])
        at, card_id = self._moment(), self._id()
        status = rng.choices(("open", "waiting", "resolved"), (6, 1, 3))[0]
        self._add(card_id, text, commitment_base(c, topic), aggregate_id=card_id, kind="state",
                  memory_type="commitment", content=text, valid_from=at, recorded_at=at, status=status,
                  owner="user", due_at=at + timedelta(days=14), **self._scope(), **self._text(text, None, ()))

    def _knowledge(self) -> None:
        rng = self.rng
        k, topic, tip = rng.randrange(len(KNOWLEDGE)), rng.randrange(len(TOPICS)), rng.randrange(len(TIPS))
        name, tags = TOPICS[topic][0], _tags(TOPICS[topic][1])
        title = name if rng.random() < 0.5 else f"{name} 筆記"
        body = KNOWLEDGE[k].format(topic=name, tip=TIPS[tip])
        at, card_id = self._moment(), self._id()
        verified = min(self.now, at + timedelta(days=rng.choice((0, 0, 30, 120))))
        self._add(card_id, f"{title}\n{body}", knowledge_base(k, topic, tip), aggregate_id=card_id,
                  kind="knowledge", memory_type=rng.choices(("note", "pattern", "decision"), (7, 2, 1))[0],
                  content=body, title=title, valid_from=at, recorded_at=at, verified_at=verified,
                  **self._scope(), **self._text(body, title, tags))

    def _edge(self) -> None:
        src, dst = self.rng.sample(self.card_ids, 2)
        key = (src, dst, self.rng.choice(EDGES))
        if key not in self.edges:
            self.edges.add(key)
            self.batch.relations.append((self.tenant, *key, self._moment()))


def _tags(tags: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(normalise_tag(tag) for tag in tags))


# --- loading -----------------------------------------------------------------------------------------


class Progress:
    def __init__(self, label: str, total: int, every: int = 25_000) -> None:
        self.label, self.total, self.every = label, total, every
        self.count, self.started = 0, time.perf_counter()

    def tick(self) -> None:
        self.count += 1
        if self.count % self.every == 0 and self.count < self.total:
            self._print("")

    def done(self) -> None:
        self._print(" done")

    def _print(self, suffix: str) -> None:
        seconds = time.perf_counter() - self.started
        print(f"  {self.label:<26} {self.count:>9,}/{self.total:,} rows  {seconds:6.1f} s  "
              f"{self.count / max(seconds, 1e-9):>9,.0f} rows/s{suffix}", flush=True)


def copy_rows(conn: psycopg.Connection[Any], schema: str, tenant: str, table: str,
              columns: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> None:
    if not rows:
        return
    statement = sql.SQL("COPY {}.{} ({}) FROM STDIN").format(
        sql.Identifier(schema), sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, columns)))
    progress = Progress(f"{tenant} {table}", len(rows))
    with conn.transaction():
        conn.execute("SELECT set_config('palimpsest.tenant', %s, true)", (tenant,))
        with conn.cursor().copy(statement) as copy:
            for row in rows:
                copy.write_row(row)
                progress.tick()
    progress.done()


def copy_embeddings(conn: psycopg.Connection[Any], schema: str, tenant: str, model: str,
                    items: Sequence[Embedding], bases: Bases, noise: np.random.Generator) -> None:
    """Binary COPY: each vector goes as pgvector's wire format (int16 dims, int16 0, float4 × dims)."""
    dims = bases.vectors.shape[1]
    header = struct.pack(">HH", dims, 0)
    statement = sql.SQL("COPY {}.card_embeddings (tenant_id, card_id, model, content_hash, embedding) "
                        "FROM STDIN (FORMAT BINARY)").format(sql.Identifier(schema))
    progress = Progress(f"{tenant} card_embeddings", len(items))
    with conn.transaction():
        conn.execute("SELECT set_config('palimpsest.tenant', %s, true)", (tenant,))
        with conn.cursor().copy(statement) as copy:
            copy.set_types(["text", "uuid", "text", "bytea", "bytea"])
            for start in range(0, len(items), 4_096):
                chunk = items[start:start + 4_096]
                vectors = bases.vectors[[item.base for item in chunk]]
                vectors = vectors + noise.normal(0.0, SIGMA, vectors.shape).astype(np.float32)
                vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
                for item, vector in zip(chunk, vectors.astype(">f4"), strict=True):
                    copy.write_row((tenant, item.card_id, model, item.digest, header + vector.tobytes()))
                    progress.tick()
    progress.done()


def load(conn: psycopg.Connection[Any], schema: str, tenant: str, batch: Batch, model: str,
         bases: Bases, noise: np.random.Generator) -> None:
    copy_rows(conn, schema, tenant, "nodes", ("tenant_id", "node_id", "node_kind"), batch.nodes)
    copy_rows(conn, schema, tenant, "slots", SLOT_COLUMNS, batch.slots)
    copy_rows(conn, schema, tenant, "cards", CARD_COLUMNS, batch.cards)
    copy_embeddings(conn, schema, tenant, model, batch.embeddings, bases, noise)
    copy_rows(conn, schema, tenant, "card_relations",
              ("tenant_id", "src_id", "dst_id", "edge", "recorded_at"), batch.relations)


#: Single-value slots: every card but the latest is closed where the next one begins.
_CLOSE_SUPERSEDED = """UPDATE {s}.cards c SET valid_to = n.next_from FROM (
    SELECT tenant_id, card_id, lead(valid_from) OVER (
        PARTITION BY tenant_id, aggregate_id ORDER BY valid_from, card_id) AS next_from
    FROM {s}.cards WHERE kind = 'state' AND cardinality = 'single_value' AND retracted_at IS NULL) n
WHERE c.tenant_id = n.tenant_id AND c.card_id = n.card_id AND c.valid_to IS DISTINCT FROM n.next_from"""


def finish_load(conn: psycopg.Connection[Any], schema: str, index: Kind) -> float:
    s = sql.Identifier(schema)
    started = time.perf_counter()
    closed = conn.execute(sql.SQL(_CLOSE_SUPERSEDED).format(s=s)).rowcount
    conn.execute(sql.SQL("VACUUM ANALYZE {}.cards").format(s))
    conn.execute(sql.SQL("VACUUM ANALYZE {}.card_terms").format(s))  # as autovacuum would, in time
    print(f"  single-value slots: {closed:,} superseded cards closed; cards and their words vacuumed "
          f"({time.perf_counter() - started:.1f} s)", flush=True)
    started = time.perf_counter()
    conn.execute("SET maintenance_work_mem = '2GB'")
    counted = conn.execute(sql.SQL("SELECT count(*) FROM {}.card_embeddings").format(s)).fetchone()
    vectors = int(counted[0]) if counted else 0
    statement = create_statement(schema, index, vectors)
    if statement is not None:
        conn.execute(statement)
    shape = f", {lists_for(vectors):,} lists" if index == "ivfflat" else ""
    built = time.perf_counter() - started
    print(f"{index} build  {built:>9.1f} s for {vectors:,} vectors{shape} "
          "(maintenance_work_mem 2GB)", flush=True)
    started = time.perf_counter()
    conn.execute(sql.SQL("VACUUM ANALYZE {}.card_embeddings").format(s))
    conn.execute(sql.SQL("ANALYZE {}.nodes, {}.slots, {}.card_relations").format(s, s, s))
    print(f"  ANALYZE {time.perf_counter() - started:.1f} s", flush=True)
    return built


def grow(admin: psycopg.Connection[Any], schema: str, generators: dict[str, Generator],
         targets: dict[str, int], model: str, bases: Bases, noise: np.random.Generator,
         index: Kind) -> float:
    for name in NAMES.values():
        admin.execute(sql.SQL("DROP INDEX IF EXISTS {}.{}").format(sql.Identifier(schema),
                                                                   sql.Identifier(name)))
    for tenant, target in targets.items():
        generator = generators[tenant]
        cards = target - len(generator.card_ids)
        edges = target // EDGE_DIVISOR - len(generator.edges)
        started = time.perf_counter()
        batch = generator.draw(cards, edges)
        load(admin, schema, tenant, batch, model, bases, noise)
        print(f"loaded {tenant}: +{cards:,} cards, +{len(batch.slots):,} slots, "
              f"+{len(batch.relations):,} relations in {time.perf_counter() - started:.1f} s", flush=True)
    return finish_load(admin, schema, index)


# --- measuring ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchQuery:
    text: str
    project_id: str | None
    vector: str = ""


def bench_queries(count: int, seed: int = 11) -> list[BenchQuery]:
    rng = random.Random(seed)
    families = list(QUERIES)
    out = []
    for i in range(count):
        template = rng.choice(QUERIES[families[i % len(families)]])
        text = template.format(person=rng.choice(PEOPLE), place=rng.choice(PLACES),
                               topic=rng.choice(TOPICS)[0])
        out.append(BenchQuery(text, "proj-a" if rng.random() < 0.5 else None))
    return out


def semantic_route(queries: Queries) -> SemanticRoute:
    return next(r for r in queries.retriever.routes if isinstance(r, SemanticRoute))


def embed_queries(queries: Queries, wanted: list[BenchQuery]) -> list[BenchQuery]:
    """The semantic route's own (cached) query vectors, computed now and timed."""
    route = semantic_route(queries)
    times: dict[str, float] = {}
    out = []
    for query in wanted:
        started = time.perf_counter()
        vector = route.vector(query.text)
        times.setdefault(query.text, (time.perf_counter() - started) * 1000)  # first call: no cache
        out.append(BenchQuery(query.text, query.project_id, vector))
    fresh = list(times.values())
    print(f"query embedding  p50 {statistics.median(fresh):.1f} ms, p95 {nearest_rank(fresh):.1f} ms "
          f"(one text, {route.embedder.model}; {len(fresh)} distinct queries; included in the "
          "'fused, as paid' figures below, not in the others)", flush=True)
    return out


_BARE = "SELECT card_id FROM {}.card_embeddings ORDER BY embedding <=> %s::vector LIMIT %s"


class Bare:
    """The bare vector query as the runtime role, one transaction that sets the tenant each time."""

    def __init__(self, conn: psycopg.Connection[Any], schema: str, tenant: str) -> None:
        self.conn, self.tenant = conn, tenant
        self.statement = sql.SQL(_BARE).format(sql.Identifier(schema)).as_string(conn)

    def __call__(self, vector: str, *, settings: dict[str, str] | None = None, exact: bool = False,
                 limit: int = 20) -> tuple[list[uuid.UUID], float]:
        """The top ``limit`` at the index's defaults, with ``settings`` (the semantic route's), or
        ``exact``. Never a prepared statement: one prepared with index scans off would keep its
        exact plan for the later calls."""
        gucs = {"palimpsest.tenant": self.tenant, **(settings or {})}
        if exact:
            gucs["enable_indexscan"] = "off"
        setting = "SELECT " + ", ".join("set_config(%s, %s, true)" for _ in gucs)
        started = time.perf_counter()
        with self.conn.transaction():
            self.conn.execute(setting, [v for pair in gucs.items() for v in pair])
            rows = self.conn.execute(self.statement, (vector, limit), prepare=False).fetchall()
        return [row[0] for row in rows], (time.perf_counter() - started) * 1000

    def plan(self, vector: str) -> str:
        with self.conn.transaction():
            self.conn.execute("SELECT set_config('palimpsest.tenant', %s, true)", (self.tenant,))
            rows = self.conn.execute("EXPLAIN " + self.statement, (vector, 20)).fetchall()
        scan = next((str(r[0]) for r in rows if "Scan" in str(r[0])), str(rows[0][0]))
        return scan.split("(cost")[0].strip(" ->")


class _Explained(Exception):
    pass


class _Explain:
    """Stands in for a route's connection: EXPLAINs its query instead of running it."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn, self.scans = conn, ""

    def execute(self, query: Any, params: Any = None) -> Any:
        text = query.as_string(self.conn) if isinstance(query, sql.Composable) else str(query)
        if not text.lstrip().startswith(("SELECT", "WITH")) or "set_config" in text:
            return self.conn.execute(query, params)
        rows = self.conn.execute("EXPLAIN (COSTS OFF) " + text, params).fetchall()
        found = (_SCAN.search(row["QUERY PLAN"]) for row in rows)
        self.scans = ", ".join(f"{m[1]} {m[2] or m[3]}" for m in found if m and m[3] != "r") or "-"
        raise _Explained


_SCAN = re.compile(r"((?:Parallel )?(?:Seq|Index|Index Only|Bitmap Index|Bitmap Heap) Scan)"
                   r"(?: using (\S+))? on (\S+)")
#: One query per matching path: CJK tags / bigrams / a time word; Latin words / trigrams.
PLAN_QUERIES = ("上週 資料庫設計 的進度", "notes about Kafka streaming")


def route_plans(queries: Queries) -> list[str]:
    """The scans each first-stage route's statement plans, as the runtime role, per plan query."""
    lines = []
    for text in PLAN_QUERIES:
        query = queries.query(text, project_id="proj-a")
        scans = []
        for route in queries.retriever.routes:
            with queries.retriever.route_transaction(route, MAIN) as conn:
                explain = _Explain(conn)
                with contextlib.suppress(_Explained):
                    route(explain, query, queries.retriever.ctx)  # type: ignore[arg-type]
            scans.append(f"{route.name}: {explain.scans or 'no statement'}")
        lines.append(f"  {text!r}: " + " | ".join(scans))
    return lines


@dataclass
class Figures:
    size: int
    #: Queries.search as a caller pays it, the question's embedding included …
    paid: list[float] = field(default_factory=list)
    #: … and with the embedding already cached (the figure earlier releases printed).
    fused: list[float] = field(default_factory=list)
    bare: list[float] = field(default_factory=list)
    bare_route_ef: list[float] = field(default_factory=list)
    exact: list[float] = field(default_factory=list)
    routes: dict[str, list[float]] = field(default_factory=dict)
    hits: dict[str, list[int]] = field(default_factory=dict)
    statuses: dict[str, Counter[str]] = field(default_factory=dict)
    rest: list[float] = field(default_factory=list)
    #: Searches that ran with at least one route (or the slot stage) quarantined.
    degraded: int = 0
    overlap: dict[str, list[float]] = field(default_factory=dict)
    returned: dict[str, list[int]] = field(default_factory=dict)
    plan: str = ""
    route_plans: list[str] = field(default_factory=list)
    #: The semantic route's index settings, and what the corpus costs (:func:`footprint`).
    route: str = ""
    footprint: dict[str, Any] = field(default_factory=dict)


def fused(queries: Queries, query: BenchQuery, figures: Figures | None, *, embed: bool = False) -> None:
    """One search, timed; with ``embed`` the question's embedding is computed inside it (the
    semantic route's cache emptied first), as a caller with a new question pays it."""
    if embed:
        semantic_route(queries).forget()
    started = time.perf_counter()
    result = queries.search(MAIN, queries.query(query.text, project_id=query.project_id))
    wall = (time.perf_counter() - started) * 1000
    if figures is None:
        return
    if embed:
        figures.paid.append(wall)
        return
    figures.fused.append(wall)
    reports = result.diagnostics.routes
    quarantined = [r for r in (*reports.values(), result.diagnostics.slots)
                   if r is not None and r.status == "quarantined"]
    figures.degraded += bool(quarantined)
    for name, report in reports.items():
        figures.statuses.setdefault(name, Counter())[report.status] += 1
        if report.status == "ok":
            figures.routes.setdefault(name, []).append(report.ms)
            figures.hits.setdefault(name, []).append(report.hits)
    slowest = max((reports[n].ms for n in FIRST_ROUTES if n in reports), default=0.0)
    figures.rest.append(wall - slowest - (reports["graph"].ms if "graph" in reports else 0.0))


def measure(queries: Queries, bare: Bare, wanted: list[BenchQuery], size: int,
            route: dict[str, str]) -> Figures:
    figures = Figures(size, plan=bare.plan(wanted[0].vector), route_plans=route_plans(queries))
    for query in wanted[:20]:  # warm-up: pool connections, plans, buffers
        fused(queries, query, None)
        bare(query.vector)
        bare(query.vector, settings=route)
    started = time.perf_counter()
    for i, query in enumerate(wanted):
        if i % 2:  # alternate which goes first, so neither always meets the other's leftovers
            fused(queries, query, figures, embed=True)
            fused(queries, query, figures)
        figures.bare.append(bare(query.vector)[1])
        figures.bare_route_ef.append(bare(query.vector, settings=route)[1])
        if not i % 2:
            fused(queries, query, figures)
            fused(queries, query, figures, embed=True)
    print(f"  {2 * len(wanted)} fused + {2 * len(wanted)} bare queries in "
          f"{time.perf_counter() - started:.1f} s", flush=True)
    recall(bare, wanted, figures, route)
    return figures


#: The names of the two index settings measured: the index's defaults, and the semantic route's.
DEFAULTS, ROUTE = "index defaults", "route settings"


def recall(bare: Bare, wanted: list[BenchQuery], figures: Figures, route: dict[str, str]) -> None:
    """Top 5 of the index's answers against the exact top 5 (index scans off)."""
    for query in dict((q.text, q) for q in wanted).values():
        exact, ms = bare(query.vector, exact=True)
        figures.exact.append(ms)
        for name, settings in ((DEFAULTS, None), (ROUTE, route)):
            found, _ = bare(query.vector, settings=settings)
            figures.returned.setdefault(name, []).append(len(found))
            share = len(set(found[:5]) & set(exact[:5])) / max(1, min(5, len(exact)))
            figures.overlap.setdefault(name, []).append(share)


# --- reporting -------------------------------------------------------------------------------------


def _p(samples: Sequence[float]) -> tuple[float, float]:
    return (statistics.median(samples), nearest_rank(samples)) if samples else (float("nan"),) * 2


def report(figures: Figures) -> None:
    paid_p, fused_p = _p(figures.paid), _p(figures.fused)
    bare_p, route_p, exact_p = _p(figures.bare), _p(figures.bare_route_ef), _p(figures.exact)
    print(f"\n== {figures.size:,} cards (tenant {MAIN}; {figures.size // NOISE_DIVISOR:,} more in "
          f"{NOISE}) ==")
    print(f"fused, as paid   p50 {paid_p[0]:7.1f} ms   p95 {paid_p[1]:7.1f} ms   (Queries.search, wall, "
          "the question's embedding included)")
    print(f"fused, cached    p50 {fused_p[0]:7.1f} ms   p95 {fused_p[1]:7.1f} ms   (the same with the "
          "embedding already cached)")
    print(f"bare top-20      p50 {bare_p[0]:7.1f} ms   p95 {bare_p[1]:7.1f} ms   ({DEFAULTS}; plan: "
          f"{figures.plan})")
    print(f"bare top-20      p50 {route_p[0]:7.1f} ms   p95 {route_p[1]:7.1f} ms   ({ROUTE}: "
          f"{figures.route})")
    print(f"exact top-20     p50 {exact_p[0]:7.1f} ms   p95 {exact_p[1]:7.1f} ms   (enable_indexscan off)")
    print(f"ratio fused p95 (as paid) / bare p95: {paid_p[1] / bare_p[1]:.1f}×  "
          f"(/ bare at the {ROUTE}: {paid_p[1] / route_p[1]:.1f}×; cached: {fused_p[1] / bare_p[1]:.1f}×)")
    for name, shares in figures.overlap.items():
        returned = statistics.mean(figures.returned[name])
        print(f"index top-5 overlap with exact, {name:<14} {statistics.mean(shares):.3f}  "
              f"(rows returned of 20: mean {returned:.1f}, min {min(figures.returned[name])})")
    if figures.footprint:
        f = figures.footprint
        print(f"index {f['index']}: built in {f['index_build_s'] or 0:.1f} s, {f['index_mb']:,} MB; "
              f"database {f['disk_mb']:,} MB on disk; PostgreSQL resident {f['server_rss_mb']:,} MB")
    print("per route (diagnostics)     ok   p50 ms   p95 ms   mean hits   other statuses")
    for name in (*FIRST_ROUTES, "graph"):
        samples, statuses = figures.routes.get(name, []), figures.statuses.get(name, Counter())
        other = ", ".join(f"{k} {v}" for k, v in statuses.items() if k != "ok") or "-"
        hits = statistics.mean(figures.hits[name]) if figures.hits.get(name) else 0.0
        p50, p95 = _p(samples)
        print(f"  {name:<24} {statuses['ok']:>4} {p50:8.1f} {p95:8.1f} {hits:11.1f}   {other}")
    searches = len(figures.paid) + len(figures.fused)
    print(f"searches with a route quarantined: {figures.degraded} of {searches}")
    p50, p95 = _p(figures.rest)
    print(f"  {'rest':<24} {len(figures.rest):>4} {p50:8.1f} {p95:8.1f}   (wall - slowest first-stage "
          "route - graph: fusion, candidate load, post-processing, waits)")
    print("scans each route's statement plans (runtime role, row-level security on):")
    for line in figures.route_plans:
        print(line)


def summary(all_figures: list[Figures]) -> None:
    print("\n== summary ==  (bare: the top-20 query at the index's defaults / at the semantic "
          "route's settings)")
    print("fused: as a caller pays it, the question's embedding included (cached: without it)")
    print("   cards   fused p50   fused p95   cached p95   bare p95 (def.)  bare p95 (route)  ratio (def.)"
          "  ratio (route)   p95 ≤ 40 ms")
    for f in all_figures:
        paid_p, fused_p, bare_p, route_p = _p(f.paid), _p(f.fused), _p(f.bare), _p(f.bare_route_ef)
        scan = "index" if "card_embeddings_" in f.plan else "seq scan"
        print(f"{f.size:>8,} {paid_p[0]:9.1f}ms {paid_p[1]:9.1f}ms {fused_p[1]:10.1f}ms {bare_p[1]:8.1f}ms "
              f"{scan:<8} {route_p[1]:11.1f}ms {_ratio(paid_p[1], bare_p[1]):>14} "
              f"{_ratio(paid_p[1], route_p[1]):>15}   {_verdict(paid_p[1] <= _target(f.size)):>11}")
    print(f"(targets at 100,000 cards: fused p95 ≤ {TARGET_P95_MS:.0f} ms and ≤ {TARGET_RATIO:.0f}× the bare "
          f"p95; at 1,000,000: ≤ {TARGET_1M_P95_MS:.0f} ms; {os.cpu_count()} CPUs, shared with other work)")


def _target(size: int) -> float:
    return TARGET_1M_P95_MS if size >= 1_000_000 else TARGET_P95_MS


def _ratio(fused_p95: float, bare_p95: float) -> str:
    ratio = fused_p95 / bare_p95
    return f"{ratio:.1f}× {_verdict(ratio <= TARGET_RATIO)}"


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


# --- wiring --------------------------------------------------------------------------------------------


def prepare(settings: Settings) -> None:
    """A fresh read schema on a server tuned for loading (the write side only)."""
    admin = admin_database(settings)
    with admin.connect(autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET synchronous_commit = off")
        conn.execute("SELECT pg_reload_conf()")
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(settings.read_schema)))
    bootstrap(admin, settings)
    with admin.connect(autocommit=True) as conn:
        row = conn.execute("SELECT current_setting('server_version'), current_setting('shared_buffers'), "
                           "(SELECT extversion FROM pg_extension WHERE extname = 'vector')").fetchone()
    if row:
        print(f"PostgreSQL {row[0]} (embedded), pgvector {row[2]}, shared_buffers {row[1]}, "
              f"{os.cpu_count()} CPUs", flush=True)


def stop_server(settings: Settings) -> None:
    if settings.database_url is not None:
        return
    import pgserver

    pgserver.get_server(Path(settings.data_dir).resolve() / "pg").cleanup()


LOADED = "loaded.json"


def run(settings: Settings, sizes: list[int], count: int, hog: bool = False,
        reuse: bool = False) -> list[Figures]:
    marker = Path(settings.data_dir).parent / LOADED
    loaded: int | None = None
    if reuse:
        loaded = json.loads(marker.read_text())["size"] if marker.exists() else None
        if loaded is None or sizes != [loaded]:
            raise SystemExit(f"--reuse: the folder holds {loaded or 'no'} loaded corpus; "
                             f"asked for {sizes}")
        sizes = []
    else:
        marker.unlink(missing_ok=True)
        prepare(settings)
    bases = embed_bases(create_embedder(settings))
    now = datetime.now(UTC)
    generators = {MAIN: Generator(MAIN, 1, now, bases), NOISE: Generator(NOISE, 2, now, bases)}
    noise = np.random.default_rng(3)
    model = create_embedder(settings).model
    wanted = bench_queries(count)
    index = vector_index_kind(settings)
    admin_db = admin_database(settings)
    queries: Queries | None = None
    results = []
    try:
        with admin_db.connect(autocommit=True) as admin, \
                runtime_database(admin_db, settings).connect(autocommit=True) as runtime:
            for size in sizes or [loaded or 0]:
                if sizes:
                    print(f"\nloading to {size:,} cards …", flush=True)
                    built = grow(admin, settings.read_schema, generators,
                                 {MAIN: size, NOISE: size // NOISE_DIVISOR}, model, bases, noise, index)
                    marker.write_text(json.dumps({"size": size, "index": index, "build_s": built}))
                if queries is None:
                    queries = create_queries(settings.model_copy(update={"auto_bootstrap": False}))
                    wanted = embed_queries(queries, wanted)
                print(f"measuring {len(wanted)} queries at {size:,} cards"
                      f"{' beside a busy loop on every core' if hog else ''} …", flush=True)
                hogs = cpu_hog.start(3_600) if hog else []
                route = dict(semantic_route(queries).settings(queries.retriever.ctx))
                try:
                    figures = measure(queries, Bare(runtime, settings.read_schema, MAIN), wanted,
                                      size, route)
                finally:
                    cpu_hog.stop(hogs)
                figures.route = ", ".join(f"{k} {v}" for k, v in route.items() if k.startswith(index))
                figures.footprint = footprint(admin, settings.read_schema,
                                              json.loads(marker.read_text()))
                results.append(figures)
                report(results[-1])
        summary(results)
    finally:
        if queries is not None:
            queries.close()
    return results


def footprint(conn: psycopg.Connection[Any], schema: str, loaded: dict[str, Any]) -> dict[str, Any]:
    """What the loaded corpus costs: the index's build time (from the load), the database's and
    the vector index's size on disk, and the server processes' memory now (their proportional
    set sizes summed)."""
    import psutil

    names = list(NAMES.values())
    row = conn.execute(
        "SELECT pg_database_size(current_database()), coalesce(sum(pg_relation_size(c.oid)), 0) "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = ANY(%s)", (schema, names)).fetchone()
    resident = 0  # proportional set sizes: the shared buffers each backend touched, counted once
    for process in psutil.process_iter(["name"]):
        if process.info["name"] and "postgres" in process.info["name"]:
            with contextlib.suppress(psutil.Error):
                resident += process.memory_full_info().pss
    return {"index": loaded.get("index"), "index_build_s": loaded.get("build_s"),
            "disk_mb": round(row[0] / 2**20) if row else None,
            "index_mb": round(row[1] / 2**20) if row else None,
            "server_rss_mb": round(resident / 2**20)}


def as_json(all_figures: list[Figures]) -> dict[str, Any]:
    """The figures of each size, as ``--json`` prints them. ``bare_p95_ms`` is the bare top-20 at
    the semantic route's index settings (the same index and recall the route has);
    ``bare_defaults_p95_ms`` at the index's defaults."""
    sizes = {}
    for f in all_figures:
        overlap = f.overlap.get(ROUTE, [])
        sizes[str(f.size)] = {
            "fused_p50_ms": round(_p(f.paid)[0], 2), "fused_p95_ms": round(_p(f.paid)[1], 2),
            "cached_p95_ms": round(_p(f.fused)[1], 2), "bare_p95_ms": round(_p(f.bare_route_ef)[1], 2),
            "bare_defaults_p95_ms": round(_p(f.bare)[1], 2),
            "recall_at_5": round(statistics.mean(overlap), 3) if overlap else None,
            "recall_at_5_defaults": round(statistics.mean(f.overlap[DEFAULTS]), 3)
            if f.overlap.get(DEFAULTS) else None,
            "semantic_p95_ms": round(_p(f.routes.get("semantic", []))[1], 2),
            "tags_p95_ms": round(_p(f.routes.get("tags", []))[1], 2),
            "route_settings": f.route, **f.footprint}
    return {"sizes": sizes, "cpus": os.cpu_count()}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000", help="cards of the main tenant, grown in order")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--data-dir", type=Path, help="default: a temporary folder, removed at the end")
    parser.add_argument("--keep", action="store_true", help="keep the temporary data folder")
    parser.add_argument("--reuse", action="store_true",
                        help="measure the corpus a --keep run left in --data-dir, without loading")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    parser.add_argument("--breakers", action="store_true",
                        help="keep the route breakers (default: lifted, every route always runs)")
    parser.add_argument("--hog", action="store_true",
                        help="measure beside a busy loop on every core (tests.benchmarks.cpu_hog)")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    folder = args.data_dir or Path(tempfile.mkdtemp(prefix="palimpsest-bench-retrieval-"))
    retrieval = Settings().retrieval  # with any PALIMPSEST_RETRIEVAL__* of the environment
    if not args.breakers:
        retrieval = retrieval.model_copy(update={"breaker_p95_ms": 1e9})
    settings = Settings(data_dir=folder / "data", retrieval=retrieval)
    if not vector_search_available(settings):
        raise SystemExit("this server cannot compute vector distances: run python -m infra.pgvector_build")
    print(f"data folder {folder}; breakers {'on' if args.breakers else 'lifted'}", flush=True)
    if args.reuse and args.data_dir is None:
        raise SystemExit("--reuse needs --data-dir (the folder a --keep run left)")
    try:
        figures = run(settings, sizes, args.queries, hog=args.hog, reuse=args.reuse)
        if args.json:
            print(json.dumps(as_json(figures)))
    finally:
        stop_server(settings)
        if args.data_dir is None and not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
