"""The conversation-recall benchmark: is the turn that answers a question found, months later?
(issue 36), on a dataset in LoCoMo's format.

    palimpsest bench conversations --dataset PATH [--conversations ID,ID] [--split dev|test|all]
        [--limit-questions N] [--json] [--details FILE] [--keep DIR]
    .venv/bin/python -m tests.benchmarks.conversations …   (the same)
    make bench-conversations ARGS="--dataset PATH …"

It starts ``palimpsest serve`` on the embedded default in a throwaway folder, with no extraction
model, hands each conversation over as one tenant's raw turns through ``POST /v1/ingest``
(:mod:`drive`: ``"Speaker: text"``, a shared photo's caption, the session's date), waits until
every turn is projected and embedded, and asks each question through ``POST /v1/search``
(``top_n`` 10, no ``as_of``), each result mapped back to its dialog id by its event card. Over the
same turn texts, in the same run, two baselines rank too (:mod:`baselines`): Okapi BM25 and the
server's encoder alone (cosine). The figures (:mod:`metrics`), per category and over categories
1–4, adversarial apart: turn recall@5/@10, session recall_any@5/@10, empty answers and the search
p50 / p95 (client side), as a table per group or one JSON object (:mod:`report`); ``--details``
writes each question with each system's ranked dialog ids, to read the misses. The dataset is
read from its path and never copied; the dev / test split over its conversations is
:mod:`dataset`'s fixed rule.
"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (see :mod:`tests.benchmarks.conversations.run`)."""
    from tests.benchmarks.conversations.run import main as run

    return run(argv)
