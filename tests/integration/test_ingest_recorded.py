"""The ingest-quality benchmark through the whole pipeline — ``palimpsest serve`` on the embedded
default, the recording proxy, the ingest path, the cards read back over REST, the figures:

- the real model's recorded answers for the test split (``recorded/test-qwen15.json``) replayed:
  every turn is applied, and the "two cities" count and the ``not_facts`` stored stay at or below
  what this release measured (7 of 49 and 2 of 22; the goal is 0 for both: see
  docs/benchmarks.md for where they come from);
- the scripted model on the dev split's first three conversations: the harness itself works.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.benchmarks.ingest_quality.dataset import HERE
from tests.benchmarks.ingest_quality.report import Report
from tests.benchmarks.ingest_quality.run import benchmark, parse

pytestmark = pytest.mark.integration

RECORDED = HERE / "recorded" / "test-qwen15.json"
#: What this release measured on the recording (goal: 0 each); a change may only lower them.
TWO_CITIES, NOT_FACTS = 7, 2
RECORD_COMMAND = ("python -m tests.benchmarks.ingest_quality --model http://127.0.0.1:8767/v1 "
                  "--llm-model qwen15 --split test --record " + str(RECORDED.relative_to(HERE.parents[2])))


def run(tmp_path: Path, *args: str) -> Report:
    return benchmark(parse([*args, "--data-dir", str(tmp_path / "bench")]))


def test_the_recorded_model_on_the_test_split_leaves_no_two_cities(tmp_path: Path) -> None:
    if not RECORDED.exists():
        pytest.fail(f"{RECORDED} is missing: record the local model's answers for the test split "
                    f"(../shared/tools/local-llm build && ../shared/tools/local-llm start, then "
                    f"{RECORD_COMMAND})")
    result = run(tmp_path, "--split", "test", "--replay", str(RECORDED)).splits["test"]
    assert result.run.dead_letters == 0, "every recorded turn is applied, none dead-lettered"
    assert result.quality.recall.hit >= 28, "the recorded facts still reach their slots"
    two = {cid: q.two_cities.hit for cid, q in result.per_conversation.items() if q.two_cities.hit}
    assert result.quality.two_cities.hit <= TWO_CITIES, f"two valid values of one attribute in: {two}"
    stored = {cid: q.not_facts.hit for cid, q in result.per_conversation.items() if q.not_facts.hit}
    assert result.quality.not_facts.hit <= NOT_FACTS, f"not_facts stored in: {stored}"


def test_the_scripted_model_runs_through_the_harness(tmp_path: Path) -> None:
    report = run(tmp_path, "--split", "dev", "--conversations", "3")
    result = report.splits["dev"]
    assert len(result.per_conversation) == 3
    assert result.run.turns > 0 and result.run.dead_letters == 0
    assert result.run.calls > 0 and result.run.unknown == 0
    assert result.run.candidates > 0 and result.run.written > 0
    assert result.quality.recall.hit > 0 and result.quality.precision.total > 0
    assert result.run.turns_per_second is not None and result.run.turns_per_second > 0
