"""Slot resolution and grounding at ingest (DESIGN rule 12): pure functions, the embeddings
stood in for by a table of closeness."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from services.ingest.admission import Admission, near_twin
from services.ingest.candidates import Candidate
from services.ingest.grounding import lexical_support, support
from services.ingest.hints import TimeDecision
from services.ingest.resolution import (
    Decision,
    KnownSlot,
    Thresholds,
    resolve,
    resolve_label,
    resolve_subject,
)

THRESHOLDS = Thresholds(reuse=0.75, near=0.55)


def closeness(table: Mapping[str, float]) -> Any:
    """A stand-in for the embeddings: the closeness of any candidate to each label, by label."""

    def close(label: str, value: str, slots: Sequence[KnownSlot]) -> dict[str, float]:
        return {slot.label: table.get(slot.label, 0.0) for slot in slots}

    return close


def slots(*labels: str, subject: str = "user") -> list[KnownSlot]:
    return [KnownSlot(subject, label, "single_value", ("x",)) for label in labels]


# ---- subjects ---------------------------------------------------------------------------------


@pytest.mark.parametrize("said", ["I", "me", "My", "user", "the speaker", "我", "", "  Myself "])
def test_the_first_person_is_the_user(said: str) -> None:
    assert resolve_subject(said, ["Anna", "user"])[0] == "user"


@pytest.mark.parametrize(("said", "known", "expected"), [
    ("anna", ["Anna"], "Anna"),
    ("ＡＮＮＡ", ["Anna"], "Anna"),
    ("媽媽", ["妈妈"], "妈妈"),
    ("Jonas", ["Jonas Weber", "Anna"], "Jonas Weber"),
    ("Jonas Weber", ["Jonas", "Anna"], "Jonas"),
    ("my sister", ["sister"], "sister"),
    ("我的姊姊", ["姊姊"], "姊姊"),
])
def test_a_named_person_is_the_subject_already_holding_the_name(said: str, known: list[str],
                                                                expected: str) -> None:
    assert resolve_subject(said, known)[0] == expected


def test_a_new_person_opens_a_new_subject_and_an_ambiguous_part_is_no_match() -> None:
    assert resolve_subject("Jonas", ["Jonas Weber", "Jonas Berg"]) == ("Jonas", "a subject not seen before")
    assert resolve_subject("my brother", ["sister"]) == ("brother", "a subject not seen before")


# ---- labels -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("said", "existing"), [
    ("Job Title", "job_title"), ("job-title", "job_title"), ("hobbies", "hobby"),
    ("skill", "skills"), ("職稱", "职称"),
])
def test_the_same_label_in_normalised_form_is_the_same_slot(said: str, existing: str) -> None:
    label, decision, why, *_ = resolve_label(said, "v", None, slots("city", existing), None, THRESHOLDS)
    assert (label, decision) == (existing, Decision.REUSED) and "normalised" in why


def test_the_models_choice_among_the_labels_shown_is_taken() -> None:
    label, decision, why, *_ = resolve_label("coffee order", "oat flat white", "morning_brew",
                                             slots("morning_brew"), None, THRESHOLDS)
    assert (label, decision) == ("morning_brew", Decision.REUSED) and "model chose" in why


def test_a_choice_of_another_concept_is_not_taken() -> None:
    """A small model copies the first label it was shown: a hometown is not where one lives."""
    label, decision, *_ = resolve_label("hometown", "Kyoto", "city", slots("city"), None, THRESHOLDS)
    assert (label, decision) == ("hometown", Decision.NEW)


@pytest.mark.parametrize(("said", "existing"), [("home city", "residence"), ("居住地", "city"),
                                                ("occupation", "job_title"), ("住哪裡", "address")])
def test_a_concept_both_labels_name_reuses_the_slot(said: str, existing: str) -> None:
    label, decision, why, *_ = resolve_label(said, "v", None, slots("pets", existing), None, THRESHOLDS)
    assert (label, decision) == (existing, Decision.REUSED) and "concept" in why


def test_closeness_reuses_proposes_a_twin_or_opens_a_new_slot() -> None:
    known = slots("morning_brew", "shoe_size")
    close = closeness({"morning_brew": 0.8, "shoe_size": 0.2})
    assert resolve_label("coffee order", "v", None, known, close, THRESHOLDS)[:2] == \
        ("morning_brew", Decision.REUSED)
    close = closeness({"morning_brew": 0.6, "shoe_size": 0.2})
    label, decision, why, twin, score = resolve_label("coffee order", "v", None, known, close,
                                                      THRESHOLDS)
    assert (label, decision, twin, score) == ("coffee order", Decision.NEAR_TWIN, "morning_brew", 0.6)
    close = closeness({"morning_brew": 0.3, "shoe_size": 0.2})
    assert resolve_label("coffee order", "v", None, known, close, THRESHOLDS)[1] is Decision.NEW


def test_a_label_of_another_concept_is_never_reused_by_closeness() -> None:
    label, decision, *_ = resolve_label("hometown", "Kyoto", None, slots("city"),
                                        closeness({"city": 0.99}), THRESHOLDS)
    assert (label, decision) == ("hometown", Decision.NEW)


def test_resolution_is_per_subject_and_says_why() -> None:
    catalogue = [*slots("diet"), *slots("diet", subject="Anna")]
    resolved = resolve("Anna", "Diet", "vegan", None, catalogue, None, THRESHOLDS)
    assert (resolved.subject, resolved.label, resolved.decision) == ("Anna", "diet", Decision.REUSED)
    assert resolved.reason == "subject: the same name; label: the same label in normalised form"
    assert resolve("Bo", "diet", "vegan", None, catalogue, None, THRESHOLDS).decision is Decision.NEW


# ---- grounding --------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "text"), [
    ("Dresden", "settled in dresden now"),
    ("software engineer at Siemens", "I'm an engineer at Siemens since Monday"),
    ("台中", "我搬到臺中了"),
    ("+49 170 555", "new number: 0049 170 555"),
])
def test_a_value_in_the_words_of_the_turn_is_grounded(value: str, text: str) -> None:
    assert lexical_support(value, [text]) is not None


def test_a_value_the_turn_never_mentions_is_rejected_with_why() -> None:
    found = support("Kaohsiung", ["we cooked pasta tonight"], lambda v, texts: [0.05] * len(texts), 0.45)
    assert not found.grounded and "0.05" in found.reason


def test_a_value_implied_in_other_words_is_grounded_by_its_embedding() -> None:
    found = support("vegetarian", ["I stopped eating meat"], lambda v, texts: [0.5] * len(texts), 0.45)
    assert found.grounded and "implied" in found.reason


def test_an_earlier_turn_shown_grounds_a_value() -> None:
    assert support("Dresden", ["settled in now", "we move to Dresden on Friday"], None, 0.45).grounded


# ---- admission --------------------------------------------------------------------------------


def candidate(value: str, label: str = "city", subject: str = "I", kind: str = "state",
              existing: str | None = None) -> Candidate:
    said = datetime(2026, 3, 2, tzinfo=UTC)
    return Candidate(kind=kind, memory_type="fact" if kind == "state" else "event", subject=subject,
                     label=label, value=value, confidence=0.9,
                     time=TimeDecision(occurred_at=said, source="turn", note="no hint"),
                     existing_label=existing)


def test_admission_rejects_the_ungrounded_and_records_where_the_rest_went() -> None:
    admitted = Admission(None, THRESHOLDS, 0.45).admit(
        [candidate("Bremen", label="Home City"), candidate("Kaohsiung")],
        ["I live in Bremen now"], slots("residence"))
    (kept,) = admitted.candidates
    assert (kept.subject, kept.label) == ("user", "residence")
    assert kept.resolution is not None and kept.resolution["decision"] == "reused"
    assert kept.resolution["proposed"] == {"subject": "I", "label": "Home City"}
    (rejected,) = admitted.rejected
    assert rejected["value"] == "Kaohsiung" and "no word of the value" in rejected["rejected"]


def test_a_slot_opened_by_a_candidate_is_known_to_the_next_one_of_the_turn() -> None:
    admitted = Admission(None, THRESHOLDS, 0.45).admit(
        [candidate("oat flat white", label="coffee order"), candidate("oat flat white",
                                                                      label="Coffee-Order")],
        ["my coffee order is an oat flat white"], [])
    assert [c.label for c in admitted.candidates] == ["coffee order", "coffee order"]


def test_a_near_twin_is_recorded_for_a_proposal() -> None:
    class Close:
        def to_each(self, text: str, others: Sequence[str]) -> list[float]:
            return [1.0] * len(others)

        def closeness(self, label: str, value: str, known: Sequence[KnownSlot]) -> dict[str, float]:
            return {slot.label: 0.6 for slot in known}

    admitted = Admission(Close(), THRESHOLDS, 0.45).admit(  # type: ignore[arg-type]
        [candidate("3 times a week", label="training")], ["I train 3 times a week"], slots("gym_plan"))
    (kept,) = admitted.candidates
    twin = near_twin(kept.stored())
    assert twin is not None and (twin["twin"], twin["score"]) == ("gym_plan", 0.6)
    assert kept.label == "training"


@pytest.mark.parametrize(("label", "cardinality"), [
    ("hobbies", "multi_value"), ("興趣", "multi_value"), ("寵物", "multi_value"),
    ("居住地", "single_value"), ("shoe_size", None), ("笔记软件", None)])
def test_a_new_slot_without_a_declared_cardinality_takes_its_concepts(label: str,
                                                                      cardinality: str | None) -> None:
    (placed,) = Admission(None, THRESHOLDS, 0.45).admit(
        [candidate("x", label=label)], ["x"], []).candidates
    assert placed.cardinality == cardinality
