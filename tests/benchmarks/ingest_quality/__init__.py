"""The ingest-quality benchmark: how well raw conversation turns become slots through the ingest
path — turn → extraction model (the ``openai`` client at ``PALIMPSEST_LLM_BASE_URL``) → candidates
→ ``Remember`` commands → slots — measured against hand-written ground truth, with any
OpenAI-compatible model (issue 21).

    .venv/bin/python -m tests.benchmarks.ingest_quality [--split dev|test|both]
        [--model scripted|URL] [--llm-model NAME] [--record PATH] [--replay PATH]
        [--checkout PATH] [--conversations N] [--json] [--data-dir PATH] [--keep]
    palimpsest bench ingest-quality …      (the same, from a checkout with the dev extra)
    make bench-ingest-quality

It starts ``palimpsest serve`` on the embedded default in a throwaway folder, with a recording
proxy (:mod:`proxy`) between it and the model: the real endpoint, the scripted stand-in
(:mod:`scripted`) or a recording. Each conversation (:mod:`dataset`) gets a tenant and a key of its
own; its turns are handed over through the ingest endpoint (:mod:`drive`), and once every turn is
applied or dead-lettered its cards are read back over REST and scored (:mod:`metrics`, pure) and
reported (:mod:`report`): slot precision and recall, the "two cities" count, split facts,
supersessions, multi-value completeness, time anchoring, not_facts stored, and turns per second,
model calls and tokens per turn, dead letters. The dev split is for development; the test split
is frozen and nothing is tuned on it.
"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (see :mod:`tests.benchmarks.ingest_quality.run`)."""
    from tests.benchmarks.ingest_quality.run import main as run

    return run(argv)
