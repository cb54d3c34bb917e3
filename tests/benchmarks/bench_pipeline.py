"""Pipeline throughput and lag, on this machine, against the embedded PostgreSQL and broker.

    .venv/bin/python -m tests.benchmarks.bench_pipeline [--events 10000] [--lag-seconds 20]
        [--only replay] [--keep | --corpus FOLDER]

Writes a corpus through the real commands into a throwaway data folder (with
``synchronous_commit = off`` while it is written, so it is quick to make; the server is set back to
its default, as a user runs it, before anything is measured), then reports, all in one run so the
figures share the machine's load:

- replay: the log folded straight into a fresh schema (``rebuild``), events/s, in this process
  and then in ``PALIMPSEST_REBUILD_WORKERS`` forked processes (default: the cores, at most 4),
  with the tokenizer loaded beforehand (its load time is printed on its own);
- incremental catch-up from the log (the projector's PostgreSQL sink, no Kafka): the baseline;
- beside those two, the CPU time this process spent (the server's is not counted): on a shared
  machine it moves less than the wall-clock rates; and the whole machine's CPU time over the
  step (every process, the server's included; from ``/proc/stat``), with the share of its cores
  that was: near 100 %, a faster rate needs less CPU per event, not more processes;
- relay: the log published to Kafka, events/s;
- Faust: a projector process consuming that topic into a fresh schema, events/s over the whole
  run (from the process's start: its catch-up and group join included, as a user waits for it) and
  from its first to its last applied event, and the CPU time that process spent;
- lag: writes at a steady rate through relay → Kafka → Faust, commit-to-visible p50 / p95 / max,
  and how many writes were never seen visible within two minutes (they are not in the figures).

``--only replay`` stops after the replay (no broker is started); ``--keep`` keeps the data folder
and ``--corpus FOLDER`` measures again over the corpus such a kept folder holds, without writing
one: two versions of the code compared back to back over the same events.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from psycopg import sql

from infra.broker import EmbeddedBroker, ensure_topic
from infra.postgres import admin_database, stop_embedded
from infra.relay import Relay
from infra.settings import Settings
from projections.replay import catch_up, make_projector, rebuild
from projections.schema import create_read_schema
from projections.text import warm_up
from services.command.commands import Remember
from services.command.memory import Palimpsest
from services.factory import create_app

CITIES = ["Taipei", "Kyoto", "Kaohsiung", "台北", "高雄", "京都", "Osaka", "臺南"]
SKILLS = ["Python", "PostgreSQL", "Kafka", "資料庫設計", "後端開發", "Rust", "牛肉湯料理", "JWT auth"]


def corpus(app: Palimpsest, events: int, tenants: int) -> None:
    rng = random.Random(7)
    written, started = 0, time.perf_counter()
    while (app.recorder.max_notification_id() or 0) < events:
        tenant = f"bench-{rng.randrange(tenants)}"
        kind = rng.random()
        if kind < 0.35:
            command = Remember(kind="state", memory_type="fact", subject="user", label="address",
                               content=rng.choice(CITIES))
        elif kind < 0.7:
            command = Remember(kind="state", memory_type="fact", subject="user", label="skills",
                               content=f"{rng.choice(SKILLS)} {rng.randrange(1000)}")
        elif kind < 0.9:
            command = Remember(kind="event", memory_type="event",
                               content=f"和 {rng.choice(CITIES)} 團隊開會討論 {rng.choice(SKILLS)}",
                               tags=(rng.choice(SKILLS),))
        else:
            command = Remember(kind="knowledge", memory_type="note", title=rng.choice(SKILLS),
                               content=f"Notes on {rng.choice(SKILLS)} for {rng.choice(CITIES)}",
                               tags=("JWT", "後端"))
        app.remember(tenant, command)
        written += 1
        if written % 2000 == 0:
            print(f"  corpus: {app.recorder.max_notification_id()} events "
                  f"({written / (time.perf_counter() - started):.0f} commands/s)", flush=True)


def fresh_schema(settings: Settings, name: str, head: int | None = None) -> None:
    admin = admin_database(settings)
    with admin.connect(autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
        create_read_schema(conn, name, settings.runtime_role, settings.projector_role, vector_index="none")
        if head is not None:  # the Faust run must not catch up from the log: mark it done
            conn.execute(sql.SQL("INSERT INTO {}.projection_position (projection, tenant_id, "
                                 "position) VALUES ('cards', '*', %s)").format(
                sql.Identifier(name)), (head,))


_watchers: dict[str, Any] = {}


def positions(settings: Settings, schema: str) -> dict[str, int]:
    """Projected positions per tenant, over one long-lived connection (a new connection per
    poll would cost the server more than the projector's work)."""
    conn = _watchers.get(schema)
    if conn is None:
        conn = _watchers[schema] = admin_database(settings).connect(autocommit=True)
    rows = conn.execute(sql.SQL("SELECT tenant_id, position FROM {}.projection_position "
                                "WHERE tenant_id <> '*'").format(sql.Identifier(schema))
                        ).fetchall()
    return dict(rows)


def last_per_tenant(app: Palimpsest) -> dict[str, int]:
    with admin_database(app.bench_settings).connect() as conn:  # type: ignore[attr-defined]
        rows = conn.execute(
            "SELECT convert_from(state, 'UTF8')::json->>'tenant_id', max(notification_id) "
            "FROM palimpsest.palimpsest_events GROUP BY 1").fetchall()
    return dict(rows)


def projector_process(settings: Settings, schema: str, topic: str, log: Path) -> Any:
    env = {**os.environ, "PALIMPSEST_DATA_DIR": str(settings.data_dir),
           "PALIMPSEST_KAFKA_BOOTSTRAP": settings.kafka_bootstrap or "",
           "PALIMPSEST_KAFKA_TOPIC": topic, "PALIMPSEST_READ_SCHEMA": schema,
           "PALIMPSEST_AUTO_BOOTSTRAP": "false", "PALIMPSEST_PROJECTOR_EMBEDDINGS": "false"}
    return subprocess.Popen([sys.executable, "-m", "services.entrypoints.cli", "project"], env=env,
                            stdout=log.open("wb"), stderr=subprocess.STDOUT)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process, from ``/proc`` (0 where there is none)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_cpu_seconds() -> float:
    """CPU time the whole machine has spent (every process, the database server's included),
    from ``/proc/stat`` (0 where there is none): beside a wall time, how much of the machine a
    step used — a rate on a machine whose cores are all busy grows only with less CPU per event."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq = map(int, fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def machine_share(cpu: float, seconds: float) -> str:
    """``2.61 s of the machine's CPU (71 % of its 2 cores)``."""
    cores = os.cpu_count() or 1
    if not cpu or not seconds:
        return "the machine's CPU is not known here"
    return f"{cpu:.2f} s of the machine's CPU ({cpu / seconds / cores:.0%} of its {cores} cores)"


def faust_throughput(settings: Settings, app: Palimpsest, head: int, folder: Path,
                     workers: int = 1) -> float:
    topic = "bench-throughput"
    ensure_topic(settings.kafka_bootstrap or "", topic, settings.kafka_partitions)
    relay = Relay.from_settings(
        app.recorder, settings.model_copy(update={"kafka_topic": topic}),  # type: ignore[arg-type]
        settings.kafka_bootstrap or "", name="bench-throughput")
    started = time.perf_counter()
    while relay.position < head:
        relay.run_once(timeout=0.5)
    relay_rate = head / (time.perf_counter() - started)
    relay.close()
    print(f"relay            {relay_rate:>9,.0f} events/s  ({head} events to Kafka)")
    fresh_schema(settings, "bench_faust", head=head)
    wanted = last_per_tenant(app)
    processes = [projector_process(settings, "bench_faust", topic, folder / f"faust-{i}.log")
                 for i in range(workers)]
    launched = time.perf_counter()
    try:
        first = None
        deadline = time.monotonic() + 600
        while True:
            seen = positions(settings, "bench_faust")
            if seen and first is None:
                first = time.perf_counter()
            if all(seen.get(t, 0) >= p for t, p in wanted.items()):
                break
            if time.monotonic() > deadline or any(p.poll() is not None for p in processes):
                raise RuntimeError((folder / "faust-0.log").read_text()[-2000:])
            time.sleep(0.05)
        done = time.perf_counter()
        whole, applying = done - launched, done - (first or done)
        cpu = sum(cpu_seconds(p.pid) for p in processes)
        print(f"Faust whole run  {head / whole:>9,.0f} events/s  ({whole:.2f} s from the process's "
              f"start: start-up, catch-up and group join included)")
        print(f"Faust CPU        {cpu:>9.2f} s in the projector process(es) over the whole run "
              f"({cpu / head * 1e6:.0f} µs per event; the server's is not counted)")
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=30)
    return head / applying if applying else float("nan")


