"""Palimpsest's fused search beside mem0 OSS's search: the same cards, questions and embedder, on one
embedded PostgreSQL, in one run.

    .venv/bin/python -m tests.benchmarks.peers.mem0_peer [--cards 10000] [--queries 200]
        [--data-dir PATH] [--keep] [--json]

The corpus is bench_retrieval's, loaded by its functions with its seeds: N cards for tenant
``bench-main`` and a quarter as many for ``bench-noise``, the vector index built after the load. mem0
(:mod:`tests.benchmarks.peers.mem0_store`) gets a database of its own on the same server holding
every card's vector and embedded text, as user ``bench-main`` or ``bench-noise``.

The questions are bench_retrieval's (``bench_queries``, the same seed). After a warm-up of 20 each,
every question is asked of both, one right after the other (which goes first alternates, so
neither always meets the other's leftovers), both as a caller pays: wall clock, the question's
embedding computed afresh inside it (the semantic route's cache emptied first; mem0 caches none).
Palimpsest: ``Queries.search`` with the route breakers lifted and ``top_n`` 10. mem0:
``Memory.search(question, top_k=10, filters={"user_id": "bench-main"})``. The question's embedding
alone is timed beside them, to tell how much of each figure it is.

mem0 2.2's search is more than a vector query: it lemmatises the question and extracts its
entities with spaCy (neither here: spaCy is not installed, and its model would be downloaded),
embeds it, reads ``max(4 × top_k, 60)`` nearest neighbours filtered on ``payload->>'user_id'``,
runs a full-text query over ``text_lemmatized`` (``to_tsvector('simple', …)``, a GIN index),
would look the entities up in an entity store, and adds the normalised scores. The plan its vector
query gets is printed: from 2,500 to 25,000 memories it was an exact scan (a seq scan and a sort),
its HNSW index unused — with no statistics on ``payload->>'user_id'`` the planner guesses that
0.5 % of the rows match.

Target: Palimpsest's p95 ≤ 0.75 × mem0's. ``--json`` prints one JSON object last: ``{"cards",
"palimpsest": {"p50_ms", "p95_ms"}, "mem0": {"p50_ms", "p95_ms"}, "ratio_p95", "target"}``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from infra.embedders import Embedder, create_embedder
from infra.postgres import Database, admin_database, vector_index_kind, vector_search_available
from infra.settings import Settings
from services.factory import create_queries
from services.query.queries import Queries
from services.query.retrieval.breaker import nearest_rank
from tests.benchmarks.bench_retrieval import (
    MAIN,
    NOISE,
    NOISE_DIVISOR,
    BenchQuery,
    Figures,
    Generator,
    bench_queries,
    embed_bases,
    fused,
    grow,
    prepare,
    semantic_route,
    stop_server,
)
from tests.benchmarks.peers import mem0_store

LIMIT = 10
TARGET = 0.75
WARM_UP = 20
#: Tenant → the mem0 user holding its cards.
USERS = {MAIN: MAIN, NOISE: NOISE}


def load_corpus(settings: Settings, cards: int, embedder: Embedder) -> None:
    """bench_retrieval's corpus at one size, for both tenants, its vector index (the configured
    kind) built after."""
    prepare(settings)
    bases = embed_bases(embedder)
    now = datetime.now(UTC)
    generators = {MAIN: Generator(MAIN, 1, now, bases), NOISE: Generator(NOISE, 2, now, bases)}
    print(f"\nloading to {cards:,} cards …", flush=True)
    with admin_database(settings).connect(autocommit=True) as admin:
        grow(admin, settings.read_schema, generators, {MAIN: cards, NOISE: cards // NOISE_DIVISOR},
             embedder.model, bases, np.random.default_rng(3), vector_index_kind(settings))


def load_peer(memory: Any, settings: Settings, peer: Database) -> None:
    """Palimpsest's cards into mem0's store, then one search that must find a card by its text."""
    print("\nloading mem0 …", flush=True)
    started = time.perf_counter()
    with admin_database(settings).connect(autocommit=True) as conn:
        count = mem0_store.load(memory, conn, settings.read_schema, USERS)
        mem0_store.settle(peer)
        print(f"loaded mem0: {count:,} memories through its vector store (its HNSW index kept up "
              f"as they went in) in {time.perf_counter() - started:.1f} s", flush=True)
        first = mem0_store.probe(memory, conn, settings.read_schema, MAIN, USERS[MAIN])
    print(f"mem0 check: a card's own text finds it (first answer {first!r})", flush=True)


@dataclass
class Timings:
    palimpsest: Figures
    mem0: list[float] = field(default_factory=list)
    #: How many memories each mem0 search returned.
    mem0_found: list[int] = field(default_factory=list)
    #: The question's embedding alone, as each search above pays it.
    embedding: list[float] = field(default_factory=list)


def ask(memory: Any, text: str) -> tuple[float, int]:
    """One mem0 search as a caller makes it: wall milliseconds, memories returned."""
    started = time.perf_counter()
    found = memory.search(text, top_k=LIMIT, filters={"user_id": USERS[MAIN]})["results"]
    return (time.perf_counter() - started) * 1000, len(found)


def embed(embedder: Embedder, text: str) -> float:
    started = time.perf_counter()
    embedder.embed([text])
    return (time.perf_counter() - started) * 1000


def measure(queries: Queries, memory: Any, wanted: Sequence[BenchQuery], cards: int) -> Timings:
    """Each question of both, as paid, and its embedding alone beside them."""
    embedder = semantic_route(queries).embedder
    for query in wanted[:WARM_UP]:  # pools, plans, buffers, the model
        fused(queries, query, None, embed=True)
        ask(memory, query.text)
    timings = Timings(Figures(cards))
    started = time.perf_counter()
    for i, query in enumerate(wanted):
        if i % 2:
            fused(queries, query, timings.palimpsest, embed=True)
        ms, found = ask(memory, query.text)
        timings.mem0.append(ms)
        timings.mem0_found.append(found)
        if not i % 2:
            fused(queries, query, timings.palimpsest, embed=True)
        timings.embedding.append(embed(embedder, query.text))
    print(f"  {len(wanted)} Palimpsest + {len(wanted)} mem0 searches + {len(wanted)} embeddings in "
          f"{time.perf_counter() - started:.1f} s", flush=True)
    return timings


def percentiles(samples: Sequence[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(samples), 2), "p95_ms": round(nearest_rank(samples), 2)}


def summary(cards: int, palimpsest: Sequence[float], mem0: Sequence[float]) -> dict[str, Any]:
    """The figures ``--json`` prints: each side's p50 / p95, and Palimpsest's p95 over mem0's."""
    return {"cards": cards, "palimpsest": percentiles(palimpsest), "mem0": percentiles(mem0),
            "ratio_p95": round(nearest_rank(palimpsest) / nearest_rank(mem0), 3), "target": TARGET}


