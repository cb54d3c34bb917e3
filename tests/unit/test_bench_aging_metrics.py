"""The aging benchmark's scoring (tests/benchmarks/aging/metrics.py) and its model of the write
rules (truth.py), on hand-made rankings and histories whose figures are computed by hand."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from tests.benchmarks.aging import metrics
from tests.benchmarks.aging.records import Answer, Item, Question, Snapshot
from tests.benchmarks.aging.truth import SlotTruth, changes_counted

ANNA = ("Anna", "home_city")
T0 = datetime(2026, 1, 5, 9, tzinfo=UTC)


def city(value: str, subject: str = "Anna", label: str = "home_city", **extra: object) -> Item:
    return Item("state", subject, label, value, **extra)  # type: ignore[arg-type]


def test_a_hit_is_the_slot_and_value_whatever_the_case_spacing_or_label_spelling() -> None:
    assert metrics.is_hit(city("  tainan "), ANNA, "Tainan")
    assert metrics.is_hit(city("Tainan", label="Home City"), ANNA, "Tainan")
    assert not metrics.is_hit(city("Tainan", subject="Ben"), ANNA, "Tainan")
    assert not metrics.is_hit(city("Taipei"), ANNA, "Tainan")


def test_hit_at_k_counts_the_first_hit_rank() -> None:
    ranked = [city("Taipei"), Item("event", None, None, "Anna flew to Kyoto"), city("Tainan")]
    assert not metrics.hit_at(ranked, ANNA, "Tainan", 1)
    assert not metrics.hit_at(ranked, ANNA, "Tainan", 2)
    assert metrics.hit_at(ranked, ANNA, "Tainan", 5)


@pytest.mark.parametrize(("ranked", "leaks"), [
    ([city("Taipei"), city("Tainan")], True),      # stale above current
    ([city("Tainan"), city("Taipei")], False),     # current first
    ([city("Kyoto", subject="Ben"), city("Taipei")], False),  # current absent, stale not first
    ([city("Taipei")], True),                      # current absent, stale first
    ([city("Tainan", subject="Ben")], False),      # another slot's value is no leak
])
def test_ranked_leakage(ranked: list[Item], leaks: bool) -> None:
    assert metrics.leaks_ranked(ranked, ANNA, "Tainan") is leaks


def test_marked_leakage_is_a_stale_card_not_marked_superseded() -> None:
    assert not metrics.leaks_marked([city("Tainan"), city("Taipei", superseded=True)], ANNA, "Tainan")
    assert metrics.leaks_marked([city("Tainan"), city("Taipei")], ANNA, "Tainan")
    assert not metrics.leaks_marked([city("Taipei", subject="Ben")], ANNA, "Tainan")


def test_recall_at_5_is_out_of_at_most_5_expected() -> None:
    ranked = [Item("event", None, None, str(ref), ref) for ref in (1, 9, 3, 8, 7, 2)]
    assert metrics.recall_at(ranked, {1, 2, 3}) == pytest.approx(2 / 3)  # 2 is sixth
    many = [Item("event", None, None, str(ref), ref) for ref in range(5)]
    assert metrics.recall_at(many, range(7)) == 1.0
    assert math.isnan(metrics.recall_at(ranked, ()))


def test_completeness_counts_the_slots_valid_items_anywhere_in_the_list() -> None:
    slot = ("Ben", "skills")
    ranked = [Item("state", "Ben", "skills", "Python"), Item("state", "Ben", "skills", "figma"),
              Item("state", "Ben", "skills", " sql"), Item("state", "Anna", "skills", "Excel")]
    assert metrics.completeness(ranked, slot, ["Python", "SQL", "Excel"]) == pytest.approx(2 / 3)


def test_alert_and_aging_counts() -> None:
    ben = ("Ben", "employer")
    snapshot = Snapshot(current={ANNA: "Taipei", ben: "Globex"}, aging={ANNA},
                        conflicted={ANNA, ("Ben", "diet")})
    assert metrics.alert_counts({ANNA, ben}, snapshot) == (1, 1)
    flagged = [city("Taipei", aging=True), Item("state", "Ben", "employer", "Globex", aging=True),
               city("Kyoto"), Item("event", None, None, "x")]
    assert metrics.aging_counts(flagged, snapshot) == (1, 1, 0)
    assert metrics.aging_counts([city("Taipei")], snapshot) == (0, 0, 1)


def question(n: int, *, named: bool = True, conflict: bool = False, kind: str = "current") -> Question:
    return Question(qid=f"q{n}", checkpoint=0, tenant="t", kind=kind, lang="en", text="where does Anna live",
                    template="", names_label=named, slot_kind="residence", slot=ANNA, expected=("Tainan",),
                    conflict=conflict)


def test_summary_of_four_current_questions() -> None:
    snapshot = Snapshot(current={ANNA: "Tainan"}, conflicted={ANNA})
    answers = [  # hit1 yes/no/yes/yes; leaks no/yes/no/no; alerts right on q0, q1; wrong on none
        (question(0, conflict=True), Answer([city("Tainan")], 10.0, {ANNA})),
        (question(1, named=False, conflict=True), Answer([city("Taipei"), city("Tainan")], 20.0, {ANNA})),
        (question(2, named=False, conflict=True), Answer([city("Tainan")], 30.0, set())),
        (question(3, conflict=True), Answer([city("Tainan")], 40.0, set())),
    ]
    rows = [metrics.score(q, a, snapshot, marks_superseded=True) for q, a in answers]
    figures = metrics.summarise(rows)
    assert figures["current_hit1"] == 0.75
    assert figures["current_hit5"] == 1.0
    assert figures["leakage"] == 0.25
    assert figures["hit1_names_label"] == 1.0
    assert figures["hit1_paraphrase"] == 0.5
    assert figures["contradiction_recall"] == 0.5
    assert figures["contradiction_precision"] == 1.0
    assert figures["latency_p50_ms"] == 20.0
    assert figures["latency_p95_ms"] == 40.0
    assert figures["as_of_known_hit1"] is None
    assert set(metrics.METRICS) <= set(figures)


def test_a_baseline_has_no_alert_figures() -> None:
    row = metrics.score(question(0), Answer([city("Taipei")], 1.0), Snapshot(), marks_superseded=False)
    figures = metrics.summarise([row])
    assert row["leak"] is True
    assert figures["contradiction_precision"] is None and figures["aging_recall"] is None


# ---- the model of the write rules -------------------------------------------------------------


def test_the_third_change_in_30_days_is_queued_counting_the_incoming_one() -> None:
    assert changes_counted([T0, T0 + timedelta(days=5)], T0 + timedelta(days=10)) == 3
    assert changes_counted([T0], T0 + timedelta(days=31)) == 1
    slot = SlotTruth("t", "Anna", "home_city", "residence", "en", "single_value")
    outcomes = [slot.write(value, T0 + timedelta(days=d), T0 + timedelta(days=d), ref)
                for ref, (d, value) in enumerate([(0, "Taipei"), (5, "Tainan"), (10, "Kyoto"),
                                                  (15, "Osaka")])]
    assert outcomes == ["remembered", "superseded", "superseded", "queued"]  # Kyoto is the second change
    assert slot.current(T0 + timedelta(days=20)) == "Kyoto"
    assert [c.value for c in slot.pending(T0 + timedelta(days=20))] == ["Osaka"]


def test_queued_changes_join_the_slots_one_case_and_accepting_it_applies_the_latest() -> None:
    slot = SlotTruth("t", "Anna", "home_city", "residence", "en", "single_value")
    days = [(0, "Taipei"), (5, "Tainan"), (10, "Kyoto"), (15, "Osaka"), (18, "Melbourne")]
    outcomes = [slot.write(value, T0 + timedelta(days=d), T0 + timedelta(days=d), ref)
                for ref, (d, value) in enumerate(days)]
    assert outcomes[3:] == ["queued", "queued"]
    [case] = slot.pending(T0 + timedelta(days=20))
    assert case.ref == 3 and [p.value for p in case.proposals] == ["Osaka", "Melbourne"]
    assert slot.decide(case, "accept_new", T0 + timedelta(days=21)) == "superseded"
    assert slot.current(T0 + timedelta(days=22)) == "Melbourne"
    assert slot.pending(T0 + timedelta(days=22)) == []


def test_a_same_turn_slip_is_overwritten_and_a_late_fact_is_bitemporal() -> None:
    slot = SlotTruth("t", "Anna", "home_city", "residence", "en", "single_value")
    slot.write("Taipei", T0, T0, 0)
    at = T0 + timedelta(days=40)
    assert slot.write("Kyoto", at, at - timedelta(days=10), 1, "s", "u") == "superseded"
    assert slot.write("Kaohsiung", at + timedelta(seconds=30), at, 2, "s", "u") == "overwritten"
    moved = at - timedelta(days=5)
    assert slot.value_at(moved, at + timedelta(days=1)) == "Kaohsiung"  # valid then, as known now
    assert slot.value_at(moved, moved) == "Taipei"                      # as known then
    assert slot.write("Osaka", at + timedelta(days=1), at - timedelta(days=35), 3) == "queued"  # large span
