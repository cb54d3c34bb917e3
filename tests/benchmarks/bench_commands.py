"""The command path in one process on the embedded PostgreSQL: where concurrent writers wait.

    .venv/bin/python -m tests.benchmarks.bench_commands [--writes 1000] [--clients 1,4,8]

For each number of client threads, ``--writes`` ``remember`` calls in all (each a slot of its own:
no races) through one application (as one API process serves them): p50 / p95 per call,
writes/s and this process's CPU time per write (the GIL's share: one process cannot go past
1000 / that many writes per second), with group commit off (every command its own transaction)
and on (the commands of concurrent callers saved in one transaction, ``group_commit``); beside
as many bare ``INSERT``s of a row as large, one transaction each, by as many threads on
connections of their own.

The event store takes ``LOCK TABLE … IN EXCLUSIVE MODE`` for each transaction (its notification
ids have no gaps), held through the commit's flush to disk, so writers in one transaction each
take turns on the disk; in one transaction together they share a flush.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from uuid import uuid4

import psycopg

from infra.postgres import admin_database, bootstrap, stop_embedded
from infra.settings import Settings
from services.factory import create_app
from tests.benchmarks.folders import bench_folder
from tests.support import state

BODY = "x" * 400  # about the size of one stored remember event


def run_threads(clients: int, writes: int, call: Callable[[int, int], None]) -> list[float]:
    latencies: list[list[float]] = [[] for _ in range(clients)]
    start = threading.Barrier(clients)

    def work(client: int) -> None:
        start.wait()
        for i in range(client, writes, clients):
            began = time.perf_counter()
            call(client, i)
            latencies[client].append(time.perf_counter() - began)

    threads = [threading.Thread(target=work, args=(c,)) for c in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [t for per in latencies for t in per]


def report(name: str, clients: int, latencies: list[float], elapsed: float, cpu: float) -> float:
    ms = sorted(t * 1000 for t in latencies)
    rate = len(ms) / elapsed
    print(f"{name:<22} {clients:>7} {len(ms):>6} {statistics.median(ms):>7.1f} "
          f"{ms[int(0.95 * (len(ms) - 1))]:>7.1f} {rate:>9.0f} {cpu * 1000 / len(ms):>8.2f}", flush=True)
    return rate


def commands(settings: Settings, clients: int, writes: int, group: bool) -> float:
    app = create_app(settings.model_copy(update={"group_commit": group}))
    tenant = f"bench-{uuid4().hex[:8]}"
    try:
        app.remember(tenant, state("warm", "up"))
        began, cpu = time.perf_counter(), time.process_time()
        latencies = run_threads(clients, writes, lambda c, i: app.remember(
            tenant, state(f"label-{i}", f"value {i} {BODY[:40]}")))
        elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
    finally:
        app.close()
    return report("remember, group " + ("on" if group else "off"), clients, latencies, elapsed, cpu)


def inserts(dsn: str, clients: int, writes: int) -> float:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_inserts (id bigserial PRIMARY KEY, body text)")
    connections = [psycopg.connect(dsn, autocommit=True) for _ in range(clients)]
    try:
        began, cpu = time.perf_counter(), time.process_time()
        latencies = run_threads(clients, writes, lambda c, i: connections[c].execute(
            "INSERT INTO bench_inserts (body) VALUES (%s)", (BODY,)))
        elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
    finally:
        for conn in connections:
            conn.close()
    return report("bare INSERT", clients, latencies, elapsed, cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--writes", type=int, default=1_000)
    parser.add_argument("--clients", default="1,4,8")
    args = parser.parse_args()
    with bench_folder(None, False, "palimpsest-commands-") as folder:
        run(folder / "data", args)


def run(data_dir: Path, args: argparse.Namespace) -> None:
    settings = Settings(persistence="postgres", data_dir=data_dir, auto_bootstrap=False)
    admin = admin_database(settings)
    try:
        bootstrap(admin, settings)
        dsn = f"host={admin.host} port={admin.port} dbname={admin.dbname} user={admin.user}"
        with psycopg.connect(dsn) as conn:
            synchronous = conn.execute("SHOW synchronous_commit").fetchone()[0]  # type: ignore[index]
        print(f"{args.writes} writes per row, each a slot of its own; synchronous_commit={synchronous}; "
              "latency in ms")
        print(f"{'':<22} {'clients':>7} {'calls':>6} {'p50':>7} {'p95':>7} {'writes/s':>9} {'cpu ms':>8}")
        for clients in (int(c) for c in args.clients.split(",")):
            bare = inserts(dsn, clients, args.writes)
            off = commands(settings, clients, args.writes, group=False)
            on = commands(settings, clients, args.writes, group=True)
            print(f"{'':<22} {clients:>7}  group on / off {on / off:.2f}×, "
                  f"on / bare INSERT {on / bare:.2f}×", flush=True)
    finally:
        stop_embedded(data_dir)


if __name__ == "__main__":
    main()
