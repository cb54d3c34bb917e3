"""The ingest-quality benchmark's pure parts on a hand-made conversation whose figures are computed
by hand: the metrics, the scripted model, the proxy's reading of a prompt, its recording and
replay, and the report."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks.ingest_quality import metrics, report
from tests.benchmarks.ingest_quality.dataset import TurnIndex, conversation
from tests.benchmarks.ingest_quality.metrics import Card, Quality, Ratio, RunFigures
from tests.benchmarks.ingest_quality.proxy import Proxy, Replay, Scripted, current_turn, turn_block
from tests.benchmarks.ingest_quality.scripted import ScriptedModel, answers

RAW: dict[str, Any] = {
    "id": "fx-en-01", "language": "en", "timezone": "Europe/Berlin",
    "turns": [
        {"turn_id": "t1", "role": "user", "said_at": "2026-03-02T09:15:00+01:00",
         "text": "I live in Leipzig and I code in Python."},
        {"turn_id": "t2", "role": "user", "said_at": "2026-03-05T10:00:00+01:00",
         "text": "Anna works at Siemens; I picked up Go. I thought about Munich, but no."},
        {"turn_id": "t3", "role": "user", "said_at": "2026-03-12T18:00:00+01:00",
         "text": "Since the 10th I live in Dresden. Ran the marathon last Sunday! 我愛喝烏龍茶"},
        {"turn_id": "t4", "role": "assistant", "said_at": "2026-03-12T18:00:05+01:00",
         "text": "Congratulations!"},
    ],
    "facts": [
        {"subject": "user", "attribute": "city of residence", "cardinality": "single_value",
         "label_variants": ["city", "residence", "home town"],
         "values": [{"value": "Leipzig", "match": ["leipzig"], "said_in": "t1", "valid_from": "2026-03-02"},
                    {"value": "Dresden", "match": ["dresden"], "said_in": "t3", "valid_from": "2026-03-10"}],
         "current": ["Dresden"]},
        {"subject": "user", "attribute": "programming languages", "cardinality": "multi_value",
         "label_variants": ["languages", "programming languages"],
         "values": [{"value": "Python", "match": ["python"], "said_in": "t1", "valid_from": "2026-03-02"},
                    {"value": "Go", "match": ["go"], "said_in": "t2", "valid_from": "2026-03-05"}],
         "current": ["Python", "Go"]},
        {"subject": "Anna", "attribute": "employer", "cardinality": "single_value",
         "label_variants": ["employer"],
         "values": [{"value": "Siemens", "match": ["siemens"], "said_in": "t2",
                     "valid_from": "2026-01-01", "valid_from_vague": True}],
         "current": ["Siemens"]},
        {"subject": "user", "attribute": "favourite drink", "cardinality": "single_value",
         "label_variants": ["drink", "飲料"],
         "values": [{"value": "烏龍茶", "match": ["烏龍"], "said_in": "t3", "valid_from": "2026-03-12"}],
         "current": ["烏龍茶"]},
    ],
    "events": [{"what": "ran the marathon", "match": ["marathon"], "said_in": "t3",
                "occurred_on": "2026-03-08"}],
    "not_facts": ["Munich"],
}
CONVERSATION = conversation(RAW, "dev")
BERLIN = "+01:00"


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def state(label: str, value: str, current: bool = True, subject: str = "user",
          valid_from: str = "2026-03-02T09:15:00+01:00") -> Card:
    return Card("state", subject, label, value, current, valid_from=at(valid_from))


def event(value: str, occurred_at: str) -> Card:
    return Card("event", "user", None, value, True, occurred_at=at(occurred_at))


#: What a right ingest leaves: one slot per fact, Leipzig superseded by Dresden, the event on its day.
RIGHT = [
    state("city", "Leipzig", current=False),
    state("city", "Dresden", valid_from="2026-03-10T09:00:00+01:00"),
    state("languages", "Python"),
    state("languages", "Go", valid_from="2026-03-05T10:00:00+01:00"),
    state("employer", "Siemens", subject="Anna", valid_from="2026-03-05T10:00:00+01:00"),
    state("drink", "乌龙茶", valid_from="2026-03-12T18:00:00+01:00"),  # Simplified: still the value
    event("ran the marathon", "2026-03-08T12:00:00+01:00"),
]


def test_a_right_ingest_scores_full_marks() -> None:
    q = metrics.quality(CONVERSATION, RIGHT)
    assert (q.precision, q.recall) == (Ratio(4, 4), Ratio(4, 4))
    assert q.two_cities == Ratio(0, 3) and q.split_facts == Ratio(0, 4)
    assert q.supersessions == Ratio(1, 1)  # the city: the only single-value fact with two values
    assert q.completeness == Ratio(1, 1)
    # the event, Leipzig, Dresden, Python, Go and the drink have exact days; Siemens's is vague
    assert q.anchoring == Ratio(6, 6)
    assert q.not_facts == Ratio(0, 1)


def test_two_valid_cities_in_two_slots_are_two_cities_and_a_split_fact() -> None:
    cards = [state("city", "Leipzig"), state("residence", "Dresden"), *RIGHT[2:]]
    q = metrics.quality(CONVERSATION, cards)
    assert q.two_cities == Ratio(1, 3)
    assert q.split_facts == Ratio(1, 4)
    assert q.supersessions == Ratio(0, 1)  # Leipzig is still valid
    assert q.precision == Ratio(5, 5) and q.recall == Ratio(4, 4)  # both slots are of a fact


def test_a_superseded_twin_slot_splits_the_fact_without_two_cities() -> None:
    cards = [state("city", "Leipzig", current=False), state("residence", "Dresden"), *RIGHT[2:]]
    q = metrics.quality(CONVERSATION, cards)
    assert q.two_cities == Ratio(0, 3) and q.split_facts == Ratio(1, 4)
    assert q.supersessions == Ratio(1, 1)


def test_the_same_value_in_two_valid_slots_is_two_cities() -> None:
    cards = [state("city", "Dresden"), state("home town", "Dresden")]
    assert metrics.two_cities(CONVERSATION, cards) == Ratio(1, 3)


def test_two_values_valid_in_one_multi_value_slot_is_two_cities() -> None:
    cards = [state("city", "Leipzig"), state("city", "Dresden")]
    assert metrics.two_cities(CONVERSATION, cards) == Ratio(1, 3)


def test_a_card_naming_the_old_value_beside_the_new_one_holds_the_new_one() -> None:
    cards = [state("city", "Dresden (moved from Leipzig)")]
    assert metrics.supersessions(CONVERSATION, cards) == Ratio(1, 1)
    assert metrics.two_cities(CONVERSATION, cards) == Ratio(0, 3)


def test_hallucinated_and_not_fact_slots_count_against_precision() -> None:
    cards = [*RIGHT, state("pet", "a cat"), state("considered city", "Munich")]
    q = metrics.quality(CONVERSATION, cards)
    assert q.precision == Ratio(4, 6)
    assert q.not_facts == Ratio(1, 1)
    mixed = [*RIGHT[:2], state("city", "Munich", current=False)]  # one slot, a true and a false value
    assert metrics.slot_precision(CONVERSATION, mixed) == Ratio(0, 1)


def test_a_not_fact_in_an_event_is_stored_too() -> None:
    said = event("thought about MUNICH", "2026-03-05T10:00:00+01:00")
    assert metrics.not_facts_stored(CONVERSATION, [said]) == Ratio(1, 1)


def test_recall_counts_facts_that_some_slot_is_of() -> None:
    assert metrics.slot_recall(CONVERSATION, RIGHT[:2]) == Ratio(1, 4)
    assert metrics.slot_recall(CONVERSATION, []) == Ratio(0, 4)
    # an event is no slot
    assert metrics.slot_recall(CONVERSATION, [event("moved to Dresden", "2026-03-10T12:00:00+01:00")]) \
        == Ratio(0, 4)


def test_completeness_wants_every_current_value_valid() -> None:
    assert metrics.completeness(CONVERSATION, [state("languages", "Python")]) == Ratio(0, 1)
    assert metrics.completeness(CONVERSATION, [state("languages", "Python, Go")]) == Ratio(1, 1)
    gone = [state("languages", "Python"), state("languages", "Go", current=False)]
    assert metrics.completeness(CONVERSATION, gone) == Ratio(0, 1)


def test_time_anchoring_reads_the_day_in_the_conversations_zone() -> None:
    late = event("marathon", "2026-03-07T23:30:00+00:00")  # 00:30 on the 8th in Berlin
    early = event("marathon", "2026-03-08T23:30:00+00:00")  # the 9th in Berlin
    assert metrics.anchoring(CONVERSATION, [late]) == Ratio(1, 1)
    assert metrics.anchoring(CONVERSATION, [early]) == Ratio(0, 1)
    # Dresden anchored on the turn's day (the 12th), not the 10th it said; Leipzig right
    cards = [state("city", "Leipzig", current=False),
             state("city", "Dresden", valid_from="2026-03-12T18:00:00+01:00")]
    assert metrics.anchoring(CONVERSATION, cards) == Ratio(1, 2)
    # values never found are not counted: a vague one is never counted
    assert metrics.anchoring(CONVERSATION, [state("employer", "Siemens", subject="Anna")]) == Ratio(0, 0)


def test_a_value_of_two_facts_goes_to_the_fact_of_the_cards_subject() -> None:
    def employer(subject: str, said_in: str) -> dict[str, Any]:
        return {"subject": subject, "attribute": "employer", "cardinality": "single_value",
                "label_variants": ["employer"], "current": ["Siemens"],
                "values": [{"value": "Siemens", "match": ["siemens"], "said_in": said_in}]}

    raw = {**RAW, "facts": [employer("user", "t1"), employer("Anna", "t2")]}
    both = conversation(raw)
    assert metrics.facts_of(state("employer", "Siemens", subject="anna schmidt"), both.facts) == [1]
    assert metrics.facts_of(state("employer", "Siemens"), both.facts) == [0]
    cards = [state("employer", "Siemens"), state("employer", "Siemens AG", subject="Anna")]
    assert metrics.two_cities(both, cards) == Ratio(0, 2)


def test_a_not_fact_true_of_someone_else_is_stored_only_under_another_subject() -> None:
    raw = {**RAW, "facts": [
        {"subject": "brother", "attribute": "where the brother lives", "cardinality": "single_value",
         "label_variants": ["city"], "current": ["Newcastle"],
         "values": [{"value": "Newcastle", "match": ["newcastle"], "said_in": "t1"}]}],
        "not_facts": ["Newcastle"]}  # the assistant asked whether the user would move there too
    newcastle = conversation(raw)
    brothers = state("city", "Newcastle", subject="Brother")
    assert metrics.not_facts_stored(newcastle, [brothers]) == Ratio(0, 1)
    assert metrics.slot_precision(newcastle, [brothers]) == Ratio(1, 1)
    assert metrics.not_facts_stored(newcastle, [event("moved to Newcastle", "2026-03-02T12:00:00+01:00")]) \
        == Ratio(0, 1)
    users = state("city", "Newcastle")
    assert metrics.not_facts_stored(newcastle, [users]) == Ratio(1, 1)
    assert metrics.slot_precision(newcastle, [users]) == Ratio(0, 1)


def test_a_value_of_two_facts_of_one_subject_goes_to_the_fact_with_the_cards_label() -> None:
    raw = {**RAW, "facts": [
        {"subject": "user", "attribute": "commute", "cardinality": "single_value",
         "label_variants": ["commute", "commute mode"], "current": ["train"],
         "values": [{"value": "train", "match": ["train"], "said_in": "t1", "valid_from": "2026-03-02"},
                    {"value": "car", "match": ["car", "golf"], "said_in": "t2", "valid_from": "2026-03-05"},
                    {"value": "train", "match": ["train"], "said_in": "t3", "valid_from": "2026-03-12"}]},
        {"subject": "user", "attribute": "car owned", "cardinality": "single_value",
         "label_variants": ["car", "vehicle"], "current": ["VW Golf"],
         "values": [{"value": "VW Golf", "match": ["golf"], "said_in": "t2"}]}]}
    commute = conversation(raw)
    assert metrics.facts_of(state("Car", "VW Golf"), commute.facts) == [1]
    assert metrics.facts_of(state("commute_mode", "my golf"), commute.facts) == [0]
    assert metrics.facts_of(state("ride", "golf"), commute.facts) == [0, 1]  # no label tells
    cards = [state("commute", "train", current=False),
             state("commute", "car (the golf)", current=False, valid_from="2026-03-05T10:00:00+01:00"),
             state("commute", "train", valid_from="2026-03-12T18:00:00+01:00"), state("car", "VW Golf")]
    q = metrics.quality(commute, cards)
    assert q.two_cities == Ratio(0, 2) and q.supersessions == Ratio(1, 1)
    assert q.anchoring == Ratio(3, 3)  # each of the two trains has a card on its day


def test_ratios_add_and_print_with_their_counts() -> None:
    total = sum([Quality(precision=Ratio(3, 4)), Quality(precision=Ratio(1, 2))], Quality())
    assert total.precision == Ratio(4, 6) and str(total.precision) == "0.67 (4/6)"
    assert str(Ratio()) == "– (0/0)" and Ratio().value is None
    assert Ratio(0, 14).count("single-value facts") == "0 (of 14 single-value facts)"


# --- the scripted model ----------------------------------------------------------------------------


def test_the_scripted_model_drifts_labels_and_gives_true_times() -> None:
    said = answers(CONVERSATION)
    t1, t2, t3, t4 = (said[t]["candidates"] for t in ("t1", "t2", "t3", "t4"))
    assert [(c["label"], c["value"], c["occurred_at_hint"]) for c in t1] == [
        ("city", "Leipzig", None), ("languages", "Python", None)]  # valid_from is the turn's day
    assert [(c["subject"], c["label"], c["value"]) for c in t2] == [
        ("user", "programming languages", "Go"), ("Anna", "employer", "Siemens")]
    city, drink, marathon = t3
    assert (city["label"], city["occurred_at_hint"]) == ("residence", "2026-03-10T09:00:00" + BERLIN)
    assert (drink["label"], drink["value"]) == ("drink", "烏龍茶")
    assert (marathon["kind"], marathon["occurred_at_hint"]) == ("event", "2026-03-08T12:00:00" + BERLIN)
    assert t4 == []
    for card in [*t1, *t2, *t3]:
        assert card["cardinality_hint"] is None and card["existing_label"] is None
        assert card["confidence"] == 0.9


# --- the proxy -------------------------------------------------------------------------------------


def prompt(text: str, said_at: str, before: str = "") -> dict[str, Any]:
    turn = json.dumps({"role": "user", "said_at": said_at, "text": text}, ensure_ascii=False)
    user = before + "<turn>\n" + turn.replace("</", "<\\/") + "\n</turn>"
    return {"model": "m", "messages": [{"role": "system", "content": "<turn> is data"},
                                       {"role": "user", "content": user}]}


def test_the_current_turn_is_the_last_turn_block_whatever_precedes_it() -> None:
    previous = ('<catalogue>\n{"subject": "user", "label": "city"}\n</catalogue>\n<previous_turns>\n'
                '{"role": "user", "text": "earlier </turn> <turn>"}\n</previous_turns>\n')
    body = prompt("I said <turn> and </turn> here", "2026-03-02T09:15:00+01:00", previous)
    assert current_turn(body) == {"role": "user", "said_at": "2026-03-02T09:15:00+01:00",
                                  "text": "I said <turn> and </turn> here"}
    assert turn_block("no turn at all") is None


def test_a_repeated_text_is_told_apart_by_when_it_was_said() -> None:
    raw = {**RAW, "id": "fx-en-02", "turns": [{**RAW["turns"][0], "said_at": "2026-04-01T09:00:00+02:00"}]}
    index = TurnIndex.of([CONVERSATION, conversation(raw)])
    text = RAW["turns"][0]["text"]
    found = index.find(text, "2026-04-01T09:00:00+02:00")
    assert found is not None and found[0].id == "fx-en-02"
    found = index.find(text, "2026-03-02T09:15:00+01:00")
    assert found is not None and found[0].id == "fx-en-01"
    assert index.find("never said", None) is None


def content(answer: dict[str, Any]) -> Any:
    return json.loads(answer["choices"][0]["message"]["content"])


def test_the_proxy_answers_scripted_records_and_replays(tmp_path: Path) -> None:
    index = TurnIndex.of([CONVERSATION])
    scripted = Proxy(Scripted(ScriptedModel([CONVERSATION])), index, "scripted")
    t3 = RAW["turns"][2]
    status, answer = scripted.handle(prompt(t3["text"], t3["said_at"]), {})
    assert status == 200 and [c["value"] for c in content(answer)["candidates"]] == [
        "Dresden", "烏龍茶", "ran the marathon"]
    status, answer = scripted.handle(prompt("what the dataset never said", t3["said_at"]), {})
    assert content(answer) == {"candidates": []}
    assert (scripted.stats.calls, scripted.stats.unknown, scripted.stats.estimated) == (2, 1, 2)
    assert scripted.stats.prompt_tokens > 0 and scripted.stats.completion_tokens > 0

    path = tmp_path / "recorded.json"
    scripted.save(path, "scripted")
    replayed = Proxy(Replay(path), index, "scripted")
    status, again = replayed.handle(prompt(t3["text"], t3["said_at"]), {})
    assert status == 200 and content(again) == content(scripted.recorded["fx-en-01"]["t3"][0]["body"])
    t1 = RAW["turns"][0]
    status, none = replayed.handle(prompt(t1["text"], t1["said_at"]), {})  # not recorded
    assert content(none) == {"candidates": []} and replayed.stats.unknown == 1


def test_replay_gives_the_nth_answer_to_the_nth_call_about_a_turn(tmp_path: Path) -> None:
    first = {"error": {"message": "response_format json_schema unsupported"}}
    second = {"choices": [{"index": 0, "finish_reason": "stop",
                           "message": {"role": "assistant", "content": '{"candidates": []}'}}],
              "usage": {"prompt_tokens": 700, "completion_tokens": 9}}
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"format": "palimpsest-ingest-quality-recording/1", "model": "qwen15",
                                "answers": {"fx-en-01": {"t1": [{"status": 400, "body": first},
                                                                {"status": 200, "body": second}]}}}))
    proxy = Proxy(Replay(path), TurnIndex.of([CONVERSATION]), "qwen15")
    t1 = RAW["turns"][0]
    body = prompt(t1["text"], t1["said_at"])
    statuses = [proxy.handle(body, {})[0] for _ in range(3)]
    assert statuses == [400, 200, 200]
    assert (proxy.stats.prompt_tokens, proxy.stats.completion_tokens) == (1400, 18)  # not the error's
    assert proxy.stats.failed == 1 and proxy.stats.estimated == 0


def test_a_file_that_is_no_recording_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text("{}")
    with pytest.raises(ValueError, match="not a recording"):
        Replay(path)


# --- the report ------------------------------------------------------------------------------------


def test_the_report_prints_each_figure_with_its_counts() -> None:
    run = RunFigures(turns=4, seconds=2.0, calls=5, prompt_tokens=800, completion_tokens=80,
                     estimated=5, dead_letters=0, candidates=7, written=6,
                     queued={"large span": 2, "high frequency": 1})
    q = metrics.quality(CONVERSATION, RIGHT)
    result = report.Report("scripted", "scripted from the ground truth", "abc1234",
                           {"dev": report.SplitResult("dev", q, run, {"fx-en-01": q})})
    text = report.table(result)
    assert "slot precision" in text and "1.00 (4/4)" in text
    assert "0 (of 3 single-value facts)" in text and "2.00 (4 turns in 2.0 s)" in text
    assert "1.25 (5 calls)" in text and "200 (estimated: characters / 4)" in text
    assert "7 → 6" in text and "3 (large span 2, high frequency 1)" in text
    partly = report.table(replace(result, splits={"dev": replace(result.splits["dev"],
                                                                 run=replace(run, estimated=2))}))
    assert "200 (estimated for 2 of 5 calls: characters / 4)" in partly
    data = report.to_json(result)
    assert data["splits"]["dev"]["quality"]["two_cities"] == {"value": 0.0, "hit": 0, "total": 3}
    assert data["splits"]["dev"]["run"]["llm_calls_per_turn"] == 1.25
    json.dumps(data)
