"""Ingest through ``palimpsest serve`` with a scripted LLM answering at once, beside a baseline in
the same run (``make bench-ingest``).

    .venv/bin/python -m tests.benchmarks.bench_ingest [--turns 1000] [--rate 50] [--seconds 20]
        [--baseline REF | --baseline none] [--data-dir PATH] [--keep]

Starts ``palimpsest serve`` on the embedded default in a throwaway folder with
``PALIMPSEST_LLM_BASE_URL`` pointing at a local OpenAI-compatible server in this process
(``tests.fakes.openai_server``) that answers every chat completion at once with one candidate card
per turn; once one turn has gone through (the worker and the projector warm), it measures:

- throughput: ``--turns`` turns of 20 conversations handed over in batches of 50 over REST as
  fast as the server takes them; turns per second from the first call to the last turn's cards
  visible in the read models (its ``ingestions`` row reads ``applied``: the Applied event is
  recorded after the turn's cards, and a tenant's events are projected in log order);
- event-store transactions and events per turn over that phase (the stored events' distinct
  inserting transactions, PostgreSQL's ``xmin``), and the CPU per turn of each process;
- latency: turns one per call at a steady ``--rate`` turns/s for ``--seconds``; each turn from its
  accepted answer to its cards visible (the read models polled every 10 ms), p50 / p95 — the
  database analyzed first (tables that grew from empty within seconds have no statistics yet,
  and their plans read every card of the tenant for each earlier turn a prompt shows);
- LLM calls per turn (the scripted server's count / turns), and the share of time hints that fell
  back to the turn's own time or were overruled by the resolver, read from the recorded
  extractions. The script is deliberately mixed — most turns carry no time word and get no hint,
  some say 昨天 / yesterday with a right hint, some say 三天前 with a wrong one — so the shares show
  the validation at work on that mix, not a model's quality.

The baseline is the same measure of ``serve`` run from ``--baseline``, a commit of this repository
(default the last one: what the working tree's changes are measured against; ``8e15b01`` is the
release whose worker saved a turn's extraction, each candidate's command and ``Applied`` one
transaction each), unpacked with ``git archive`` and run through ``PYTHONPATH`` in its own data
folder; this process and its scripted model are the same for both.
"""

from __future__ import annotations

import argparse
import io
import random
import statistics
import subprocess
import tarfile
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from palimpsest_client import Client
from psycopg import sql

from infra.embedded_pg import release_embedded
from infra.postgres import EVENTS_TABLE, admin_database
from infra.settings import Settings
from services.query.retrieval.breaker import nearest_rank
from tests.benchmarks.bench_api import TENANT, Server, start_server, stop_server
from tests.benchmarks.folders import bench_folder
from tests.fakes.openai_server import FakeOpenAIServer, Reply

#: The code measured beside this tree: the last commit (before committing a change to ingest,
#: the release without it).
BASELINE = "HEAD"
REPOSITORY = Path(__file__).resolve().parents[2]

PLAIN = ["I switched to the night shift", "我現在住在台中", "We use Postgres for the queue",
         "my favourite editor is Helix", "我們決定用 Kafka 做事件匯流排"]
YESTERDAY = ["I moved to Tainan yesterday", "我昨天開始學小提琴"]
THREE_DAYS = ["我三天前去了淡水", "three days ago we shipped v2"]


def script(rng: random.Random, i: int) -> str:
    roll = rng.random()
    words = PLAIN if roll < 0.6 else YESTERDAY if roll < 0.9 else THREE_DAYS
    return f"{rng.choice(words)} (#{i})"


def responder(said: dict[str, datetime]) -> Any:
    """One state candidate per turn; the hint as a model might give it for the script above."""

    def answer(text: str) -> Reply:
        at = said.get(text, datetime.now(UTC))
        hint = None
        if "yesterday" in text or "昨天" in text:
            hint = (at - timedelta(days=1)).replace(hour=9, minute=0).isoformat()
        elif "三天前" in text or "three days ago" in text:
            hint = at.isoformat()  # wrong: the resolver knows better
        label = "note_" + text.rsplit("#", 1)[1].rstrip(")")
        return Reply.json({"candidates": [{
            "kind": "state", "memory_type": "fact", "subject": "user", "label": label,
            "value": text, "cardinality_hint": None, "tags": [], "occurred_at_hint": hint,
            "confidence": 0.8, "title": None, "related_concepts": []}]})

    return answer


def turn(phase: str, i: int, text: str, at: datetime) -> dict[str, Any]:
    return {"session_id": f"{phase}-{i % SESSIONS}", "turn_id": str(i), "role": "user", "text": text,
            "said_at": at.isoformat(), "timezone": "Asia/Taipei"}


#: Conversations the turns are spread over (a session's turns are extracted in order, sessions
#: side by side: one session alone would measure one session's pace).
SESSIONS = 20


