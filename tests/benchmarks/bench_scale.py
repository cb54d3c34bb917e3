"""Throughput as processes are added, 1 → 2, each pair measured in one run on this machine.

    .venv/bin/python -m tests.benchmarks.bench_scale [--writes 2000] [--clients 8]
        [--read-seconds 10] [--cards 10000] [--queries 100] [--events 10000] [--tenants 40]
        [--turns 1000] [--only api|projector|ingest] [--json]

- **API processes.** ``palimpsest serve --workers 1`` on the embedded default (its PostgreSQL,
  broker, relay and projector), and a second ``palimpsest serve --workers 1 --no-pipeline`` on the
  same database (the first one's PostgreSQL as an external server, its master key), behind a
  round-robin TCP balancer of ours (:mod:`tests.benchmarks.balancer`, a process of its own).
  ``--clients`` threads, a connection each, write ``--writes`` state cards through the balancer
  with one backend, then search for ``--read-seconds`` (``--cards`` cards loaded into the read
  models and ``--queries`` questions, as ``bench_api`` loads and asks them); then the same with
  both backends. The balancer's own CPU is paid in both runs alike.
- **Projectors.** A corpus of ``--events`` events over ``--tenants`` tenants is relayed to a topic
  of ``kafka_partitions`` partitions (tenants hashed to partitions); one projector process
  (``palimpsest project``) applies it into a fresh schema, then two in one consumer group apply the
  same log into another, relayed to a topic of its own once the group has formed (each projector
  follows Kafka, and some seconds more for the rebalances): events/s from the first applied event
  to the last.

- **Extraction workers.** ``palimpsest serve --workers 1`` with a scripted model answering at once
  (``tests.fakes.openai_server``, as ``bench_ingest`` scripts it) extracts ``--turns`` turns of 16
  tenants (the ingest topic is keyed by tenant) with its one worker; then a second worker
  (``palimpsest ingest-worker`` on the same data folder) joins the group, and once it has applied
  a turn (it holds partitions) the same number of new turns is extracted by both: turns/s from the
  first turn stored to the last one applied.

Figures print beside their one-process baseline; ``--json`` prints one JSON object last:
``{"api": {"1": writes/s, "2": writes/s}, "api_reads": {"1": searches/s, "2": searches/s},
"projector": {"1": events/s, "2": events/s}, "ingest": {"1": turns/s, "2": turns/s}}``. Goals: 2
API processes ≥ 1.5× one, 2 projectors ≥ 1.6× one. On two cores every process shares them with
PostgreSQL: the figures say how much a second process buys here, not on a machine with cores to
spare.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from palimpsest_client import Client
from psycopg import sql

from infra.broker import EmbeddedBroker, ensure_topic
from infra.embedded_pg import release_embedded
from infra.postgres import admin_database, stop_embedded
from infra.relay import Relay
from infra.settings import Settings
from services.factory import create_app
from tests.benchmarks.bench_api import (
    LIFTED,
    Server,
    card,
    in_threads,
    load_cards,
    remember_over_rest,
    settle,
    start_server,
    stop_server,
)
from tests.benchmarks.bench_pipeline import (
    corpus,
    cpu_seconds,
    fresh_schema,
    last_per_tenant,
    positions,
    projector_process,
)
from tests.benchmarks.bench_retrieval import BenchQuery, bench_queries


def ratio(figures: dict[str, float]) -> str:
    return f"{figures['2'] / figures['1']:.2f}×" if figures.get("1") else "?"


# --- API processes ---------------------------------------------------------------------------


@contextlib.contextmanager
def balancing(backends: list[str]) -> Iterator[str]:
    """The balancer as a process of its own over ``backends``; its URL."""
    process = subprocess.Popen([sys.executable, "-m", "tests.benchmarks.balancer", *backends],
                               stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        yield f"http://127.0.0.1:{int(process.stdout.readline())}"
    finally:
        process.terminate()
        process.wait(10)


def second_server(folder: Path, first: Path) -> Server:
    """``serve --workers 1 --no-pipeline`` on the database of the server in ``first``."""
    pid = (first / "data" / "pg" / "postmaster.pid").read_text().splitlines()
    socket_dir, port = pid[4] if len(pid) > 4 and pid[4] else str(first / "data" / "pg"), pid[3]
    extra = {"PALIMPSEST_DATABASE_URL": f"postgresql://postgres@/postgres?host={socket_dir}&port={port}",
             "PALIMPSEST_MASTER_KEY": (first / "data" / "master.key").read_text().strip(),
             "PALIMPSEST_CONSOLIDATION_ENABLED": "false"}
    return start_server(folder, folder / "serve.log", extra=extra,
                        args=("--workers", "1", "--no-pipeline"))


def searches(url: str, key: str, clients: int, seconds: float,
             questions: list[BenchQuery]) -> float:
    """Searches per second by ``clients`` threads, a connection each, for ``seconds``, going
    round ``questions``."""
    def work(index: int) -> list[float]:
        done, end = [], time.perf_counter() + seconds
        with Client(url, key, timeout=60) as api:
            while time.perf_counter() < end:
                started = time.perf_counter()
                asked = questions[(index * 7 + len(done)) % len(questions)]
                api.search(asked.text, project_id=asked.project_id)
                done.append(time.perf_counter() - started)
        return done

    calls, wall = in_threads(clients, work)
    return len(calls) / wall


def api_scale(folder: Path, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    quiet = {"PALIMPSEST_CONSOLIDATION_ENABLED": "false"}
    for name in ("a", "b"):
        (folder / name).mkdir(parents=True, exist_ok=True)
    first = start_server(folder / "a", folder / "a" / "serve.log", extra=quiet,
                         args=("--workers", "1"))
    second: Server | None = None
    writes: dict[str, float] = {}
    reads: dict[str, float] = {}
    try:
        second = second_server(folder / "b", folder / "a")
        backends = [url.removeprefix("http://") for url in (first.url, second.url)]
        per_client = max(1, args.writes // args.clients)
        settings = Settings(data_dir=folder / "a" / "data", auto_bootstrap=False)
        print(f"loading {args.cards:,} cards to search into the read models …", flush=True)
        load_cards(settings, args.cards)
        questions = bench_queries(args.queries)
        for count in (1, 2):
            with balancing(backends[:count]) as url:
                via = Server(first.process, url, first.key, "")
                remember_over_rest(via, args.clients, 20, offset=20_000_000 + count)  # warm-up
                made, wall = remember_over_rest(via, args.clients, per_client, offset=count * 100_000)
                writes[str(count)] = round(len(made) / wall, 1)
                with Client(url, first.key) as api:  # the next figure starts with no backlog
                    settle(settings, int(api.remember(**card(99, count))["position"]))
                print(f"writes, {count} API process(es)   {writes[str(count)]:>8,.0f} /s  "
                      f"({len(made)} remember calls, {args.clients} clients)", flush=True)
                searches(url, first.key, args.clients, 3.0, questions)  # warm-up, not counted
                reads[str(count)] = round(searches(url, first.key, args.clients,
                                                   args.read_seconds, questions), 1)
                print(f"searches, {count} API process(es) {reads[str(count)]:>8,.0f} /s", flush=True)
        print(f"writes, 2 ÷ 1                 {ratio(writes):>9}  (goal ≥ 1.5×)", flush=True)
        print(f"searches, 2 ÷ 1               {ratio(reads):>9}", flush=True)
    finally:
        if second is not None:
            stop_server(second)
        stop_server(first)
    return {"api": writes, "api_reads": reads}


# --- projectors ------------------------------------------------------------------------------


def projector_rate(settings: Settings, app: Any, head: int, folder: Path, processes: int) -> float:
    """Events/s of ``processes`` projectors in one group over the log relayed to a topic of its
    own once the group has formed, from the first applied event to the last."""
    topic = f"bench-scale-{processes}"
    ensure_topic(settings.kafka_bootstrap or "", topic, settings.kafka_partitions)
    schema = f"bench_scale_{processes}"
    fresh_schema(settings, schema, head=head)
    wanted = last_per_tenant(app)
    running = [projector_process(settings, schema, topic, folder / f"{topic}-{i}.log")
               for i in range(processes)]
    try:
        joined(settings, [p.pid for p in running], folder / f"{topic}-0.log")
        relay = Relay.from_settings(app.recorder, settings.model_copy(update={"kafka_topic": topic}),
                                    settings.kafka_bootstrap or "", name=topic)
        first, deadline = None, time.monotonic() + 900
        while True:
            if relay.position < head:
                relay.run_once(timeout=0.1)
            seen = positions(settings, schema)
            if seen and first is None:
                first = time.perf_counter()
            if all(seen.get(t, 0) >= p for t, p in wanted.items()):
                break
            if time.monotonic() > deadline or any(p.poll() is not None for p in running):
                raise RuntimeError((folder / f"{topic}-0.log").read_text()[-2000:])
            if relay.position >= head:
                time.sleep(0.05)
        done = time.perf_counter()
        relay.close()
        cpu = sum(cpu_seconds(p.pid) for p in running)
    finally:
        for process in running:
            process.terminate()
            process.wait(timeout=30)
    rate = head / (done - (first or done)) if first and done > first else float("nan")
    print(f"projectors ×{processes}                {rate:>8,.0f} events/s  ({head} events; "
          f"{cpu / head * 1e6:.0f} µs of projector CPU an event over the whole run)", flush=True)
    return round(rate, 1)


def joined(settings: Settings, pids: list[int], log: Path, settle: float = 8.0) -> None:
    """Until every projector follows Kafka (its heartbeat says so), and ``settle`` seconds more
    for the group's rebalances to end: the figure is the group's, not its forming."""
    query = sql.SQL("SELECT count(*) FROM {}.heartbeats WHERE role = 'projector' AND pid = ANY(%s) "
                    "AND detail LIKE 'following Kafka%%'").format(sql.Identifier(settings.event_schema))
    deadline = time.monotonic() + 180
    with admin_database(settings).connect(autocommit=True) as conn:
        while (conn.execute(query, (pids,)).fetchone() or (0,))[0] < len(pids):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the projectors did not join: {log.read_text()[-2000:]}")
            time.sleep(0.2)
    time.sleep(settle)


def projector_scale(folder: Path, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    broker = EmbeddedBroker(folder)
    try:
        bootstrap = broker.start()
        settings = Settings(data_dir=folder / "data", kafka_bootstrap=bootstrap,
                            read_schema="bench_scale_live")
        app = create_app(settings)
        app.bench_settings = settings  # type: ignore[attr-defined]
        with admin_database(settings).connect(autocommit=True) as conn:  # quick to write
            conn.execute("ALTER SYSTEM SET synchronous_commit = off")
            conn.execute("SELECT pg_reload_conf()")
        print(f"corpus: {args.events} events over {args.tenants} tenants …", flush=True)
        corpus(app, args.events, args.tenants)
        head = app.recorder.max_notification_id() or 0
        with admin_database(settings).connect(autocommit=True) as conn:  # measured as a user runs it
            conn.execute("ALTER SYSTEM RESET synchronous_commit")
            conn.execute("SELECT pg_reload_conf()")
        rates = {str(n): projector_rate(settings, app, head, folder, n) for n in (1, 2)}
        print(f"projectors, 2 ÷ 1             {ratio(rates):>9}  (goal ≥ 1.6×; "
              f"{settings.kafka_partitions} partitions)", flush=True)
        app.close()
    finally:
        broker.stop()
        stop_embedded(folder / "data")
    return {"projector": rates}


# --- extraction workers -----------------------------------------------------------------------

#: Tenants the turns are spread over (the ingest topic is keyed by tenant: one tenant alone
#: would keep a second worker idle), each with sessions of its own.
INGEST_TENANTS = 16
INGEST_SESSIONS = 2


def ingest_turns(app: Any, phase: str, count: int, offset: int, said: dict[str, Any]) -> None:
    """``count`` turns of the scripted conversations over the tenants, 50 a save, stored as the
    REST ingest call stores them."""
    from services.command.commands import IngestTurn
    from tests.benchmarks.bench_ingest import script

    rng, at = random.Random(offset), datetime.now(UTC) - timedelta(hours=1)
    turns: dict[str, list[IngestTurn]] = {}
    for i in range(offset, offset + count):
        tenant = f"t-scale-{i % INGEST_TENANTS}"
        text = script(rng, i)
        said[text] = at
        turns.setdefault(tenant, []).append(IngestTurn(
            session_id=f"{phase}-{(i // INGEST_TENANTS) % INGEST_SESSIONS}", turn_id=str(i),
            role="user", text=text, said_at=at, timezone="Asia/Taipei"))
    for tenant, own in turns.items():
        for start in range(0, len(own), 50):
            app.ingest_turns(tenant, own[start:start + 50])


def applied_turns(settings: Settings, phase: str) -> int:
    query = sql.SQL("SELECT count(*) FROM {}.ingestions WHERE session_id LIKE %s "
                    "AND status = 'applied'").format(sql.Identifier(settings.read_schema))
    with admin_database(settings).connect(autocommit=True) as conn:
        return int((conn.execute(query, (phase + "-%",)).fetchone() or (0,))[0])


def extraction_rate(app: Any, settings: Settings, phase: str, count: int, offset: int,
                    said: dict[str, Any]) -> float:
    """Turns/s from the first turn stored to the last one applied (its cards in the read models)."""
    began = time.perf_counter()
    ingest_turns(app, phase, count, offset, said)
    while applied_turns(settings, phase) < count:
        if time.perf_counter() - began > 900:
            raise RuntimeError(f"the {phase} turns were not applied within 15 minutes")
        time.sleep(0.05)
    return count / (time.perf_counter() - began)


def worker_applied(settings: Settings, pid: int) -> bool:
    """Whether the extraction worker ``pid`` says it applied a turn (it holds partitions)."""
    query = sql.SQL("SELECT detail FROM {}.heartbeats WHERE role = 'ingest' AND pid = %s").format(
        sql.Identifier(settings.event_schema))
    with admin_database(settings).connect(autocommit=True) as conn:
        row = conn.execute(query, (pid,)).fetchone()
    return bool(row and row[0] and not row[0].startswith("0 turn"))


def ingest_scale(folder: Path, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """``serve`` with the scripted model (its one extraction worker), then with a second worker
    (``palimpsest ingest-worker`` on the same data folder) in the group: turns/s each."""
    from tests.benchmarks.bench_ingest import responder
    from tests.fakes.openai_server import FakeOpenAIServer

    folder.mkdir(parents=True, exist_ok=True)
    said: dict[str, Any] = {}
    rates: dict[str, float] = {}
    with FakeOpenAIServer() as llm:
        llm.responder = responder(said)
        model = {"PALIMPSEST_LLM_BASE_URL": llm.base_url, "PALIMPSEST_LLM_MODEL": "scripted",
                 "PALIMPSEST_CONSOLIDATION_ENABLED": "false"}
        server = start_server(folder, folder / "serve.log", extra=model, args=("--workers", "1"))
        extra: subprocess.Popen[bytes] | None = None
        settings = Settings(data_dir=folder / "data", auto_bootstrap=False)
        app = create_app(settings)
        try:
            extraction_rate(app, settings, "warm1", INGEST_TENANTS, 0, said)
            rates["1"] = round(extraction_rate(app, settings, "one", args.turns, 10_000, said), 1)
            print(f"extraction workers ×1         {rates['1']:>8,.1f} turns/s  ({args.turns} turns, "
                  f"{INGEST_TENANTS} tenants)", flush=True)
            env = {**os.environ, **model, "PALIMPSEST_DATA_DIR": str(folder / "data"), **LIFTED}
            env.pop("PALIMPSEST_DATABASE_URL", None)
            extra = subprocess.Popen(
                [sys.executable, "-m", "services.entrypoints.cli", "ingest-worker"], env=env,
                cwd=folder, stdout=subprocess.DEVNULL, stderr=(folder / "ingest-2.log").open("w"))
            deadline, n = time.monotonic() + 300, 0
            while not worker_applied(settings, extra.pid):  # the group shares the partitions
                if time.monotonic() > deadline or extra.poll() is not None:
                    raise RuntimeError((folder / "ingest-2.log").read_text()[-2000:])
                n += 1
                extraction_rate(app, settings, f"warm2x{n}", INGEST_TENANTS, 1_000 * n, said)
            rates["2"] = round(extraction_rate(app, settings, "two", args.turns, 100_000, said), 1)
            print(f"extraction workers ×2         {rates['2']:>8,.1f} turns/s", flush=True)
            print(f"extraction workers, 2 ÷ 1     {ratio(rates):>9}", flush=True)
        finally:
            app.close()
            if extra is not None:
                extra.terminate()
                extra.wait(timeout=30)
            stop_server(server)
            release_embedded(folder / "data")
    return {"ingest": rates}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--writes", type=int, default=2_000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--read-seconds", type=float, default=10.0)
    parser.add_argument("--cards", type=int, default=10_000, help="cards to search, loaded as "
                        "bench_api loads them")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--tenants", type=int, default=40)
    parser.add_argument("--turns", type=int, default=1_000, help="turns a figure of the "
                        "extraction workers extracts")
    parser.add_argument("--only", choices=("api", "projector", "ingest"))
    parser.add_argument("--keep", action="store_true", help="keep the data folders")
    parser.add_argument("--json", action="store_true",
                        help="progress to stderr; one JSON object on stdout, last")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="palimpsest-bench-scale-"))
    found: dict[str, Any] = {}
    try:
        with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
            if args.only in (None, "api"):
                found.update(api_scale(folder / "api", args))
            if args.only in (None, "projector"):
                found.update(projector_scale(folder / "projector", args))
            if args.only in (None, "ingest"):
                found.update(ingest_scale(folder / "ingest", args))
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    if args.json:
        print(json.dumps(found))


if __name__ == "__main__":
    main()
