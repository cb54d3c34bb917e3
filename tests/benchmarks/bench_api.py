"""`palimpsest serve` under load, each figure beside its baseline in the same run (`make bench-api`).

    .venv/bin/python -m tests.benchmarks.bench_api [--writes 2000] [--clients 8] [--workers N]
        [--cards 10000] [--queries 200] [--lag-rate 100] [--lag-seconds 10] [--data-dir PATH]
        [--keep] [--json]

Starts ``palimpsest serve`` as a process on the embedded default, in a throwaway data folder (its
PostgreSQL, its broker, relay, Faust projector and HTTP server: the product as a user starts it,
with ``--workers`` HTTP processes, default serve's own: one per core, at most 4), reads the URL and
the local key from its banner, then:

- remember: ``--clients`` threads, each with its own ``palimpsest_client.Client``, write
  ``--writes`` state cards in all (each a slot of its own: no races), p50 / p95 per call and
  writes/s over the whole; beside the same number of bare ``INSERT``s of the same JSON body, one
  transaction each, by as many threads on connections of their own to the same server;
- search: ``--cards`` cards (and a noise tenant a quarter its size) loaded straight into the read
  models as ``bench_retrieval`` loads them, then ``--queries`` questions over REST, one caller,
  beside the same questions through ``Queries.search`` in this process on the same database,
  interleaved; both warmed first (question embeddings cached on both sides: the difference is
  the HTTP edge, not the model);
- MCP: the same questions as the ``search`` tool in one session of the SDK's client over
  streamable HTTP, interleaved with REST calls;
- write-to-searchable: writes at ``--lag-rate`` writes/s for ``--lag-seconds`` (paced over the
  clients), each from its answer until the tenant's projection position holds it (visible: relay
  → Kafka → Faust → read models) and until its card's embedding is stored too (searchable by
  every route), both polled every 5 ms on the database;
- peak memory: the resident set of the server process and of its children (the projector),
  sampled every 250 ms over the whole run.

The route breakers are lifted in both the server and this process (``breaker_p95_ms`` 1e9), so
every search runs every route on both sides. Targets: ≥ 250 writes/s at 8 clients, write-to-
searchable p95 ≤ 1 s at 100 writes/s; REST search p95 ≤ 5 ms above the in-process one. With
``--json`` the last line is one JSON object: ``writes_per_s``, ``bare_insert_per_s``,
``write_to_searchable_p95_ms``, ``workers`` and the other figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import psycopg
from palimpsest_client import Client
from psycopg import sql
from psycopg.types.json import Jsonb

from infra.embedders import create_embedder
from infra.postgres import admin_database, vector_index_kind
from infra.settings import Settings
from services.query.retrieval.breaker import nearest_rank
from tests.benchmarks.bench_retrieval import (
    NOISE_DIVISOR,
    BenchQuery,
    Generator,
    bench_queries,
    embed_bases,
    grow,
)
from tests.benchmarks.folders import bench_folder

TENANT = "local"  # the tenant of the key `serve` makes on the embedded default
NOISE = "bench-noise"
LIFTED = {"PALIMPSEST_RETRIEVAL__BREAKER_P95_MS": "1e9"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def p50_p95(samples: list[float]) -> tuple[float, float]:
    return statistics.median(samples), nearest_rank(samples)


# --- the server ------------------------------------------------------------------------------------


@dataclass
class Server:
    process: subprocess.Popen[str]
    url: str
    key: str
    mcp: str
    lines: list[str] = field(default_factory=list)


def start_server(folder: Path, log: Path, extra: dict[str, str] | None = None,
                 cwd: Path | None = None, args: tuple[str, ...] = ()) -> Server:
    """``palimpsest serve`` in ``folder`` (``extra``: more environment, e.g. another server's
    database; ``cwd``: where it runs, ``folder`` by default); returns once it printed its banner
    (its key is empty when it made none: on an external database)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PALIMPSEST_DATABASE_URL", "PALIMPSEST_KAFKA_BOOTSTRAP")}
    env.update({"PALIMPSEST_DATA_DIR": str(folder / "data"), "PALIMPSEST_API_PORT": str(free_port()),
                **LIFTED, **(extra or {})})
    process = subprocess.Popen([sys.executable, "-m", "services.entrypoints.cli", "serve", *args], env=env,
                               cwd=cwd or folder, stdout=subprocess.PIPE, stderr=log.open("w"), text=True)
    assert process.stdout is not None
    lines: queue.Queue[str] = queue.Queue()

    def drain() -> None:
        for line in process.stdout or ():
            lines.put(line)

    threading.Thread(target=drain, daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + 180
    try:
        while not any(line.startswith("Ctrl-C") for line in seen):
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"serve did not start:\n{''.join(seen)}\n{log.read_text()[-3000:]}")
            try:
                seen.append(lines.get(timeout=0.5))
            except queue.Empty:
                continue
        text = "".join(seen)
        found = {name: re.search(pattern, text) for name, pattern in
                 (("url", r"REST\s+(\S+)/v1"), ("mcp", r"MCP\s+(\S+)"), ("key", r"key\s+(pk_\S+)"))}
        if not (found["url"] and found["mcp"]):
            raise SystemExit(f"could not read the banner:\n{text}")
    except BaseException:  # not started, or interrupted while starting: leave nothing running
        stop_server(Server(process, "", "", "", seen))
        raise
    key = found["key"][1] if found["key"] else ""
    return Server(process, found["url"][1], key, found["mcp"][1], seen)  # type: ignore[index]