def lag(settings: Settings, app: Palimpsest, rate: float, seconds: float, folder: Path
        ) -> list[float]:
    topic = "bench-lag"
    ensure_topic(settings.kafka_bootstrap or "", topic, settings.kafka_partitions)
    head = app.recorder.max_notification_id() or 0
    fresh_schema(settings, "bench_lag", head=head)
    relay = subprocess.Popen(  # its own process, as deployed: no GIL shared with the writer
        [sys.executable, "-m", "services.entrypoints.cli", "relay"],
        env={**os.environ, "PALIMPSEST_DATA_DIR": str(settings.data_dir),
             "PALIMPSEST_KAFKA_BOOTSTRAP": settings.kafka_bootstrap or "",
             "PALIMPSEST_KAFKA_TOPIC": topic, "PALIMPSEST_AUTO_BOOTSTRAP": "false"},
        stdout=(folder / "relay.log").open("wb"), stderr=subprocess.STDOUT)
    process = projector_process(settings, "bench_lag", topic, folder / "lag.log")
    tenant = "bench-lag"
    try:
        # Warm up until a write is visible within a second three times running: the backlog is
        # drained and the consumer group has settled (its first rebalances stall delivery).
        warm_started, settled = time.perf_counter(), 0
        while settled < 3:
            warm = app.remember(tenant, Remember(kind="event", memory_type="event", content="warm"))
            written = time.perf_counter()
            while positions(settings, "bench_lag").get(tenant, 0) < (warm.position or 0):
                if process.poll() is not None or written - warm_started > 300:
                    raise RuntimeError((folder / "lag.log").read_text()[-2000:])
                time.sleep(0.01)
            settled = settled + 1 if time.perf_counter() - written < 1.0 else 0
            time.sleep(0.2)
        print(f"lag warm-up      {time.perf_counter() - warm_started:>9.1f} s until steady "
              "(backlog drained, consumer group settled)")
        commits: list[tuple[int, float]] = []
        visible: dict[int, float] = {}
        done = threading.Event()

        def watch() -> None:
            query = sql.SQL("SELECT position FROM {}.projection_position WHERE tenant_id = %s"
                            ).format(sql.Identifier("bench_lag"))
            deadline = None
            with admin_database(settings).connect(autocommit=True) as conn:
                while len(visible) < len(commits) or not done.is_set():
                    if done.is_set():
                        deadline = deadline or time.monotonic() + 120
                        if time.monotonic() > deadline:
                            return
                    row = conn.execute(query, (tenant,)).fetchone()
                    seen, now = (row[0] if row else 0), time.perf_counter()
                    while len(visible) < len(commits) and commits[len(visible)][0] <= seen:
                        visible[commits[len(visible)][0]] = now  # positions only grow
                    time.sleep(0.005)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        interval, next_at = 1.0 / rate, time.perf_counter()
        end = next_at + seconds
        while next_at < end:
            result = app.remember(tenant, Remember(kind="state", memory_type="fact",
                                                   subject="user", label="skills",
                                                   content=f"s{len(commits)}"))
            commits.append((result.position or 0, time.perf_counter()))
            next_at += interval
            time.sleep(max(0.0, next_at - time.perf_counter()))
        achieved = len(commits) / seconds
        done.set()
        watcher.join(timeout=60)
        print(f"lag run          {achieved:>9,.0f} writes/s achieved for {seconds:.0f} s; "
              f"{len(commits) - len(visible)} of {len(commits)} writes never seen visible within "
              "two minutes (left out of the figures below)")
        return [visible[p] - t for p, t in commits if p in visible]
    finally:
        for child in (process, relay):
            child.terminate()
            child.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--tenants", type=int, default=40)
    parser.add_argument("--lag-rate", type=float, default=200.0)
    parser.add_argument("--lag-seconds", type=float, default=20.0)
    parser.add_argument("--projectors", type=int, default=1,
                        help="projector processes in the consumer group")
    parser.add_argument("--only", choices=("replay",), help="measure only this step")
    parser.add_argument("--keep", action="store_true", help="keep the data folder")
    parser.add_argument("--corpus", type=Path,
                        help="a folder kept by --keep: its corpus is measured, none is written")
    args = parser.parse_args()
    folder = args.corpus or Path(tempfile.mkdtemp(prefix="palimpsest-bench-"))
    broker = None if args.only else EmbeddedBroker(folder)
    try:
        bootstrap = broker.start() if broker else None
        settings = Settings(data_dir=folder / "data", kafka_bootstrap=bootstrap,
                            read_schema="bench_live")
        app = create_app(settings)
        app.bench_settings = settings  # type: ignore[attr-defined]
        if args.corpus is None:
            write_corpus(settings, app, args.events, args.tenants)
        head = app.recorder.max_notification_id() or 0
        replay(settings, app)
        if args.only is None:
            after_replay(settings, app, head, folder, args)
        app.close()
    finally:
        if broker:
            broker.stop()
        stop_embedded(folder / "data")  # the projector processes it started joined the server
        if not (args.keep or args.corpus):
            shutil.rmtree(folder, ignore_errors=True)


