"""The longitudinal "aging" retrieval benchmark: does search put the *true* value first as a memory
ages, against baselines, on seeded synthetic multi-tenant histories?

    .venv/bin/python -m tests.benchmarks.aging [--seed 7] [--tenants 4] [--persons 44] [--projects 8]
        [--quick] [--out bench-results] [--data-dir PATH] [--keep] [--phrasings heldout]
        [--without-lexicon] [--patient]
    palimpsest bench aging …          (the same, from a checkout with the dev extra)
    make bench-aging

A seeded generator (:mod:`generator`, :mod:`histories`) draws a year of history in Traditional
Chinese, Simplified Chinese and English — moves, job changes, same-turn slips, flip-flops that land
in the arbitration queue, facts learned late, growing multi-value slots, events, notes,
commitments — and models its truth in plain Python (:mod:`truth`). At each checkpoint (day 0, 30,
60, 120, 240, 365) the history so far is written through the real commands on a simulated clock and
projected; then every system (:mod:`systems`: Palimpsest, Palimpsest with the old unbounded decay,
a pgvector top-k and a BM25 baseline over every statement ever written) answers the same questions
(:mod:`questions`), scored by :mod:`metrics` and reported by :mod:`report`.

Two splits are asked side by side. **dev**: the material above, which the retrieval lexicon
(``services/query/retrieval/lexicon.py``) was written against. **test** (:mod:`testsplit`, drawn by
:mod:`testcorpus`): two more tenants, English and Traditional Chinese, whose labels, values,
people (a sister, a landlord, friends by name) and question templates the lexicon was not written
from, frozen. ``--without-lexicon`` asks Palimpsest again with the lexicon off; the run uses the
settings a user runs (breakers on, default budgets) unless ``--patient``.
"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (see :mod:`tests.benchmarks.aging.run`)."""
    from tests.benchmarks.aging.run import main as run

    return run(argv)
