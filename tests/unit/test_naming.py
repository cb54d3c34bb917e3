"""Slot-aware answers, the pure part: which slots a question names, surely or only partly, and
which of them lead (``services.query.retrieval.naming.name_slots``); the lexicon's concepts."""

from uuid import uuid4

import pytest

from infra.settings import RetrievalSettings
from services.query.retrieval.lexicon import concepts_named, concepts_of_label
from services.query.retrieval.naming import (
    SlotEntry,
    asked_strengths,
    label_question,
    label_words,
    name_slots,
)

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


def test_a_person_named_without_a_label_weighs_the_slot_whose_question_is_closest() -> None:
    anna_city = slot("Anna", "home_city")
    entries = (ANNA_JOB, ANNA_DIET, anna_city)
    questions = {"profession": 0.52, "eating_habits": 0.47, "home_city": 0.30}
    weighed = dict(name_slots("how does Anna pay the bills", entries, SETTINGS,
                              questions=lambda: questions).weighed)
    assert weighed[ANNA_JOB] == pytest.approx(SETTINGS.slot_asked)
    assert weighed[ANNA_DIET] == pytest.approx(0.3 + 0.3 * 0.5)  # half a spread behind
    assert weighed[anna_city] == pytest.approx(0.3)  # beyond the spread: the base weight
    # no question-form similarities (no embedder): every slot of hers alike
    assert set(dict(name_slots("how does Anna pay the bills", entries, SETTINGS).weighed).values()) == {0.3}


def test_asked_strengths_lift_only_toward_the_closest_and_a_label_s_question_keeps_its_script() -> None:
    assert asked_strengths(["a", "b"], {"a": 0.4, "b": 0.4}, SETTINGS) == {"a": 0.6, "b": 0.6}
    assert asked_strengths(["a", "b"], {}, SETTINGS) == {"a": 0.3, "b": 0.3}
    assert label_question("現居城市") == "現居城市是什麼？"
    assert label_question("eating_habits") == "what is the eating habits?"


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


@pytest.mark.parametrize(("question", "concept"), [
    ("how old is Anna", "age"), ("Anna今年幾歲", "age"),
    ("where did Ben grow up", "hometown"), ("where is Ben from", "hometown"), ("他是哪裡人", "hometown"),
    ("is she allergic to anything", "allergies"), ("她對什麼過敏", "allergies"),
    ("how many kids does he have", "children"), ("他有幾個小孩", "children"),
    ("what degree does she have", "education"), ("她哪裡畢業的", "education"),
    ("what car does he drive", "car"), ("what's her nickname", "nickname"), ("他的時區", "timezone"),
    ("who owns the billing service", "owner"), ("這個專案誰負責", "owner"),
    ("where is the repo", "repository"), ("what's the budget for fibon", "budget"),
    ("which cloud is it hosted on", "hosting"), ("目前是哪個版本", "version"),
])
def test_everyday_concepts_are_named_by_a_word_or_a_phrase(question: str, concept: str) -> None:
    assert concept in concepts_named(question)


def test_colloquial_and_contracted_question_words_read_as_their_plain_forms() -> None:
    assert concepts_named("他靠啥维生") == concepts_named("他靠什么维生") == {"occupation"}
    assert concepts_named("what's Anna's job title") == {"occupation"}


def test_words_with_other_meanings_name_no_concept() -> None:
    for question in ("which HTTP client do we use", "what was the major outage last week",
                     "book a table for friday", "what did I do last week"):
        assert concepts_named(question) == frozenset(), question


def test_a_tenant_label_stands_for_a_concept_by_name_or_by_its_words() -> None:
    assert concepts_of_label("address", label_words("address")) == {"residence"}
    assert concepts_of_label("home_city", label_words("home_city")) == {"residence"}
    assert concepts_of_label("現居城市", label_words("現居城市")) == {"residence"}
    assert concepts_of_label("eating_habits", label_words("eating_habits")) == {"diet"}
    assert concepts_of_label("favorite_color", label_words("favorite_color")) == {"color"}
    assert concepts_of_label("shoe_size", label_words("shoe_size")) == frozenset()


def test_with_the_lexicon_off_a_label_is_named_only_by_its_own_words_or_embedding() -> None:
    bare = RetrievalSettings(lexicon=False)
    assert name_slots("what does Anna do for a living", ENTRIES, bare).leads == ()
    assert name_slots("what does Anna do for a living", ENTRIES, bare,
                      examples={"occupation": 0.9}).leads == ()
    assert [e.label for e in name_slots("Anna's eating habits", ENTRIES, bare).leads] == ["eating_habits"]
    close = name_slots("what does Anna do for a living", ENTRIES, bare, similarities={"profession": 0.6})
    assert [e.label for e in close.leads] == ["profession"]
