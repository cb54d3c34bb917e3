"""Slot-aware answers, the pure part: which slots a question names, surely or only partly, and
which of them lead (``services.retrieval.naming.name_slots``); the lexicon's concepts."""

from uuid import uuid4

import pytest

from infra.settings import RetrievalSettings
from services.retrieval.lexicon import concepts_named, concepts_of_label
from services.retrieval.naming import SlotEntry, label_words, name_slots

SETTINGS = RetrievalSettings()


def slot(subject: str, label: str, cardinality: str = "single_value", **scope: str) -> SlotEntry:
    return SlotEntry(slot_id=uuid4(), scope=scope.get("scope", "personal"),
                     project_id=scope.get("project_id"), group_id=None, subject=subject, label=label,
                     cardinality=cardinality)


ANNA_JOB, BEN_JOB = slot("Anna", "profession"), slot("Ben", "occupation")
ANNA_DIET, MY_CITY = slot("Anna", "eating_habits"), slot("user", "現居城市")
MY_INSTRUMENTS = slot("user", "樂器", "multi_value")
ENTRIES = (ANNA_JOB, BEN_JOB, ANNA_DIET, MY_CITY, MY_INSTRUMENTS)


def leads(text: str, **options: object) -> set[str]:
    naming = name_slots(text, ENTRIES, SETTINGS, **options)  # type: ignore[arg-type]
    return {f"{e.subject}/{e.label}" for e in naming.leads}


@pytest.mark.parametrize(("question", "expected"), [
    ("what does Anna do for a living", {"Anna/profession"}),
    ("Anna's job?", {"Anna/profession"}),
    ("what is Ben's occupation", {"Ben/occupation"}),
    ("is Anna still vegan?", {"Anna/eating_habits"}),
    ("Anna's eating habits", {"Anna/eating_habits"}),
    ("我現在住在哪裡", {"user/現居城市"}),
    ("which city do I live in", {"user/現居城市"}),
    ("我會哪些樂器", {"user/樂器"}),
])
def test_a_question_names_its_slot_whatever_the_label_is(question: str, expected: set[str]) -> None:
    assert leads(question) == expected


def test_several_people_s_slots_do_not_lead_without_a_name() -> None:
    naming = name_slots("what do they do for a living", ENTRIES, SETTINGS)
    assert naming.leads == ()
    assert {e.subject for e, _ in naming.weighed} == {"Anna", "Ben"}


def test_a_question_that_names_a_time_only_weighs_the_slot() -> None:
    naming = name_slots("what was Anna's job", ENTRIES, SETTINGS, names_time=True)
    assert naming.leads == () and naming.weighed == ((ANNA_JOB, 0.9),)
    # without a time, Anna's other slots weigh in a little: she is what is asked about
    assert dict(name_slots("anything new about Anna", ENTRIES, SETTINGS).weighed)[ANNA_DIET] == 0.3


def test_an_embedding_names_a_label_surely_or_partly() -> None:
    entries = (slot("user", "nickname"),)
    sure = name_slots("how do my friends address me", entries, SETTINGS, similarities={"nickname": 0.62})
    partly = name_slots("how do my friends address me", entries, SETTINGS, similarities={"nickname": 0.4})
    none = name_slots("how do my friends address me", entries, SETTINGS, similarities={"nickname": 0.2})
    assert [e.label for e in sure.leads] == ["nickname"]
    assert partly.leads == () and [s for _, s in partly.weighed] == [0.4]
    assert none.leads == () and none.weighed == ()


def test_part_of_a_label_s_words_only_weighs_in() -> None:
    naming = name_slots("habits", (ANNA_DIET,), SETTINGS)
    assert naming.leads == () and [s for _, s in naming.weighed] == [0.6]


def test_the_surest_name_leads_first() -> None:
    food, diet = slot("Anna", "favorite_food"), slot("Anna", "diet")
    naming = name_slots("what does Anna love to eat, vegan or not", (diet, food), SETTINGS)
    assert naming.leads == (food, diet)  # a phrase (love to eat) before a word (vegan)


def test_unrelated_questions_name_nothing() -> None:
    for question in ("How do I stop goroutines from leaking?", "what did I do last week",
                     "How should a mobile app log in with OAuth securely?", "how does HNSW work"):
        naming = name_slots(question, ENTRIES, SETTINGS)
        assert naming.leads == () and naming.weighed == (), question


def test_concepts_come_from_words_and_phrases_and_a_phrase_claims_its_words() -> None:
    assert concepts_named("what does she do for a living") == {"occupation"}  # not "live"
    assert concepts_named("where does she live") == {"residence"}
    assert concepts_named("我的邮箱地址是什么") == {"email"}  # 地址 belongs to the e-mail address
    assert concepts_named("what did I do last week") == frozenset()


def test_a_tenant_label_stands_for_a_concept_by_name_or_by_its_words() -> None:
    assert concepts_of_label("address", label_words("address")) == {"residence"}
    assert concepts_of_label("home_city", label_words("home_city")) == {"residence"}
    assert concepts_of_label("現居城市", label_words("現居城市")) == {"residence"}
    assert concepts_of_label("eating_habits", label_words("eating_habits")) == {"diet"}
    assert concepts_of_label("favorite_color", label_words("favorite_color")) == frozenset()