def applied(conn: psycopg.Connection[Any], schema: str, phase: str) -> dict[str, float]:
    rows = conn.execute(
        f"SELECT turn_id FROM {schema}.ingestions WHERE tenant_id = %s AND session_id LIKE %s "
        "AND status = 'applied'", (TENANT, phase + "-%")).fetchall()
    return {row[0]: time.perf_counter() for row in rows}


def wait_applied(settings: Settings, phase: str, count: int, began: float) -> None:
    with admin_database(settings).connect(autocommit=True) as conn:
        while len(applied(conn, settings.read_schema, phase)) < count:
            if time.perf_counter() - began > 900:
                raise SystemExit(f"the {phase} turns were not applied within 15 minutes")
            time.sleep(0.05)


def stored(settings: Settings) -> tuple[int, int]:
    """How many events the store holds, and how many transactions inserted them."""
    query = sql.SQL("SELECT count(*), count(DISTINCT xmin::text) FROM {}.{}").format(
        sql.Identifier(settings.event_schema), sql.Identifier(EVENTS_TABLE))
    with admin_database(settings).connect(autocommit=True) as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def throughput(api: Client, settings: Settings, said: dict[str, datetime], count: int,
               rng: random.Random) -> tuple[float, str]:
    session, at = "throughput", datetime.now(UTC) - timedelta(hours=1)
    turns = [turn(session, i, script(rng, i), at) for i in range(count)]
    for t in turns:
        said[t["text"]] = at
    began = time.perf_counter()
    for start in range(0, count, 50):
        api.ingest(turns[start:start + 50])
    accepted = time.perf_counter() - began
    wait_applied(settings, session, count, began)
    elapsed = time.perf_counter() - began
    return count / elapsed, f"{count} turns accepted in {accepted:.1f} s, all visible after {elapsed:.1f} s"