def stop_server(server: Server) -> float:
    """SIGINT, as Ctrl-C; the seconds it took to exit."""
    started = time.perf_counter()
    server.process.send_signal(2)
    try:
        server.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()
    return time.perf_counter() - started


class Memory:
    """Peak resident set of a process and of its children, sampled on a thread."""

    def __init__(self, pid: int, every: float = 0.25) -> None:
        self.process = psutil.Process(pid)
        self.every = every
        self.peak_server = 0
        self.peak_children = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.peak_server = max(self.peak_server, self.process.memory_info().rss)
                children = 0
                for child in self.process.children(recursive=True):
                    try:
                        children += child.memory_info().rss
                    except psutil.Error:
                        continue
                self.peak_children = max(self.peak_children, children)
            except psutil.Error:
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)


# --- writes ------------------------------------------------------------------------------------


def card(client: int, i: int) -> dict[str, Any]:
    """One remember's body: a state card in a slot of its own."""
    return {"kind": "state", "memory_type": "fact", "subject": f"bench-{client}",
            "label": f"item_{i}", "content": f"value {i} of writer {client}",
            "tags": ["bench", f"writer-{client}"]}


def in_threads(count: int, work: Callable[[int], list[float]]) -> tuple[list[float], float]:
    """``work(index)`` on ``count`` threads started together; (every latency, wall seconds)."""
    results: list[list[float]] = [[] for _ in range(count)]
    barrier = threading.Barrier(count + 1)

    def run(index: int) -> None:
        barrier.wait()
        results[index] = work(index)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    return [ms for part in results for ms in part], time.perf_counter() - started


def remember_over_rest(server: Server, clients: int, per_client: int,
                       offset: int) -> tuple[list[float], float]:
    def work(index: int) -> list[float]:
        samples = []
        with Client(server.url, server.key) as api:
            for i in range(offset, offset + per_client):
                started = time.perf_counter()
                api.remember(**card(index, i))
                samples.append((time.perf_counter() - started) * 1000)
        return samples

    return in_threads(clients, work)


def bare_inserts(settings: Settings, clients: int, per_client: int) -> tuple[list[float], float]:
    admin = admin_database(settings)
    with admin.connect(autocommit=True) as conn:
        conn.execute("CREATE SCHEMA IF NOT EXISTS bench_api")
        conn.execute("CREATE TABLE IF NOT EXISTS bench_api.bare (id bigserial PRIMARY KEY, "
                     "tenant_id text NOT NULL, body jsonb NOT NULL)")

    def work(index: int) -> list[float]:
        samples = []
        with admin.connect(autocommit=True) as conn:
            for i in range(per_client):
                started = time.perf_counter()
                conn.execute("INSERT INTO bench_api.bare (tenant_id, body) VALUES (%s, %s)",
                             (TENANT, Jsonb(card(index, i))))
                samples.append((time.perf_counter() - started) * 1000)
        return samples

    return in_threads(clients, work)


def projected(conn: psycopg.Connection[Any], schema: str, tenant: str) -> int:
    row = conn.execute(f"SELECT max(position) FROM {schema}.projection_position WHERE tenant_id = %s",
                       (tenant,)).fetchone()
    return int(row[0] or 0) if row else 0


