"""The embedded broker killed with SIGKILL under a steady stream of writes, on this machine.

    .venv/bin/python -m tests.benchmarks.bench_faults [--kills 3] [--rate 50] [--modes pipeline,split]

For each mode — ``palimpsest pipeline`` (one supervising process), and ``palimpsest relay`` +
``palimpsest project`` as separate processes — in a throwaway data folder of its own: the commands
run as processes, the benchmark writes ``--rate`` events a second through the real commands, and
kills the data folder's tansu ``--kills`` times, 5 s apart. It prints, per kill, the seconds from
the kill until the projection moves again (the first event written after the last one projected
before the kill is applied) and until the backlog written during the outage is applied; then,
over the whole stream, how many writes are missing from the read models (lost) and how many are
there twice (doubled), and how long Ctrl-C took to stop the processes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from psycopg import sql

from infra.broker_folder import embedded_brokers, read_running
from infra.embedded_pg import embedded_postmasters, stop_embedded
from infra.postgres import admin_database, bootstrap, projector_database, runtime_database
from infra.settings import Settings
from projections.status import read_status
from services.factory import create_app
from services.query.readmodels import ReadModels
from tests.integration.faults import Stream, first_move, wait_projected
from tests.support import new_tenant

COMMANDS = {"pipeline": (("pipeline",),), "split": (("relay",), ("project",))}


def spawn(folder: Path, command: tuple[str, ...]) -> subprocess.Popen[bytes]:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PALIMPSEST_")},
           "PALIMPSEST_DATA_DIR": str(folder / "data"), "PALIMPSEST_PROJECTOR_EMBEDDINGS": "false"}
    log = (folder / f"{command[0]}.log").open("ab")
    return subprocess.Popen([sys.executable, "-m", "services.entrypoints.cli", *command], env=env, stdout=log,
                            stderr=subprocess.STDOUT)


def following(settings: Settings) -> bool:
    parts = read_status(projector_database(admin_database(settings), settings), settings).liveness
    return all(p.state == "alive" for p in parts.values()) and "Kafka" in (parts["projector"].detail or "")


def measure(mode: str, kills: int, rate: float) -> dict[str, object]:
    folder = Path(tempfile.mkdtemp(prefix=f"palimpsest-faults-{mode}-"))
    settings = Settings(data_dir=folder / "data", projector_embeddings=False)
    admin = admin_database(settings)
    bootstrap(admin, settings)
    app = create_app(settings.model_copy(update={"auto_bootstrap": False}))
    reads = ReadModels(runtime_database(admin, settings), settings.read_schema)
    processes = []
    try:
        for command in COMMANDS[mode]:
            processes.append(spawn(folder, command))
            while read_running(folder / "data" / "kafka") is None:
                time.sleep(0.1)
        while not following(settings):
            time.sleep(0.2)
        stream = Stream(app, new_tenant(), period=1 / rate).start()
        time.sleep(3.0)
        rows = [kill_once(folder, reads, stream) for _ in range(kills)]
        wait_projected(reads.projected, stream.tenant, stream.stop())
        lost, doubled = count(admin, settings, stream)
        started = time.monotonic()
        for process in processes:
            process.send_signal(signal.SIGINT)
        for process in processes:
            process.wait(30)
        stopped = time.monotonic() - started
        left = embedded_brokers(folder)
        return {"mode": mode, "kills": rows, "writes": len(stream.written), "lost": lost,
                "doubled": doubled, "stop_s": stopped, "brokers_left": len(left)}
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
        reads.close()
        app.close()
        stop_embedded(folder / "data")
        assert not embedded_postmasters(folder), "a server outlived the benchmark"
        shutil.rmtree(folder, ignore_errors=True)


def kill_once(folder: Path, reads: ReadModels, stream: Stream) -> tuple[float, float]:
    """(seconds until the projection moves again, seconds until the outage's backlog is applied)."""
    running = read_running(folder / "data" / "kafka")
    assert running is not None
    killed = time.monotonic()
    os.kill(running.pid, signal.SIGKILL)
    moved = first_move(reads.projected, stream, killed, timeout=120)
    caught = wait_projected(reads.projected, stream.tenant, stream.last, timeout=120)
    time.sleep(max(0.0, 5.0 - (time.monotonic() - killed)))
    return moved - killed, caught - killed


def count(admin: object, settings: Settings, stream: Stream) -> tuple[int, int]:
    """Writes missing from the read models, and writes there more than once (each write's value is
    unique: ``skill <n>``)."""
    query = sql.SQL("SELECT content, count(*) FROM {}.cards WHERE tenant_id = %s AND kind = 'state' "
                    "GROUP BY content").format(sql.Identifier(settings.read_schema))
    with admin.connect() as conn:  # type: ignore[attr-defined]
        found = dict(conn.execute(query, (stream.tenant,)).fetchall())
    written = {f"skill {n}" for n in range(len(stream.written))}
    return len(written - set(found)), sum(c - 1 for c in found.values() if c > 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--rate", type=float, default=50.0, help="writes per second")
    parser.add_argument("--modes", default="pipeline,split")
    args = parser.parse_args(argv)
    print(f"{os.cpu_count()} cores; {args.rate:.0f} writes/s; {args.kills} broker kills per mode")
    for mode in args.modes.split(","):
        result = measure(mode, args.kills, args.rate)
        kills = result["kills"]
        assert isinstance(kills, list)
        moved, caught = [k[0] for k in kills], [k[1] for k in kills]
        print(f"\n{mode}: {result['writes']} writes across {len(kills)} kills")
        for i, (m, c) in enumerate(kills, 1):
            print(f"  kill {i}: projections moving again after {m:5.2f} s, backlog applied after {c:5.2f} s")
        print(f"  median: moving again {statistics.median(moved):.2f} s, backlog applied "
              f"{statistics.median(caught):.2f} s")
        print(f"  lost {result['lost']}, doubled {result['doubled']}; Ctrl-C stopped every process in "
              f"{result['stop_s']:.1f} s; brokers left running: {result['brokers_left']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
