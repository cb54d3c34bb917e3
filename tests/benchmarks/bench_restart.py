"""``palimpsest serve`` started again over a large log: how long until it answers, and what it
publishes again to the embedded broker, whose topics live in memory (every start of it is empty).

    .venv/bin/python -m tests.benchmarks.bench_restart [--events 1000000] [--tenants 200]
        [--data-dir PATH] [--keep] [--json]

Writes ``--events`` events into a data folder of its own (state cards, each in a slot of its own,
decided by the ordinary commands and saved 50 at a time, ``synchronous_commit`` off while it
writes), rebuilds the read models from them (``palimpsest rebuild``) and records the relay as
having published the whole log, as a ``serve`` that ran over it leaves things. Then starts ``serve``
(``--workers 1``, embeddings off: the vectors are not what a restart is about), stops it with
SIGINT, and starts it again: for each start, the seconds until its banner, until ``/ready``
answers 200, and the events the relay published again (``relay_position.published`` once it has
settled). A relay that republished the whole log would publish every event once more, and the
projector would read each of them again (skipping it).

Goal: the restart ready in ≤ 10 s, publishing nothing again.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg

from infra.postgres import admin_database, stop_embedded
from infra.settings import Settings
from projections.replay import rebuild
from services.command.commands import Remember
from services.factory import create_app
from tests.benchmarks.bench_api import start_server, stop_server
from tests.benchmarks.folders import bench_folder

BATCH = 50


def corpus(settings: Settings, events: int, tenants: int) -> int:
    """``events`` events or a few more, decided by the ordinary commands and saved ``BATCH``
    commands a transaction; the log's head."""
    app = create_app(settings)
    now, written, started = datetime.now(UTC), 0, time.perf_counter()
    try:
        while (head := app.recorder.max_notification_id() or 0) < events:
            batch = []
            for _ in range(BATCH):
                tenant = f"restart-{written % tenants}"
                command = Remember(kind="state", memory_type="fact", subject=f"person {written}",
                                   label="address", content=f"street {written}")
                batch += app._decide_remember(tenant, command, now)[0]  # a new slot: no race
                written += 1
            app.save(*batch)
            if written % 50_000 < BATCH:
                print(f"  corpus: {head:,} events ({head / (time.perf_counter() - started):,.0f} "
                      "events/s)", flush=True)
        return app.recorder.max_notification_id() or 0
    finally:
        app.close()


def prepare(settings: Settings, args: argparse.Namespace) -> int:
    admin = admin_database(settings)
    with admin.connect(autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET synchronous_commit = off")
        conn.execute("SELECT pg_reload_conf()")
    started = time.perf_counter()
    head = corpus(settings, args.events, args.tenants)
    print(f"corpus           {head:,} events in {time.perf_counter() - started:.0f} s", flush=True)
    app = create_app(settings)
    try:
        report = rebuild(settings, app)
    finally:
        app.close()
    print(f"rebuild          {report.events:,} events in {report.seconds:.0f} s "
          f"({report.rate:,.0f} events/s)", flush=True)
    with admin.connect(autocommit=True) as conn:
        conn.execute("ALTER SYSTEM RESET synchronous_commit")
        conn.execute("SELECT pg_reload_conf()")
        conn.execute(
            "INSERT INTO palimpsest.relay_position (relay_name, position, published, topic) "
            "VALUES ('main', %s, %s, %s) ON CONFLICT (relay_name) DO UPDATE SET "
            "position = excluded.position, published = excluded.published, topic = excluded.topic",
            (head, 0, settings.kafka_topic))
    stop_embedded(settings.data_dir)
    return head


def relay_row(folder: Path) -> tuple[int, int]:
    """The main relay's (position, published since its last reset), read over the data folder's
    socket (nothing joins the embedded server)."""
    with psycopg.connect(host=str(folder / "data" / "pg"), dbname="postgres", user="postgres") as conn:
        row = conn.execute("SELECT position, published FROM palimpsest.relay_position "
                           "WHERE relay_name = 'main'").fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def start(folder: Path, number: int, head: int) -> dict[str, Any]:
    began = time.perf_counter()
    server = start_server(folder, folder / f"serve-{number}.log", args=("--workers", "1"),
                          extra={"PALIMPSEST_PROJECTOR_EMBEDDINGS": "false",
                                 "PALIMPSEST_CONSOLIDATION_ENABLED": "false"})
    banner = time.perf_counter() - began
    try:
        while httpx.get(server.url + "/ready", timeout=10).status_code != 200:
            time.sleep(0.1)
        ready = time.perf_counter() - began
        settled = (-1, -1)
        while (seen := relay_row(folder)) != settled:  # the relay has done what it does at start
            settled = seen
            time.sleep(2.0)
        position, published = settled
    finally:
        stop_server(server)
    again = published if position >= head else -1
    print(f"start {number}          banner {banner:.1f} s, ready {ready:.1f} s, published again "
          f"{again:,} of {head:,} events", flush=True)
    return {"banner_s": round(banner, 2), "ready_s": round(ready, 2), "republished": again}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--tenants", type=int, default=200)
    parser.add_argument("--data-dir", type=Path, help="default: a temporary folder, removed at the end")
    parser.add_argument("--keep", action="store_true", help="keep the temporary data folder")
    parser.add_argument("--json", action="store_true",
                        help="progress to stderr; one JSON object on stdout, last")
    args = parser.parse_args()
    found: dict[str, Any] = {}
    with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext(), \
            bench_folder(args.data_dir, args.keep, "palimpsest-bench-restart-") as folder:
        settings = Settings(data_dir=folder / "data")
        head = prepare(settings, args)
        found = {"events": head, "first": start(folder, 1, head), "restart": start(folder, 2, head)}
        ok = found["restart"]["ready_s"] <= 10 and found["restart"]["republished"] == 0
        print(f"restart over {head:,} events: ready in {found['restart']['ready_s']:.1f} s, "
              f"{found['restart']['republished']:,} published again (goal ≤ 10 s and none): "
              f"{'met' if ok else 'MISSED'}")
    if args.json:
        print(json.dumps(found))


if __name__ == "__main__":
    main()
