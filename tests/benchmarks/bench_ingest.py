"""Ingest through ``palimpsest serve`` with a scripted LLM answering at once (``make bench-ingest``).

    .venv/bin/python -m tests.benchmarks.bench_ingest [--turns 1000] [--rate 50] [--seconds 20]
        [--data-dir PATH] [--keep]

Starts ``palimpsest serve`` on the embedded default in a throwaway folder with
``PALIMPSEST_LLM_BASE_URL`` pointing at a local OpenAI-compatible server in this process
(``tests.fakes.openai_server``) that answers every chat completion at once with one candidate card
per turn, then:

- throughput: ``--turns`` turns of 20 conversations handed over in batches of 50 over REST as
  fast as the server takes them; turns per second from the first call to the last turn's cards
  visible in the read models (its ``ingestions`` row reads ``applied``: the Applied event is
  recorded after the turn's cards, and a tenant's events are projected in log order);
- latency: turns one per call at a steady ``--rate`` turns/s for ``--seconds``; each turn from its
  accepted answer to its cards visible (the read models polled every 10 ms), p50 / p95;
- LLM calls per turn (the scripted server's count / turns), and the share of time hints that fell
  back to the turn's own time or were overruled by the resolver, read from the recorded
  extractions. The script is deliberately mixed — most turns carry no time word and get no hint,
  some say 昨天 / yesterday with a right hint, some say 三天前 with a wrong one — so the shares show
  the validation at work on that mix, not a model's quality.
"""

from __future__ import annotations

import argparse
import random
import statistics
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from palimpsest_client import Client

from infra.postgres import admin_database
from infra.settings import Settings
from services.query.retrieval.breaker import nearest_rank
from tests.benchmarks.bench_api import TENANT, Server, start_server, stop_server
from tests.benchmarks.folders import bench_folder
from tests.fakes.openai_server import FakeOpenAIServer, Reply

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
#: side by side: one session alone would measure one worker thread).
SESSIONS = 20


def applied(conn: psycopg.Connection[Any], schema: str, phase: str) -> dict[str, float]:
    rows = conn.execute(
        f"SELECT turn_id FROM {schema}.ingestions WHERE tenant_id = %s AND session_id LIKE %s "
        "AND status = 'applied'", (TENANT, phase + "-%")).fetchall()
    return {row[0]: time.perf_counter() for row in rows}


def throughput(api: Client, settings: Settings, said: dict[str, datetime], count: int,
               rng: random.Random) -> float:
    session, at = "throughput", datetime.now(UTC) - timedelta(hours=1)
    turns = [turn(session, i, script(rng, i), at) for i in range(count)]
    for t in turns:
        said[t["text"]] = at
    began = time.perf_counter()
    for start in range(0, count, 50):
        api.ingest(turns[start:start + 50])
    accepted = time.perf_counter() - began
    with admin_database(settings).connect(autocommit=True) as conn:
        while len(applied(conn, settings.read_schema, session)) < count:
            if time.perf_counter() - began > 900:
                raise SystemExit("the turns were not applied within 15 minutes")
            time.sleep(0.05)
    elapsed = time.perf_counter() - began
    print(f"  {count} turns accepted in {accepted:.1f} s, all applied and visible after "
          f"{elapsed:.1f} s", flush=True)
    return count / elapsed


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
    i = len(sent)
    achieved = i / (time.perf_counter() - began)
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
                "broker" if "tansu" in line else "other")
        found[name] = found.get(name, 0.0) + times.user + times.system
    return found


def run(folder: Path, args: argparse.Namespace) -> None:
    rng = random.Random(20261201)
    said: dict[str, datetime] = {}
    settings = Settings(data_dir=folder / "data", auto_bootstrap=False)
    with FakeOpenAIServer() as llm:
        llm.responder = responder(said)
        server = start_server(folder, folder / "serve.log", {
            "PALIMPSEST_LLM_BASE_URL": llm.base_url, "PALIMPSEST_LLM_MODEL": "scripted"})
        try:
            print(f"serve at {server.url} (pid {server.process.pid}), scripted LLM at {llm.base_url}",
                  flush=True)
            with Client(server.url, server.key, timeout=60) as api:
                before = cpu_seconds(server.process.pid)
                rate = throughput(api, settings, said, args.turns, rng)
                after = cpu_seconds(server.process.pid)
            lags, achieved = latency(server, settings, said, args.rate, args.seconds)
            turns = args.turns + len(lags)
            calls = len(llm.chat_requests)
            total, shares = hint_shares(settings)
        finally:
            took = stop_server(server)
    print()
    print(f"turns end to end (accepted → cards visible), {args.turns} turns: {rate:,.1f} turns/s")
    print("  CPU per turn over that phase: " + ", ".join(
        f"{name} {(after[name] - before.get(name, 0.0)) * 1000 / args.turns:.1f} ms"
        for name in after) + " (PostgreSQL's own processes not counted)")
    if lags:
        ms = [lag * 1000 for lag in lags]
        print(f"turn → cards visible at {achieved:.0f} turns/s: p50 {statistics.median(ms):,.0f} ms, "
              f"p95 {nearest_rank(ms):,.0f} ms ({len(lags)} turns)")
    print(f"LLM calls per turn: {calls / turns:.2f} ({calls} calls, {turns} turns)")
    print(f"time decisions over {total} candidates: " + ", ".join(
        f"{name} {count / total:.0%}" for name, count in shares.items())
          + " (turn = fell back to the turn's own time; resolver = the hint was overruled)")
    print(f"serve stopped by SIGINT in {took:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=1_000)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--data-dir", type=Path, help="default: a temporary folder, removed at the end")
    parser.add_argument("--keep", action="store_true", help="keep the temporary data folder")
    args = parser.parse_args()
    with bench_folder(args.data_dir, args.keep, "palimpsest-bench-ingest-") as folder:
        run(folder, args)


if __name__ == "__main__":
    main()
