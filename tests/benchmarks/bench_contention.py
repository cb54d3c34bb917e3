"""Writers hammering one slot, on the embedded PostgreSQL (RELIABILITY: "Four writers hammering one
slot → no retry error reaches a caller; one pending arbitration case per slot").

    .venv/bin/python -m tests.benchmarks.bench_contention [--writers 4] [--writes 10] [--rounds 3]

``--writers`` processes (each its own application, as separate API workers would be), then as many
threads of one process sharing one application, each write ``--writes`` different addresses to
the same tenant's ``user/address`` as fast as they can, all starting together. For each way of
settling a lost race it prints, summed over ``--rounds`` rounds (a fresh tenant each): the calls,
the errors that reached a caller, the races lost (each a reload and a second decision), p50 / p95 /
max latency per call, and what the slot holds after: valid cards, pending cases, proposals.

- ``retry``: reload and decide again at once, up to 3 times (the landed behaviour);
- ``jitter``: up to 10 times, after a random pause growing from 5 ms to at most 50 ms;
- ``lock``: every save holds the changed aggregates' advisory locks (``services.command.locks``), up to 3
  retries after a race lost all the same, after a jittered pause (the default);
- ``lock-no-jitter``: the same without the pause.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import uuid4

from eventsourcing.persistence import IntegrityError

from domain.errors import PalimpsestError
from domain.slot import Slot
from infra.postgres import admin_database, bootstrap, stop_embedded
from infra.settings import Settings
from services.command.keyed_ids import ids_key
from services.command.memory import Palimpsest
from services.factory import create_app
from tests.benchmarks.folders import bench_folder
from tests.support import state

#: name → (conflict_retries, conflict_lock, conflict_backoff in seconds)
OPTIONS: dict[str, tuple[int, bool, float]] = {
    "retry": (3, False, 0.0),
    "jitter": (10, False, 0.05),
    "lock": (3, True, 0.05),
    "lock-no-jitter": (3, True, 0.0),
}


class CountingApp(Palimpsest):
    """Counts the races it loses; its knobs come from the option it is made for."""

    option = "retry"

    def __init__(self, **kwargs: Any) -> None:
        retries, lock, backoff = OPTIONS[self.option]
        kwargs["conflict_retries"] = retries
        super().__init__(**kwargs, conflict_lock=lock, conflict_backoff=backoff)
        self.lost = 0

    def _save(self, aggregates: Any) -> Any:
        try:
            return super()._save(aggregates)
        except IntegrityError:
            self.lost += 1
            raise


def app_for(settings: Settings, option: str) -> CountingApp:
    cls = type(f"App_{option}", (CountingApp,), {"option": option})
    return create_app(settings, app_class=cls)  # type: ignore[return-value]


@dataclass
class Calls:
    latencies: list[float]
    errors: list[str]
    lost: int = 0


def writes(app: CountingApp, tenant: str, writer: int, count: int, start: Any) -> Calls:
    calls = Calls([], [])
    start.wait()
    for i in range(count):
        began = time.perf_counter()
        try:
            app.remember(tenant, state("address", f"City {writer}-{i}"))
        except PalimpsestError as error:
            calls.errors.append(type(error).__name__)
        calls.latencies.append(time.perf_counter() - began)
    return calls


def process_writer(dsn: str, option: str, tenant: str, writer: int, count: int, start: Any,
                   out: Any) -> None:
    app = app_for(Settings(persistence="postgres", database_url=dsn, auto_bootstrap=False), option)
    try:
        calls = writes(app, tenant, writer, count, start)
        out.put((calls.latencies, calls.errors, app.lost))
    except BaseException as error:  # the parent waits for every writer: tell it
        out.put(([], [f"crashed: {error!r}"], app.lost))
        raise
    finally:
        app.close()


def in_processes(dsn: str, option: str, tenant: str, writers: int, count: int) -> list[Calls]:
    context = multiprocessing.get_context("spawn")
    start, out = context.Barrier(writers), context.Queue()
    children = [context.Process(target=process_writer, args=(dsn, option, tenant, w, count, start, out))
                for w in range(writers)]
    for child in children:
        child.start()
    results = [Calls(latencies, errors, lost) for latencies, errors, lost in
               (out.get(timeout=300) for _ in children)]
    for child in children:
        child.join(timeout=60)
    return results


def in_threads(settings: Settings, option: str, tenant: str, writers: int, count: int) -> list[Calls]:
    app = app_for(settings, option)
    start = threading.Barrier(writers)
    results: list[Calls] = []
    threads = [threading.Thread(target=lambda w=w: results.append(writes(app, tenant, w, count, start)))
               for w in range(writers)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        results[0].lost = app.lost  # one application: its count is every thread's
        return results
    finally:
        app.close()


def slot_after(settings: Settings, tenant: str) -> tuple[int, int, int]:
    app = create_app(settings)
    try:
        slot_id = Slot.create_id(ids_key(app.keyring, tenant), tenant,
                                 state("address", "x").parsed_scope(), "user", "address")
        slot = app.load(tenant, slot_id, Slot)
        return (len(slot.current_cards), len(slot.pending),
                sum(len(proposals) for proposals in slot.pending.values()))
    finally:
        app.close()


def report(option: str, mode: str, rounds: list[tuple[list[Calls], tuple[int, int, int]]]) -> None:
    latencies = sorted(t * 1000 for calls, _ in rounds for c in calls for t in c.latencies)
    errors = sum(len(c.errors) for calls, _ in rounds for c in calls)
    lost = sum(c.lost for calls, _ in rounds for c in calls)
    p95 = latencies[int(0.95 * (len(latencies) - 1))]
    after = "  ".join(f"{v}/{p}/{n}" for _, (v, p, n) in rounds)
    kinds = sorted({e for calls, _ in rounds for c in calls for e in c.errors})
    if kinds:
        after += f"   errors: {', '.join(kinds)}"
    print(f"{option:<14} {mode:<10} {len(latencies):>5} {errors:>6} {lost:>6} "
          f"{statistics.median(latencies):>7.1f} {p95:>7.1f} {latencies[-1]:>7.1f}   {after}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--writes", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--options", default=",".join(OPTIONS))
    args = parser.parse_args()
    with bench_folder(None, False, "palimpsest-contention-") as folder:
        run(folder / "data", args)


def run(data_dir: Path, args: argparse.Namespace) -> None:
    settings = Settings(persistence="postgres", data_dir=data_dir, auto_bootstrap=False)
    admin = admin_database(settings)
    try:
        bootstrap(admin, settings)
        dsn = f"host={admin.host} port={admin.port} dbname={admin.dbname} user={admin.user}"
        print(f"{args.writers} writers × {args.writes} writes to one slot, {args.rounds} rounds; "
              "latency in ms; after each round: valid cards/pending cases/proposals")
        print(f"{'option':<14} {'writers':<10} {'calls':>5} {'errors':>6} {'lost':>6} "
              f"{'p50':>7} {'p95':>7} {'max':>7}   slot after")
        for option in args.options.split(","):
            for mode in ("processes", "threads"):
                rounds = []
                for _ in range(args.rounds):
                    tenant = f"bench-{uuid4().hex[:8]}"
                    calls = (in_processes(dsn, option, tenant, args.writers, args.writes)
                             if mode == "processes" else
                             in_threads(settings, option, tenant, args.writers, args.writes))
                    rounds.append((calls, slot_after(settings, tenant)))
                report(option, mode, rounds)
    finally:
        stop_embedded(data_dir)


if __name__ == "__main__":
    main()
