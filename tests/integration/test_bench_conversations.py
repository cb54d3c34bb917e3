"""The conversation-recall benchmark end to end (``palimpsest bench conversations``: a throwaway
``serve`` on the embedded default, the turns through ``POST /v1/ingest``, the questions through
``POST /v1/search``) on a tiny dataset in LoCoMo's format written here, whose evidence is known; and
its pure parts: the evidence ids, the split, BM25 and the figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks.conversations import dataset
from tests.benchmarks.conversations.baselines import BM25
from tests.benchmarks.conversations.metrics import Answer, by_category, session_recall_any, turn_recall
from tests.benchmarks.conversations.report import Report, table

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
FILLER = ("I had a quiet day at home reading.", "Work was busy, lots of meetings today.",
          "The weather turned cold this week.", "We watched a film on the couch.",
          "I cooked soup for dinner.", "Nothing much new, just the usual routine.")


def session(speakers: tuple[str, str], number: int, said: list[str], extra: dict[int, dict[str, str]]
            ) -> list[dict[str, str]]:
    """A session of ``said`` turns, then filler, speakers alternating; ``extra`` adds fields by turn."""
    texts = said + list(FILLER)
    return [{"speaker": speakers[i % 2], "dia_id": f"D{number}:{i + 1}", "text": text, **extra.get(i, {})}
            for i, text in enumerate(texts)]


def conversation(sample: str, speakers: tuple[str, str], sessions: list[list[str]],
                 qa: list[dict[str, Any]], photos: dict[tuple[int, int], str] | None = None
                 ) -> dict[str, Any]:
    body: dict[str, Any] = {"speaker_a": speakers[0], "speaker_b": speakers[1]}
    for n, said in enumerate(sessions, start=1):
        extra = {i: {"img_url": "https://example.invalid/p.jpg", "blip_caption": caption}
                 for (s, i), caption in (photos or {}).items() if s == n}
        body[f"session_{n}_date_time"] = f"1:{10 + n} pm on {n + 7} May, 2023"
        body[f"session_{n}"] = session(speakers, n, said, extra)
    body[f"session_{len(sessions) + 1}_date_time"] = "9:00 am on 1 June, 2023"  # a date, no turns
    return {"sample_id": sample, "conversation": body, "qa": qa}


DATA = [
    conversation("conv-b", ("Ada", "Bo"), [
        ["Hi Bo, how was your weekend?", "Great, I went kayaking on the Tamsui river with my cousin.",
         "I adopted a kitten called Pepper."],
        ["My sister Clara opened a bakery in Porto.", "I finished the Berlin marathon in four hours."],
        ["I am learning the cello at the conservatory.", "Lovely, music suits you."],
    ], [
        {"question": "When did Bo finish the Berlin marathon?", "answer": "May 2023",
         "evidence": ["D2:2"], "category": 2},
        {"question": "Which relatives did Bo mention, the cousin and the sister?", "answer": "x",
         "evidence": ["D1:2; D2:1"], "category": 1},
        {"question": "What instrument is Ada learning at the conservatory?", "answer": "cello",
         "evidence": ["D:3:1"], "category": 4},
        {"question": "Which grey cat sleeps on the sofa?", "answer": "Pepper",
         "evidence": ["D01:03"], "category": 3},
        {"question": "Did Bo win the lottery?", "adversarial_answer": "no", "evidence": ["D30:05"],
         "category": 5},
    ], photos={(1, 2): "a photo of a small grey cat asleep on a sofa"}),
    conversation("conv-a", ("Chen", "Dora"), [
        ["I started a new job at the observatory in Hualien.", "Congratulations, Chen!"],
        ["Dora, my telescope arrived yesterday.", "Show me Saturn sometime."],
    ], [
        {"question": "Where is Chen's new job?", "answer": "observatory", "evidence": ["D1:1"],
         "category": 4},
        {"question": "zzqx vvbn", "answer": "none", "evidence": ["D2:1"], "category": 4},
    ]),
]


def test_the_evidence_ids_are_read_as_the_readme_says() -> None:
    assert dataset.normalised(["D8:6; D9:17", "D:11:26", "D30:05", "D", "D8:6"]) == [
        "D8:6", "D9:17", "D11:26", "D30:5"]
    read = dataset.conversation_of(DATA[0])
    assert [q.evidence for q in read.questions] == [
        ("D2:2",), ("D1:2", "D2:1"), ("D3:1",), ("D1:3",), ()]  # D30:5 names no turn: dropped
    assert len({t.session for t in read.turns}) == 3, "a date with no turns is no session"
    photo = next(t for t in read.turns if t.dia_id == "D1:3")
    assert photo.text == ("Ada: I adopted a kitten called Pepper. [shares a photo: a photo of a small "
                          "grey cat asleep on a sofa]")
    assert photo.said_at.isoformat() == "2023-05-08T13:11:00+00:00"


def test_the_split_is_fixed_by_the_sorted_ids() -> None:
    ids = ["conv-5", "conv-1", "conv-4", "conv-2", "conv-3"]
    assert dataset.in_split(ids, "dev") == ["conv-1", "conv-2", "conv-3"]
    assert dataset.in_split(ids, "test") == ["conv-4", "conv-5"]
    assert dataset.in_split(ids, "all") == sorted(ids)


def test_a_subset_is_taken_within_its_split(tmp_path: Path) -> None:
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(DATA), encoding="utf-8")
    assert [c.id for c in dataset.load(path, "all", ["conv-b"])] == ["conv-b"]
    assert [c.id for c in dataset.load(tmp_path)] == ["conv-a", "conv-b"], "the folder's one file"
    assert dataset.load(path, "test") == [], "two conversations are both dev"
    with pytest.raises(SystemExit, match="conv-a"):
        dataset.load(path, "test", ["conv-a"])


def test_bm25_ranks_the_exact_match_first_and_finds_nothing_for_unknown_words() -> None:
    index = BM25(["the cat sat", "a marathon in Berlin", "Berlin is cold, the cold city"])
    assert index.top("berlin marathon", 3) == [1, 2]
    assert index.top("zzqx", 3) == []


def test_the_figures_average_over_questions_with_evidence() -> None:
    both = Answer(1, ("D1:2", "D2:1"), ("D1:2", "D5:1", "D5:2", "D5:3", "D5:4", "D2:1"))
    assert turn_recall(both, 5) == 0.5 and turn_recall(both, 10) == 1.0
    assert session_recall_any(Answer(2, ("D3:4",), ("D1:1", "D3:9")), 5) == 1.0
    groups = by_category([both, Answer(2, ("D3:4",), ()), Answer(5, (), ("D1:1",))])
    assert groups["overall"]["turn_recall@5"] == 0.25 and groups["overall"]["empty"] == 1
    assert groups["adversarial"]["with_evidence"] == 0 and groups["adversarial"]["turn_recall@5"] is None


def test_the_table_has_a_row_per_system_in_each_group() -> None:
    report = Report("d.json", "all", ["conv-a"], 8, "use-multilingual-v3", answers={
        "palimpsest": [Answer(2, ("D1:1",), ("D1:1",), 12.0), Answer(4, ("D1:2",), (), 30.0)],
        "bm25": [Answer(2, ("D1:1",), ("D1:2", "D1:1"), 1.0), Answer(4, ("D1:2",), ("D1:2",), 1.0)]})
    lines = table(report).splitlines()
    assert "| Palimpsest (POST /v1/search) | 1.000 | 1.000 | 1.000 | 1.000 | 0 | 12.0 | 12.0 |" in lines
    assert "| BM25 over the same turns | 1.000 | 1.000 | 1.000 | 1.000 | 0 | 1.0 | 1.0 |" in lines
    overall = lines.index("categories 1–4 (2 questions with evidence of 2)")
    assert lines[overall + 3].startswith("| Palimpsest") and "| 0.500 | 0.500 |" in lines[overall + 3]
    assert " | 1 | 21.0 | 30.0 |" in lines[overall + 3], "one empty answer; p50 (median) and p95"


def test_the_benchmark_runs_end_to_end(tmp_path: Path) -> None:
    data = tmp_path / "locomo.json"
    data.write_text(json.dumps(DATA), encoding="utf-8")
    details = tmp_path / "details.jsonl"
    done = subprocess.run([sys.executable, "-m", "services.entrypoints.cli", "bench", "conversations",
                           "--dataset", str(data), "--json", "--details", str(details),
                           "--keep", str(tmp_path / "bench")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "turns ingested" in done.stderr and "serve stopped" in done.stderr
    result = json.loads(done.stdout)
    assert result["conversations"] == ["conv-a", "conv-b"] and result["turns"] == 41
    assert result["questions"] == 7 and result["run"]["unmapped_results"] == 0
    assert set(result["systems"]) == {"palimpsest", "bm25", "encoder"}
    for system in result["systems"].values():
        assert set(system) == {"overall", "multi-hop", "temporal", "open-domain", "single-hop",
                               "adversarial"}
        assert system["overall"]["questions"] == 6 and system["adversarial"]["with_evidence"] == 0
    palimpsest, bm25 = result["systems"]["palimpsest"], result["systems"]["bm25"]
    assert bm25["temporal"]["turn_recall@5"] == 1.0 and bm25["overall"]["empty"] == 1
    assert palimpsest["overall"]["empty"] == 0 and palimpsest["overall"]["p95_ms"] > 0
    assert palimpsest["temporal"]["turn_recall@10"] == 1.0

    rows = [json.loads(line) for line in details.read_text().splitlines()]
    marathon = next(r for r in rows if "marathon" in r["question"])
    assert marathon["bm25"][0] == "D2:2", "the exact match is BM25's first"
    assert "D2:2" in marathon["palimpsest"][:5]
    cat = next(r for r in rows if "grey cat" in r["question"])
    assert cat["bm25"][0] == "D1:3", "the photo's caption is ingested with its turn"
    chen = next(r for r in rows if r["question"].startswith("Where is Chen"))
    assert set(chen["palimpsest"]) <= {f"D{s}:{i}" for s in (1, 2) for i in range(1, 9)}
    assert len(chen["encoder"]) == 10