def report(figures: dict[str, Any], timings: Timings, plan: str) -> None:
    ours, theirs, ratio = figures["palimpsest"], figures["mem0"], figures["ratio_p95"]
    print(f"\n== {figures['cards']:,} cards (tenant {MAIN}; {figures['cards'] // NOISE_DIVISOR:,} more in "
          f"{NOISE}), {len(timings.mem0)} questions, as paid (the question's embedding included) ==")
    print(f"Palimpsest  p50 {ours['p50_ms']:7.1f} ms   p95 {ours['p95_ms']:7.1f} ms   "
          f"(Queries.search, top_n {LIMIT}, every route)")
    print(f"mem0        p50 {theirs['p50_ms']:7.1f} ms   p95 {theirs['p95_ms']:7.1f} ms   "
          f"(Memory.search, top_k {LIMIT}; memories returned: mean "
          f"{statistics.mean(timings.mem0_found):.1f}, min {min(timings.mem0_found)})")
    embedding = percentiles(timings.embedding)
    print(f"embedding alone p50 {embedding['p50_ms']:7.1f} ms   p95 {embedding['p95_ms']:7.1f} ms   "
          "(the question's, inside each figure above)")
    print(f"mem0's vector query plan: {plan}")
    verdict = "met" if ratio <= TARGET else "MISSED"
    print(f"ratio Palimpsest p95 / mem0 p95: {ratio:.2f}  (target ≤ {TARGET}: {verdict}; "
          f"{os.cpu_count()} CPUs, shared with other work)")


def run(settings: Settings, folder: Path, cards: int, count: int) -> dict[str, Any]:
    embedder = create_embedder(settings)
    load_corpus(settings, cards, embedder)
    peer = mem0_store.create_database(admin_database(settings))
    queries = create_queries(settings.model_copy(update={"auto_bootstrap": False}))
    try:
        asked = semantic_route(queries).embedder  # the embedder Palimpsest's questions go through
        with mem0_store.open_memory(peer, asked, folder / "mem0") as memory:
            load_peer(memory, settings, peer)
            wanted = bench_queries(count)
            print(f"\nmeasuring {len(wanted)} questions at {cards:,} cards …", flush=True)
            timings = measure(queries, memory, wanted, cards)
            vector = mem0_store.Mem0Embedder(asked).embed(wanted[0].text)
            plan = mem0_store.vector_plan(peer, vector, USERS[MAIN], max(4 * LIMIT, 60))
    finally:
        queries.close()
    figures = summary(cards, timings.palimpsest.paid, timings.mem0)
    report(figures, timings, plan)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--cards", type=int, default=10_000, help="cards of the main tenant")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--data-dir", type=Path, help="default: a temporary folder, removed at the end")
    parser.add_argument("--keep", action="store_true", help="keep the temporary data folder")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    args = parser.parse_args()
    folder = args.data_dir or Path(tempfile.mkdtemp(prefix="palimpsest-bench-mem0-"))
    retrieval = Settings().retrieval.model_copy(update={"breaker_p95_ms": 1e9, "top_n": LIMIT})
    settings = Settings(data_dir=folder / "data", retrieval=retrieval)
    if not vector_search_available(settings):
        raise SystemExit("this server cannot compute vector distances: run python -m infra.pgvector_build")
    print(f"data folder {folder}; breakers lifted", flush=True)
    try:
        figures = run(settings, folder, args.cards, args.queries)
        if args.json:
            print(json.dumps(figures))
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    finally:
        stop_server(settings)
        if args.data_dir is None and not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
