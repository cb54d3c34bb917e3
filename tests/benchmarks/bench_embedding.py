"""The offline encoder's throughput by batch size and BLAS threads: texts a second, and texts a
second per core of CPU it used, beside one text a call in the same run.

    .venv/bin/python -m tests.benchmarks.bench_embedding [--texts 512] [--sizes 1,2,4,8,16,32,64]
        [--threads 1,2] [--json]

The texts are the retrieval benchmark's cards (``tests.benchmarks.bench_retrieval``'s templates:
mixed Chinese / English, a few words to a sentence). Each (threads, batch size) pair embeds the same
texts in batches of that size, after a warm-up, in a process of its own (BLAS threads are fixed
for a process once numpy has run on them); CPU time is the process's user + system time.
``--json`` prints one JSON object last: ``{"threads": {"1": {"1": {"texts_per_s",
"texts_per_cpu_s"}, …}, …}}``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import time
from typing import Any


def measure(threads: int, size: int, texts: list[str]) -> dict[str, float]:
    from infra.embedders import UniversalSentenceEmbedder, limit_blas_threads

    limit_blas_threads(threads)
    embedder = UniversalSentenceEmbedder(threads)
    embedder.embed(texts[:size])  # the model loads and warms up outside the figure
    cpu, started = os.times(), time.perf_counter()
    for start in range(0, len(texts), size):
        embedder.embed(texts[start:start + size])
    wall = time.perf_counter() - started
    used = os.times()
    seconds = (used.user - cpu.user) + (used.system - cpu.system)
    return {"texts_per_s": round(len(texts) / wall, 1),
            "texts_per_cpu_s": round(len(texts) / max(seconds, 1e-9), 1)}


def _run(args: tuple[int, int, list[str]]) -> dict[str, float]:
    return measure(*args)


def corpus(count: int) -> list[str]:
    from tests.benchmarks.bench_retrieval import base_texts

    texts = base_texts()
    return [texts[(i * 7919) % len(texts)] + (f" ({i})" if i >= len(texts) else "")
            for i in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--texts", type=int, default=512)
    parser.add_argument("--sizes", default="1,2,4,8,16,32,64")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    args = parser.parse_args()
    texts = corpus(args.texts)
    sizes = [int(s) for s in args.sizes.split(",")]
    figures: dict[str, dict[str, Any]] = {}
    context = multiprocessing.get_context("spawn")
    print(f"{len(texts)} texts, {os.cpu_count()} CPUs; each figure in a process of its own")
    print("threads  batch   texts/s   texts/CPU-s   × one a call")
    for threads in (int(t) for t in args.threads.split(",")):
        row: dict[str, Any] = {}
        for size in sizes:
            with context.Pool(1) as pool:
                row[str(size)] = pool.apply(_run, ((threads, size, texts),))
            one = row[str(sizes[0])]["texts_per_s"]
            print(f"{threads:>7} {size:>6} {row[str(size)]['texts_per_s']:>9,.0f} "
                  f"{row[str(size)]['texts_per_cpu_s']:>13,.0f} {row[str(size)]['texts_per_s'] / one:>12.1f}",
                  flush=True)
        figures[str(threads)] = row
    if args.json:
        print(json.dumps({"threads": figures, "texts": len(texts), "cpus": os.cpu_count()}))


if __name__ == "__main__":
    main()