def write_corpus(settings: Settings, app: Palimpsest, events: int, tenants: int) -> None:
    """The corpus written quickly (``synchronous_commit = off``), the server then set back to
    its default, as a user runs it, before anything is measured."""
    with admin_database(settings).connect(autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET synchronous_commit = off")
        conn.execute("SELECT pg_reload_conf()")
    print(f"corpus: {events} events over {tenants} tenants …", flush=True)
    corpus(app, events, tenants)
    with admin_database(settings).connect(autocommit=True) as conn:  # measure as a user runs it
        conn.execute("ALTER SYSTEM RESET synchronous_commit")
        conn.execute("SELECT pg_reload_conf()")
        setting = conn.execute("SHOW synchronous_commit").fetchone()
    print(f"measuring with synchronous_commit = {setting[0] if setting else '?'} (the server's "
          "default)", flush=True)


def replay(settings: Settings, app: Palimpsest) -> None:
    """The rebuild's rate in this process, then in ``settings.rebuild_workers`` processes."""
    started = time.perf_counter()
    warm_up()  # a fixed cost of any process that projects, not a rate: reported on its own
    print(f"tokenizer        {time.perf_counter() - started:>9.2f} s to load (before the replay)")
    for workers in dict.fromkeys((1, settings.rebuild_workers)):  # one process first: the baseline
        cpu, machine, started = time.process_time(), machine_cpu_seconds(), time.perf_counter()
        report = rebuild(settings, app, into="bench_replay", workers=workers)
        used = machine_cpu_seconds() - machine
        print(f"replay ×{workers:<9} {report.rate:>9,.0f} events/s  ({report.events} events, "
              f"{report.seconds:.2f} s, fold + COPY + indexes + check; "
              f"{time.process_time() - cpu:.2f} s CPU in this process, "
              f"{machine_share(used, time.perf_counter() - started)})", flush=True)


def after_replay(settings: Settings, app: Palimpsest, head: int, folder: Path,
                 args: argparse.Namespace) -> None:
    """Catch-up, relay, Faust and lag, each after the one before."""
    fresh_schema(settings, "bench_catchup")
    projector = make_projector(settings, app, schema="bench_catchup")
    started, cpu, machine = time.perf_counter(), time.process_time(), machine_cpu_seconds()
    applied = catch_up(projector, app, batch=settings.projector_batch)
    seconds = time.perf_counter() - started
    baseline = applied / seconds
    projector.close()
    print(f"catch-up         {baseline:>9,.0f} events/s  (incremental sink, no Kafka: baseline; "
          f"{time.process_time() - cpu:.2f} s CPU in this process, "
          f"{machine_share(machine_cpu_seconds() - machine, seconds)})")
    faust = faust_throughput(settings, app, head, folder, args.projectors)
    print(f"Faust projector  {faust:>9,.0f} events/s  from its first to its last applied event "
          f"({faust / baseline:.2f}× the baseline, {args.projectors} process(es) in one consumer "
          "group)")
    lags = sorted(lag(settings, app, args.lag_rate, args.lag_seconds, folder))
    if lags:
        p95 = lags[int(0.95 * (len(lags) - 1))]
        print(f"lag              p50 {statistics.median(lags) * 1000:.0f} ms, "
              f"p95 {p95 * 1000:.0f} ms, max {lags[-1] * 1000:.0f} ms "
              f"over {len(lags)} writes")


if __name__ == "__main__":
    main()