def settle(settings: Settings, position: int, timeout: float = 600.0) -> float:
    """Wait until the tenant's read models hold ``position`` and every card has its vector (when
    the projector embeds: ``PALIMPSEST_PROJECTOR_EMBEDDINGS``, read by the server and here alike)."""
    started = time.perf_counter()
    schema = settings.read_schema
    with admin_database(settings).connect(autocommit=True) as conn:
        while True:
            row = conn.execute(f"SELECT count(*) FROM {schema}.cards c LEFT JOIN {schema}.card_embeddings "
                               "e USING (tenant_id, card_id) WHERE e.card_id IS NULL").fetchone()
            embedded = not settings.projector_embeddings or (row is not None and row[0] == 0)
            if projected(conn, schema, TENANT) >= position and embedded:
                return time.perf_counter() - started
            if time.perf_counter() - started > timeout:
                raise SystemExit(f"the read models did not settle within {timeout:.0f} s")
            time.sleep(0.2)


@dataclass
class Lags:
    """Seconds from each write's answer until it was visible (projected) and searchable (its
    embedding stored too); the rate achieved; writes never seen so."""

    visible: list[float]
    searchable: list[float]
    rate: float
    missing: int


def write_to_searchable(server: Server, settings: Settings, clients: int, rate: float,
                        seconds: float) -> Lags:
    commits: list[tuple[int, str, float]] = []
    lock = threading.Lock()
    done = threading.Event()
    visible: list[float] = []
    searchable: list[float] = []
    missing = [0]
    embeddings = sql.SQL("SELECT card_id::text FROM {}.card_embeddings WHERE tenant_id = %s AND "
                         "card_id = ANY(%s::uuid[])").format(sql.Identifier(settings.read_schema))

    def watch() -> None:
        unseen: list[tuple[int, str, float]] = []  # not projected yet
        unembedded: list[tuple[str, float]] = []  # projected, no vector yet
        taken = 0
        with admin_database(settings).connect(autocommit=True) as conn:
            deadline: float | None = None
            while True:
                with lock:
                    unseen.extend(commits[taken:])
                    taken = len(commits)
                seen, now = projected(conn, settings.read_schema, TENANT), time.perf_counter()
                visible.extend(now - t for p, _, t in unseen if p <= seen)
                unembedded.extend((card, t) for p, card, t in unseen if p <= seen)
                unseen = [(p, card, t) for p, card, t in unseen if p > seen]
                if unembedded:
                    rows = conn.execute(embeddings, (TENANT, [c for c, _ in unembedded])).fetchall()
                    stored, now = {row[0] for row in rows}, time.perf_counter()
                    searchable.extend(now - t for card, t in unembedded if card in stored)
                    unembedded = [(card, t) for card, t in unembedded if card not in stored]
                if done.is_set():
                    deadline = deadline or time.monotonic() + 60
                    if not (unseen or unembedded) or time.monotonic() > deadline:
                        missing[0] = len(unseen) + len(unembedded)
                        return
                time.sleep(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()

    def work(index: int) -> list[float]:
        interval = clients / rate
        next_at = time.perf_counter() + index * interval / clients
        end = next_at + seconds
        with Client(server.url, server.key) as api:
            i = 0
            while next_at < end:
                result = api.remember(**card(100 + index, i))
                with lock:
                    commits.append((int(result["position"]), str(result["card_id"]),
                                    time.perf_counter()))
                i += 1
                next_at += interval
                time.sleep(max(0.0, next_at - time.perf_counter()))
        return []

    _, wall = in_threads(clients, work)
    done.set()
    watcher.join()
    return Lags(visible, searchable, len(commits) / wall, missing[0])


# --- reads -------------------------------------------------------------------------------------


def load_cards(settings: Settings, cards: int) -> None:
    embedder = create_embedder(settings)
    bases = embed_bases(embedder)
    now = datetime.now(UTC)
    generators = {TENANT: Generator(TENANT, 1, now, bases), NOISE: Generator(NOISE, 2, now, bases)}
    with admin_database(settings).connect(autocommit=True) as admin:
        grow(admin, settings.read_schema, generators, {TENANT: cards, NOISE: cards // NOISE_DIVISOR},
             embedder.model, bases, np.random.default_rng(3), vector_index_kind(settings))


def rest_search(api: Client, query: BenchQuery) -> float:
    started = time.perf_counter()
    api.search(query.text, project_id=query.project_id)
    return (time.perf_counter() - started) * 1000


def searches(server: Server, settings: Settings, wanted: list[BenchQuery]) -> dict[str, list[float]]:
    from services.factory import create_queries

    queries = create_queries(settings.model_copy(update={"auto_bootstrap": False}))
    times: dict[str, list[float]] = {"rest": [], "in process": []}
    try:
        with Client(server.url, server.key) as api:
            for query in wanted:  # warm-up: both sides embed each question once and cache it
                api.search(query.text, project_id=query.project_id)
                queries.search(TENANT, queries.query(query.text, project_id=query.project_id))
            for query in wanted:
                times["rest"].append(rest_search(api, query))
                started = time.perf_counter()
                queries.search(TENANT, queries.query(query.text, project_id=query.project_id))
                times["in process"].append((time.perf_counter() - started) * 1000)
    finally:
        queries.close()
    return times


def mcp_searches(server: Server, wanted: list[BenchQuery]) -> dict[str, list[float]]:
    import anyio
    import httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    times: dict[str, list[float]] = {"mcp": [], "rest": []}

    async def main() -> None:
        headers = {"Authorization": f"Bearer {server.key}"}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http, \
                streamable_http_client(server.mcp, http_client=http) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            with Client(server.url, server.key) as api:
                for query in wanted:
                    arguments = {"query": query.text, **({"project_id": query.project_id}
                                                         if query.project_id else {})}
                    started = time.perf_counter()
                    result = await session.call_tool("search", arguments)
                    times["mcp"].append((time.perf_counter() - started) * 1000)
                    if result.is_error:
                        raise SystemExit(f"MCP search failed: {result.structured_content}")
                    times["rest"].append(rest_search(api, query))

    anyio.run(main)
    return times


# --- the report --------------------------------------------------------------------------------


@dataclass
class Figures:
    rows: list[tuple[str, str, str, str, str]] = field(default_factory=list)

    def add(self, name: str, figure: str, baseline: str, ratio: str, target: str = "") -> None:
        self.rows.append((name, figure, baseline, ratio, target))
        say(f"  {name}: {figure}  |  {baseline}  |  {ratio}  {target}")

    def table(self) -> None:
        head = ("measure", "palimpsest serve", "baseline, same run", "ratio", "target")
        widths = [max(len(row[i]) for row in [head, *self.rows]) for i in range(5)]
        say("")
        for row in [head, tuple("-" * w for w in widths), *self.rows]:
            say("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


@contextmanager
def serving(folder: Path, workers: int | None = None) -> Iterator[tuple[Server, Memory]]:
    args = ("--workers", str(workers)) if workers else ()
    server = start_server(folder, folder / "serve.log", args=args)
    memory = Memory(server.process.pid)
    try:
        yield server, memory
    finally:
        memory.stop()
        took = stop_server(server)
        say(f"serve stopped by SIGINT in {took:.1f} s (exit code {server.process.returncode})")


def say(text: str) -> None:
    """Progress and figures: on stdout, or on stderr with ``--json`` (stdout is redirected)."""
    print(text, flush=True)


def run(folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    figures = Figures()
    retrieval = Settings().retrieval.model_copy(update={"breaker_p95_ms": 1e9})  # and PALIMPSEST_RETRIEVAL__*
    settings = Settings(data_dir=folder / "data", auto_bootstrap=False, retrieval=retrieval)
    workers = args.workers or settings.api_workers
    per_client = max(1, args.writes // args.clients)
    found: dict[str, Any] = {"workers": workers, "clients": args.clients}
    with serving(folder, args.workers) as (server, memory):
        say(f"serve at {server.url} (pid {server.process.pid}, {workers} HTTP process(es)); "
            f"{os.cpu_count()} CPUs")
        remember_over_rest(server, args.clients, 25, offset=10_000_000)  # warm-up, not counted
        bare, bare_wall = bare_inserts(settings, args.clients, per_client)
        rest, rest_wall = remember_over_rest(server, args.clients, per_client, offset=0)
        (b50, b95), (r50, r95) = p50_p95(bare), p50_p95(rest)
        figures.add(f"remember p50 / p95, {args.clients} clients",
                    f"{r50:.1f} / {r95:.1f} ms", f"bare INSERT {b50:.2f} / {b95:.2f} ms",
                    f"{r95 / b95:.1f}× (p95)")
        rate, bare_rate = len(rest) / rest_wall, len(bare) / bare_wall
        figures.add(f"remember throughput, {args.clients} clients, {workers} HTTP process(es)",
                    f"{rate:,.0f} writes/s", f"bare INSERT {bare_rate:,.0f} /s",
                    f"{rate / bare_rate:.2f}×", f"≥ 250 writes/s: {verdict(rate >= 250)}")
        found.update(writes_per_s=round(rate, 1), bare_insert_per_s=round(bare_rate, 1),
                     remember_p50_ms=round(r50, 2), remember_p95_ms=round(r95, 2))
        with Client(server.url, server.key) as api:
            head = int(api.remember(**card(99, 0))["position"])
        drained = settle(settings, head)
        say(f"  projector and embeddings caught up {drained:.1f} s after the last write")
        found["backlog_drained_s"] = round(drained, 1)

        lags = write_to_searchable(server, settings, args.clients, args.lag_rate, args.lag_seconds)
        for name, samples in (("visible", lags.visible), ("searchable", lags.searchable)):
            if samples:
                l50, l95 = p50_p95([lag * 1000 for lag in samples])
                figures.add(f"write-to-{name} p50 / p95 at {lags.rate:,.0f} writes/s",
                            f"{l50:.0f} / {l95:.0f} ms", f"{len(samples)} writes, {lags.missing} "
                            "never seen", "", "p95 ≤ 1 s: " + verdict(l95 <= 1000)
                            if name == "searchable" else "")
                found[f"write_to_{name}_p95_ms"] = round(l95, 1)
        found["write_to_searchable_rate"] = round(lags.rate, 1)

        if args.cards:
            say(f"loading {args.cards:,} cards into the read models …")
            load_cards(settings, args.cards)
            wanted = bench_queries(args.queries)
            times = searches(server, settings, wanted)
            (s50, s95), (i50, i95) = p50_p95(times["rest"]), p50_p95(times["in process"])
            figures.add(f"search p50 / p95, {args.cards // 1000}k cards",
                        f"REST {s50:.1f} / {s95:.1f} ms", f"in process {i50:.1f} / {i95:.1f} ms",
                        f"+{s95 - i95:.1f} ms (p95)", f"≤ +5 ms: {verdict(s95 - i95 <= 5)}")
            mcp = mcp_searches(server, wanted)
            (m50, m95), (q50, q95) = p50_p95(mcp["mcp"]), p50_p95(mcp["rest"])
            figures.add("search over MCP p50 / p95", f"MCP {m50:.1f} / {m95:.1f} ms",
                        f"REST {q50:.1f} / {q95:.1f} ms", f"{m95 / q95:.2f}× (p95)")
            found.update(search_p95_ms=round(s95, 1), search_in_process_p95_ms=round(i95, 1))
        figures.add("peak resident memory", f"serve {memory.peak_server / 2**20:,.0f} MB",
                    f"its children {memory.peak_children / 2**20:,.0f} MB",
                    f"total {(memory.peak_server + memory.peak_children) / 2**20:,.0f} MB")
        found["peak_memory_mb"] = round((memory.peak_server + memory.peak_children) / 2**20)
    figures.table()
    (folder / "figures.json").write_text(json.dumps({"rows": figures.rows}, ensure_ascii=False))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--writes", type=int, default=2_000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--workers", type=int, help="serve's HTTP processes (default: serve's own)")
    parser.add_argument("--cards", type=int, default=10_000, help="0: no search figures")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--lag-rate", type=float, default=100.0)
    parser.add_argument("--lag-seconds", type=float, default=10.0)
    parser.add_argument("--data-dir", type=Path, help="default: a temporary folder, removed at the end")
    parser.add_argument("--keep", action="store_true", help="keep the temporary data folder")
    parser.add_argument("--json", action="store_true",
                        help="progress to stderr; one JSON object of the figures on stdout, last")
    args = parser.parse_args()
    with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext(), \
            bench_folder(args.data_dir, args.keep, "palimpsest-bench-api-") as folder:
        found = run(folder, args)
    if args.json:
        print(json.dumps(found))


if __name__ == "__main__":
    main()
