"""`palimpsest serve` under load, each figure beside its baseline in the same run (`make bench-api`).

    .venv/bin/python -m tests.benchmarks.bench_api [--writes 2000] [--clients 4] [--cards 10000]
        [--queries 200] [--lag-rate 200] [--lag-seconds 10] [--data-dir PATH] [--keep]

Starts ``palimpsest serve`` as a process on the embedded default, in a throwaway data folder (its
PostgreSQL, its broker, relay, Faust projector and HTTP server: the product as a user starts it),
reads the URL and the local key from its banner, then:

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
- write-to-visible: writes at ``--lag-rate`` writes/s for ``--lag-seconds`` (paced over the
  clients), each from its answer until the tenant's projection position holds it (polled every
  5 ms on the database: relay → Kafka → Faust → read models);
- peak memory: the resident set of the server process and of its children (the projector),
  sampled every 250 ms over the whole run.

The route breakers are lifted in both the server and this process (``breaker_p95_ms`` 1e9), so
every search runs every route on both sides. Targets (issue 14): remember p95 ≤ 20 ms and ≥ 500
writes/s with 4 clients; REST search p95 ≤ 5 ms above the in-process one.
"""

from __future__ import annotations

import argparse
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
from psycopg.types.json import Jsonb

from infra.embedders import create_embedder
from infra.postgres import admin_database
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
                 cwd: Path | None = None) -> Server:
    """``palimpsest serve`` in ``folder`` (``extra``: more environment; ``cwd``: where it runs,
    ``folder`` by default); returns once it printed its banner."""
    env = {**os.environ, "PALIMPSEST_DATA_DIR": str(folder / "data"),
           "PALIMPSEST_API_PORT": str(free_port()), **LIFTED, **(extra or {})}
    env.pop("PALIMPSEST_DATABASE_URL", None)
    env.pop("PALIMPSEST_KAFKA_BOOTSTRAP", None)
    process = subprocess.Popen([sys.executable, "-m", "services.entrypoints.cli", "serve"], env=env,
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
        if not all(found.values()):
            raise SystemExit(f"could not read the banner:\n{text}")
    except BaseException:  # not started, or interrupted while starting: leave nothing running
        stop_server(Server(process, "", "", "", seen))
        raise
    return Server(process, found["url"][1], found["key"][1], found["mcp"][1], seen)  # type: ignore[index]


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


def write_to_visible(server: Server, settings: Settings, clients: int, rate: float,
                     seconds: float) -> tuple[list[float], float, int]:
    """(seconds from each answer until visible, writes/s achieved, writes never seen)."""
    commits: list[tuple[int, float]] = []
    lock = threading.Lock()
    done = threading.Event()
    lags: list[float] = []
    missing = [0]

    def watch() -> None:
        pending: list[tuple[int, float]] = []
        with admin_database(settings).connect(autocommit=True) as conn:
            deadline: float | None = None
            while True:
                with lock:
                    pending.extend(commits[len(lags) + len(pending):])
                seen, now = projected(conn, settings.read_schema, TENANT), time.perf_counter()
                still = [(p, t) for p, t in pending if p > seen]
                lags.extend(now - t for p, t in pending if p <= seen)
                pending = still
                if done.is_set():
                    deadline = deadline or time.monotonic() + 60
                    if not pending or time.monotonic() > deadline:
                        missing[0] = len(pending)
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
                    commits.append((int(result["position"]), time.perf_counter()))
                i += 1
                next_at += interval
                time.sleep(max(0.0, next_at - time.perf_counter()))
        return []

    _, wall = in_threads(clients, work)
    done.set()
    watcher.join()
    return lags, len(commits) / wall, missing[0]


# --- reads -------------------------------------------------------------------------------------


def load_cards(settings: Settings, cards: int) -> None:
    embedder = create_embedder(settings)
    bases = embed_bases(embedder)
    now = datetime.now(UTC)
    generators = {TENANT: Generator(TENANT, 1, now, bases), NOISE: Generator(NOISE, 2, now, bases)}
    with admin_database(settings).connect(autocommit=True) as admin:
        grow(admin, settings.read_schema, generators, {TENANT: cards, NOISE: cards // NOISE_DIVISOR},
             embedder.model, bases, np.random.default_rng(3))


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
        print(f"  {name}: {figure}  |  {baseline}  |  {ratio}  {target}", flush=True)

    def table(self) -> None:
        head = ("measure", "palimpsest serve", "baseline, same run", "ratio", "target")
        widths = [max(len(row[i]) for row in [head, *self.rows]) for i in range(5)]
        print()
        for row in [head, tuple("-" * w for w in widths), *self.rows]:
            print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


@contextmanager
def serving(folder: Path) -> Iterator[tuple[Server, Memory]]:
    server = start_server(folder, folder / "serve.log")
    memory = Memory(server.process.pid)
    try:
        yield server, memory
    finally:
        memory.stop()
        took = stop_server(server)
        print(f"serve stopped by SIGINT in {took:.1f} s (exit code {server.process.returncode})")


def run(folder: Path, args: argparse.Namespace) -> None:
    figures = Figures()
    retrieval = Settings().retrieval.model_copy(update={"breaker_p95_ms": 1e9})  # and PALIMPSEST_RETRIEVAL__*
    settings = Settings(data_dir=folder / "data", auto_bootstrap=False, retrieval=retrieval)
    per_client = max(1, args.writes // args.clients)
    with serving(folder) as (server, memory):
        print(f"serve at {server.url} (pid {server.process.pid}); {os.cpu_count()} CPUs", flush=True)
        remember_over_rest(server, args.clients, 25, offset=10_000_000)  # warm-up, not counted
        bare, bare_wall = bare_inserts(settings, args.clients, per_client)
        rest, rest_wall = remember_over_rest(server, args.clients, per_client, offset=0)
        (b50, b95), (r50, r95) = p50_p95(bare), p50_p95(rest)
        figures.add(f"remember p50 / p95, {args.clients} clients",
                    f"{r50:.1f} / {r95:.1f} ms", f"bare INSERT {b50:.2f} / {b95:.2f} ms",
                    f"{r95 / b95:.1f}× (p95)", f"p95 ≤ 20 ms: {verdict(r95 <= 20)}")
        rate, bare_rate = len(rest) / rest_wall, len(bare) / bare_wall
        figures.add(f"remember throughput, {args.clients} clients", f"{rate:,.0f} writes/s",
                    f"bare INSERT {bare_rate:,.0f} /s", f"{rate / bare_rate:.2f}×",
                    f"≥ 500 writes/s: {verdict(rate >= 500)}")
        with Client(server.url, server.key) as api:
            head = int(api.remember(**card(99, 0))["position"])
        print(f"  projector and embeddings caught up in {settle(settings, head):.1f} s", flush=True)

        print(f"loading {args.cards:,} cards into the read models …", flush=True)
        load_cards(settings, args.cards)
        wanted = bench_queries(args.queries)
        times = searches(server, settings, wanted)
        (s50, s95), (i50, i95) = p50_p95(times["rest"]), p50_p95(times["in process"])
        figures.add(f"search p50 / p95, {args.cards // 1000}k cards", f"REST {s50:.1f} / {s95:.1f} ms",
                    f"in process {i50:.1f} / {i95:.1f} ms", f"+{s95 - i95:.1f} ms (p95)",
                    f"≤ +5 ms: {verdict(s95 - i95 <= 5)}")
        mcp = mcp_searches(server, wanted)
        (m50, m95), (q50, q95) = p50_p95(mcp["mcp"]), p50_p95(mcp["rest"])
        figures.add("search over MCP p50 / p95", f"MCP {m50:.1f} / {m95:.1f} ms",
                    f"REST {q50:.1f} / {q95:.1f} ms", f"{m95 / q95:.2f}× (p95)")

        lags, achieved, missing = write_to_visible(server, settings, args.clients, args.lag_rate,
                                                   args.lag_seconds)
        if lags:
            l50, l95 = p50_p95([lag * 1000 for lag in lags])
            figures.add(f"write-to-visible p50 / p95 at {achieved:,.0f} writes/s",
                        f"{l50:.0f} / {l95:.0f} ms", f"{len(lags)} writes, {missing} never seen",
                        "", "")
        figures.add("peak resident memory", f"serve {memory.peak_server / 2**20:,.0f} MB",
                    f"its children (projector) {memory.peak_children / 2**20:,.0f} MB",
                    f"total {(memory.peak_server + memory.peak_children) / 2**20:,.0f} MB")
    figures.table()
    (folder / "figures.json").write_text(json.dumps({"rows": figures.rows}, ensure_ascii=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--writes", type=int, default=2_000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--cards", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--lag-rate", type=float, default=200.0)
    parser.add_argument("--lag-seconds", type=float, default=10.0)
    parser.add_argument("--data-dir", type=Path, help="default: a temporary folder, removed at the end")
    parser.add_argument("--keep", action="store_true", help="keep the temporary data folder")
    args = parser.parse_args()
    with bench_folder(args.data_dir, args.keep, "palimpsest-bench-api-") as folder:
        run(folder, args)


if __name__ == "__main__":
    main()
