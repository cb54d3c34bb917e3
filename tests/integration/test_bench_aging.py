"""The aging benchmark end to end on the embedded PostgreSQL: a scripted history whose baseline
figures are computed by hand, and a tiny generated corpus; the report holds every metric for every
checkpoint and system."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest

from infra.postgres import Database
from infra.settings import Settings
from tests.benchmarks.aging import report
from tests.benchmarks.aging.generator import START, Config, Corpus, Subject, Tenant, generate
from tests.benchmarks.aging.histories import Draw
from tests.benchmarks.aging.metrics import METRICS
from tests.benchmarks.aging.personas import PROFILES
from tests.benchmarks.aging.questions import QUICK, expression_range
from tests.benchmarks.aging.records import Question
from tests.benchmarks.aging.runner import benchmark
from tests.benchmarks.aging.truth import SlotTruth

pytestmark = pytest.mark.integration

SYSTEMS = {"palimpsest", "palimpsest-unbounded-decay", "pgvector-topk", "bm25"}


def scripted(tenant: str) -> Corpus:
    """Anna: Taipei (day 0), then Tainan (day 40); Ben: Globex (day 0); Anna flies to Kyoto on day 55."""
    draw = Draw()
    anna = SlotTruth(tenant, "Anna", "home_city", "residence", "en", "single_value")
    ben = SlotTruth(tenant, "Ben", "employer", "employer", "en", "single_value")
    draw.state(anna, "Taipei", START + timedelta(hours=10))
    draw.state(ben, "Globex", START + timedelta(hours=11))
    draw.state(anna, "Tainan", START + timedelta(days=40, hours=10))
    draw.event(tenant, "Anna", "Anna flew to Kyoto for a conference", START + timedelta(days=55, hours=9),
               START + timedelta(days=55, hours=12), ("trip",))
    people = [Subject(tenant, "Anna", "en", "f"), Subject(tenant, "Ben", "en", "m")]
    slots = {(tenant, ("Anna", "home_city")): anna, (tenant, ("Ben", "employer")): ben}
    ops = sorted(draw.ops, key=lambda op: (op.at, op.ref))
    config = Config(checkpoints=(30, 60), prefix=tenant)
    return Corpus(config, [Tenant(tenant, PROFILES[1], people)], ops, slots, draw.events)


def scripted_questions(corpus: Corpus, day: int) -> list[Question]:
    tenant, now = corpus.tenants[0].tenant_id, corpus.moment(day)
    anna, ben = (corpus.slots[(tenant, key)] for key in (("Anna", "home_city"), ("Ben", "employer")))

    def ask(qid: str, kind: str, text: str, truth: SlotTruth, **extra: object) -> Question:
        return Question(qid=f"d{day}-{qid}", checkpoint=day, tenant=tenant, kind=kind, lang="en", text=text,
                        template=text, names_label=True, slot_kind=truth.kind,
                        slot=(truth.subject, truth.label), **extra)  # type: ignore[arg-type]

    asked = [ask("anna", "current", "Anna home city", anna, expected=(anna.current(now),)),
             ask("ben", "current", "Ben employer", ben, expected=(ben.current(now),))]
    if day == 60:
        then = START + timedelta(days=20, hours=12)
        asked.append(ask("anna-then", "as_of_known", "Anna home city", anna, valid_at=then, known_at=then,
                         expected=(anna.value_at(then, then),)))
        start, end = expression_range("last_week", now)
        refs = tuple(e.ref for e in corpus.events if start <= e.occurred_at < end)
        assert refs, "the Kyoto trip is last week at day 60"
        asked.append(Question(qid="d60-trip", checkpoint=day, tenant=tenant, kind="temporal", lang="en",
                              text="what did Anna do last week?", template="", names_label=False, refs=refs))
    return asked


def check_report(result: dict[str, object], out: Path, days: list[str], splits: tuple[str, ...] = ("dev",),
                 systems: set[str] = SYSTEMS) -> dict[str, Any]:
    """Every metric of every system at every checkpoint of every split, in the JSON and in the plots;
    returns the dev split's checkpoints."""
    written = report.write(result, out)  # type: ignore[arg-type]
    assert {p.name for p in written} == {"aging.json", "aging-hit1.png", "aging-leakage.png"}
    assert all(p.stat().st_size > 0 for p in written)
    loaded = json.loads((out / "aging.json").read_text())
    assert tuple(loaded["splits"]) == splits
    for split in splits:
        assert list(loaded["splits"][split]["checkpoints"]) == days
        assert set(loaded["splits"][split]["summary"]) == systems
        for day in days:
            assert set(loaded["splits"][split]["checkpoints"][day]) == systems
            for figures in loaded["splits"][split]["checkpoints"][day].values():
                assert set(METRICS) <= set(figures)
    assert {"seed", "config", "machine", "command", "date", "settings"} <= set(loaded["meta"])
    return loaded["splits"]["dev"]["checkpoints"]  # type: ignore[no-any-return]


def test_scripted_history_hand_computed(pg_settings: Settings, admin_db: Database, tmp_path: Path) -> None:
    corpus = scripted(f"aging-test-{uuid4().hex[:8]}")
    result = benchmark(corpus, pg_settings, admin_db, questions=scripted_questions, say=lambda _: None,
                       patient=True)
    assert result["disagreements"]["counts"] == {}
    figures = check_report(result, tmp_path, ["30", "60"])
    bm25 = figures["60"]["bm25"]
    # "Anna home city" ties on both Anna statements; the older (Taipei, stale) keeps its place first.
    assert bm25["current_hit1"] == 0.5 and bm25["current_hit5"] == 1.0 and bm25["leakage"] == 0.5
    assert bm25["as_of_known_hit1"] == 1.0  # on day 20 only Taipei was written
    assert bm25["temporal_recall5"] == 1.0  # three statements name Anna: the trip is among them
    assert figures["30"]["bm25"]["current_hit1"] == 1.0 and figures["30"]["bm25"]["leakage"] == 0.0
    assert figures["30"]["pgvector-topk"]["current_hit1"] == 1.0  # two statements, one per question
    assert figures["30"]["palimpsest"]["contradiction_recall"] is None  # nothing pending


def test_tiny_generated_corpus_with_its_test_split_beside_dev(pg_settings: Settings, admin_db: Database,
                                                              tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    config = Config(seed=3, tenants=1, persons=3, projects=1, checkpoints=(45, 200),
                    prefix=f"aging-{uuid4().hex[:8]}", test_tenants=2, test_persons=2)
    result = benchmark(generate(config), pg_settings, admin_db, budget=QUICK, say=lambda _: None,
                       without_lexicon=True)
    systems = SYSTEMS | {"palimpsest-no-lexicon"}
    figures = check_report(result, tmp_path, ["45", "200"], ("dev", "test"), systems)
    assert result["corpus"]["writes"] > 100  # type: ignore[index]
    assert all(figures[day]["bm25"]["questions"] > 20 for day in ("45", "200"))
    test = result["splits"]["test"]["checkpoints"]  # type: ignore[index]
    assert all(test[day]["palimpsest"]["questions"] > 5 for day in ("45", "200"))
    assert "a user's" in result["meta"]["settings"]  # type: ignore[index]
    report.print_summary(result)  # type: ignore[arg-type]
    printed = capsys.readouterr().out
    for name in ("palimpsest", "palimpsest-no-lexicon"):
        assert f"{name} · dev" in printed and f"{name} · test" in printed
