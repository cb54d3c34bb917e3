"""What sealing personal fields costs (decision 0012): writes/s, replay events/s and bytes per
event, sealed against unsealed, in one run on the embedded PostgreSQL (two event stores side by
side in one server: ``events_sealed`` and ``events_unsealed``).

    .venv/bin/python -m tests.benchmarks.bench_sealing [--writes 2000] [--clients 4] [--rounds 3] [--json]

Each round writes ``--writes`` ``remember`` calls with ``--clients`` threads through an
application with sealing on and one with it off (alternating which goes first), each card in a
slot of its own — the costliest case: every write makes two data keys, its slot's and its card's —
then decodes the events each wrote through a fresh event log (a cold key cache, as a rebuild
starts). At the end each store's whole log is rebuilt into fresh read models in this process
(``rebuild``, one worker): decoding, folding, writing the tables — the replay a user waits for.
Figures are the median of the rounds; the ratio is sealed / unsealed (goal: within 10 %).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any
from uuid import uuid4

from infra.eventlog import open_event_log
from infra.postgres import admin_database, bootstrap, stop_embedded
from infra.settings import Settings
from projections.replay import rebuild
from services.factory import create_app
from tests.benchmarks.bench_commands import run_threads
from tests.benchmarks.folders import bench_folder
from tests.support import state


def write(settings: Settings, sealed: bool, clients: int, writes: int) -> tuple[float, int, int]:
    """(writes/s, first and last notification id written)."""
    app = create_app(settings)
    tenant = f"bench-{uuid4().hex[:8]}"
    try:
        app.remember(tenant, state("warm", "up"))
        first = (app.recorder.max_notification_id() or 0) + 1
        began = time.perf_counter()
        run_threads(clients, writes, lambda c, i: app.remember(tenant, state(
            f"label {i}", f"lives in city number {i}, near the river", subject=f"person {i % 50}")))
        elapsed = time.perf_counter() - began
        last = app.recorder.max_notification_id() or 0
    finally:
        app.close()
    return writes / elapsed, first, last


def replay(settings: Settings, sealed: bool, first: int, last: int) -> tuple[float, float]:
    """(events decoded per second, mean stored bytes per event) of ids first..last."""
    log = open_event_log(settings)
    try:
        stored = log.recorder.select_notifications(start=first, limit=last - first + 1, stop=last)
        began = time.perf_counter()
        for notification in stored:
            log.mapper.to_domain_event(notification)
        elapsed = time.perf_counter() - began
    finally:
        log.close()
    return len(stored) / elapsed, statistics.fmean(len(n.state) for n in stored)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--writes", type=int, default=2_000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args()
    with bench_folder(None, False, "palimpsest-sealing-") as folder:
        figures = run(folder / "data", args)
    if args.json:
        print(json.dumps(figures))


def stores(data_dir: Path) -> dict[bool, Settings]:
    """The sealed and the unsealed store's settings: one server, two event and read schemas."""
    return {sealed: Settings(persistence="postgres", data_dir=data_dir, auto_bootstrap=False,
                             seal_events=sealed, event_schema=f"events_{name}",
                             read_schema=f"read_{name}")
            for sealed, name in ((True, "sealed"), (False, "unsealed"))}


def rebuilt(settings: Settings) -> float:
    """Events per second of a rebuild of the store's whole log, in this process."""
    app = create_app(settings)
    try:
        return rebuild(settings, app, into=f"{settings.read_schema}_rebuilt", workers=1).rate
    finally:
        app.close()


def run(data_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    settings_of = stores(data_dir)
    try:
        for settings in settings_of.values():
            bootstrap(admin_database(settings), settings)
        measured: dict[bool, dict[str, list[float]]] = {
            s: {"writes_per_s": [], "replay_per_s": [], "bytes_per_event": []} for s in (True, False)}
        for round_ in range(args.rounds):
            for sealed in ((True, False) if round_ % 2 == 0 else (False, True)):
                rate, first, last = write(settings_of[sealed], sealed, args.clients, args.writes)
                decoded, size = replay(settings_of[sealed], sealed, first, last)
                for name, value in (("writes_per_s", rate), ("replay_per_s", decoded),
                                    ("bytes_per_event", size)):
                    measured[sealed][name].append(value)
                print(f"round {round_ + 1} {'sealed  ' if sealed else 'unsealed'}: {rate:7.0f} writes/s, "
                      f"{decoded:8.0f} events/s decoded, {size:6.0f} bytes/event", flush=True)
        for sealed in (True, False):
            measured[sealed]["rebuild_per_s"] = [rebuilt(settings_of[sealed])]
            print(f"rebuild {'sealed  ' if sealed else 'unsealed'}: "
                  f"{measured[sealed]['rebuild_per_s'][0]:8.0f} events/s", flush=True)
    finally:
        stop_embedded(data_dir)
    figures: dict[str, Any] = {"writes": args.writes, "clients": args.clients, "rounds": args.rounds}
    for name in ("writes_per_s", "replay_per_s", "rebuild_per_s", "bytes_per_event"):
        on, off = (statistics.median(measured[s][name]) for s in (True, False))
        figures[name] = {"sealed": round(on, 1), "unsealed": round(off, 1), "ratio": round(on / off, 3)}
        print(f"{name:<16} sealed {on:9.1f}  unsealed {off:9.1f}  sealed/unsealed {on / off:.3f}")
    return figures


if __name__ == "__main__":
    main()
