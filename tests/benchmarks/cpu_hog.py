"""A bounded busy loop on every core, to measure the read path on a busy machine.

    .venv/bin/python -m tests.benchmarks.cpu_hog [--seconds 300] [--processes N]

Each process spins (a tight arithmetic loop) until the time is up; Ctrl-C stops them all.
``bench_retrieval --hog`` starts the same beside its queries.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time


def spin(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    x = 0
    while time.monotonic() < deadline:
        for i in range(10_000):
            x = (x * 31 + i) % 1_000_003


def start(seconds: float, processes: int | None = None) -> list[multiprocessing.Process]:
    """Start ``processes`` spinning processes (one per core by default) for ``seconds``."""
    hogs = [multiprocessing.Process(target=spin, args=(seconds,), daemon=True)
            for _ in range(processes or os.cpu_count() or 1)]
    for hog in hogs:
        hog.start()
    return hogs


def stop(hogs: list[multiprocessing.Process]) -> None:
    for hog in hogs:
        hog.terminate()
    for hog in hogs:
        hog.join(timeout=5)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--processes", type=int, default=None)
    args = parser.parse_args()
    hogs = start(args.seconds, args.processes)
    try:
        for hog in hogs:
            hog.join()
    except KeyboardInterrupt:
        stop(hogs)


if __name__ == "__main__":
    main()