def latency(api: Server, settings: Settings, said: dict[str, datetime], rate: float,
            seconds: float) -> tuple[list[float], float]:
    session = "latency"
    sent: dict[str, float] = {}
    seen: dict[str, float] = {}
    stop = threading.Event()

    def watch() -> None:
        with admin_database(settings).connect(autocommit=True) as conn:
            while not stop.is_set() or len(seen) < len(sent):
                for turn_id, at in applied(conn, settings.read_schema, session).items():
                    seen.setdefault(turn_id, at)
                if stop.is_set() and time.perf_counter() - stopped > 60:
                    return
                time.sleep(0.01)

    stopped = float("inf")
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    began = time.perf_counter()
    count = int(rate * seconds)
    senders = 8  # one caller cannot keep a steady rate when a call takes longer than its share

    def send(offset: int) -> None:
        with Client(api.url, api.key, timeout=60) as own:
            for i in range(offset, count, senders):
                time.sleep(max(0.0, began + i / rate - time.perf_counter()))
                at = datetime.now(UTC)
                t = turn(session, i, script(random.Random(i), 100_000 + i), at)
                said[t["text"]] = at
                own.ingest([t])
                sent[str(i)] = time.perf_counter()

    threads = [threading.Thread(target=send, args=(o,)) for o in range(senders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    achieved = len(sent) / (time.perf_counter() - began)
    stopped = time.perf_counter()
    stop.set()
    watcher.join(timeout=90)
    return [seen[k] - sent[k] for k in sent if k in seen], achieved


def hint_shares(settings: Settings) -> tuple[int, dict[str, int]]:
    """How many candidates were decided by the hint, the resolver or the turn's own time."""
    from domain.ingestion import Ingestion
    from services.factory import create_app

    app = create_app(settings)
    try:
        counts: dict[str, int] = {"hint": 0, "resolver": 0, "turn": 0}
        with admin_database(settings).connect(autocommit=True) as conn:
            ids = [row[0] for row in conn.execute(
                f"SELECT ingestion_id FROM {settings.read_schema}.ingestions WHERE tenant_id = %s",
                (TENANT,)).fetchall()]
        for ingestion_id in ids:
            for candidate in app.load(TENANT, ingestion_id, Ingestion).candidates:
                counts[candidate["time"]["source"]] += 1
        return sum(counts.values()), counts
    finally:
        app.close()


def cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds so far of ``serve`` and of each of its children, by what they run."""
    import psutil

    server = psutil.Process(pid)
    found = {"serve (HTTP, relays, commands)": sum(server.cpu_times()[:2])}
    for child in server.children(recursive=True):
        try:
            line = " ".join(child.cmdline())
            times = child.cpu_times()
        except psutil.Error:
            continue
        name = ("projector (+ embeddings)" if line.endswith(" project") else
                "extraction worker" if "ingest-worker" in line else
                "broker" if "tansu" in line else "HTTP workers" if "api-worker" in line else "other")
        found[name] = found.get(name, 0.0) + times.user + times.system
    return found


@dataclass
class Figures:
    rate: float
    phase: str
    cpu: dict[str, float]
    transactions: float
    events: float
    lags: list[float]
    achieved: float
    calls: int
    turns: int
    shares: tuple[int, dict[str, int]]


def measure(folder: Path, args: argparse.Namespace, source: Path | None) -> Figures:
    """The figures of ``serve`` run from ``source`` (None: this tree) in ``folder``."""
    rng, said = random.Random(20261201), dict[str, datetime]()
    folder.mkdir(parents=True, exist_ok=True)
    settings = Settings(data_dir=folder / "data", auto_bootstrap=False)
    extra = {"PYTHONPATH": str(source)} if source is not None else {}
    try:
        with FakeOpenAIServer() as llm:
            llm.responder = responder(said)
            server = start_server(folder, folder / "serve.log", {
                "PALIMPSEST_LLM_BASE_URL": llm.base_url, "PALIMPSEST_LLM_MODEL": "scripted", **extra})
            try:
                print(f"  serve at {server.url} (pid {server.process.pid}), scripted LLM at "
                      f"{llm.base_url}", flush=True)
                with Client(server.url, server.key, timeout=60) as api:
                    api.ingest([turn("warmup", 0, "I start at the new job tomorrow (#warmup)",
                                     datetime.now(UTC))])
                    wait_applied(settings, "warmup", 1, time.perf_counter())
                    warm = len(llm.chat_requests)
                    before, (events, transactions) = cpu_seconds(server.process.pid), stored(settings)
                    rate, phase = throughput(api, settings, said, args.turns, rng)
                    after, (events_after, transactions_after) = (cpu_seconds(server.process.pid),
                                                                 stored(settings))
                print(f"  {phase}", flush=True)
                with admin_database(settings).connect(autocommit=True) as conn:
                    conn.execute("ANALYZE")  # as autovacuum would have by now, had it run
                lags, achieved = latency(server, settings, said, args.rate, args.seconds)
                calls = len(llm.chat_requests) - warm
                shares = hint_shares(settings)
            finally:
                print(f"  serve stopped by SIGINT in {stop_server(server):.1f} s", flush=True)
    finally:
        release_embedded(folder / "data")
    return Figures(
        rate=rate, phase=phase, cpu={name: (after[name] - before.get(name, 0.0)) * 1000 / args.turns
                                     for name in after},
        transactions=(transactions_after - transactions) / args.turns,
        events=(events_after - events) / args.turns, lags=lags, achieved=achieved, calls=calls,
        turns=args.turns + len(lags), shares=shares)


def source_tree(ref: str, into: Path) -> Path:
    """The files of commit ``ref`` of this repository, unpacked into ``into``."""
    archive = subprocess.run(["git", "archive", "--format=tar", ref], cwd=REPOSITORY,
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def report(name: str, figures: Figures, args: argparse.Namespace) -> None:
    print(f"{name}:")
    print(f"  turns end to end (accepted → cards visible), {args.turns} turns: "
          f"{figures.rate:,.1f} turns/s ({figures.phase})")
    print(f"  event-store transactions per turn over that phase: {figures.transactions:.2f} "
          f"({figures.events:.1f} events per turn)")
    print("  CPU per turn over that phase: " + ", ".join(
        f"{name} {ms:.1f} ms" for name, ms in figures.cpu.items())
        + " (PostgreSQL's own processes not counted)")
    if figures.lags:
        ms = [lag * 1000 for lag in figures.lags]
        print(f"  turn → cards visible at {figures.achieved:.0f} turns/s: p50 "
              f"{statistics.median(ms):,.0f} ms, p95 {nearest_rank(ms):,.0f} ms ({len(ms)} turns)")
    print(f"  LLM calls per turn: {figures.calls / figures.turns:.2f} ({figures.calls} calls, "
          f"{figures.turns} turns)")
    total, shares = figures.shares
    print(f"  time decisions over {total} candidates: " + ", ".join(
        f"{name} {count / max(total, 1):.0%}" for name, count in shares.items())
          + " (turn = fell back to the turn's own time; resolver = the hint was overruled)")


def run(folder: Path, args: argparse.Namespace) -> None:
    runs: dict[str, Figures] = {}
    if args.baseline != "none":
        print(f"baseline: serve of {args.baseline}", flush=True)
        runs[f"baseline ({args.baseline})"] = measure(
            folder / "baseline", args, source_tree(args.baseline, folder / "baseline-source"))
    print("this tree:", flush=True)
    runs["this tree"] = measure(folder / "this-tree", args, None)
    print()
    for name, figures in runs.items():
        report(name, figures, args)
    if len(runs) == 2:
        base, now = runs.values()
        print(f"turns/s: {now.rate:,.1f} beside {base.rate:,.1f} in the same run "
              f"({now.rate / base.rate:.2f}×); event-store transactions per turn "
              f"{now.transactions:.2f} beside {base.transactions:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=1_000)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--baseline", default=BASELINE,
                        help=f"the commit measured beside this tree (default {BASELINE}); none: skip it")
    parser.add_argument("--data-dir", type=Path, help="default: a temporary folder, removed at the end")
    parser.add_argument("--keep", action="store_true", help="keep the temporary data folder")
    args = parser.parse_args()
    with bench_folder(args.data_dir, args.keep, "palimpsest-bench-ingest-") as folder:
        run(folder, args)


if __name__ == "__main__":
    main()
