"""Which slots a question names, and how surely (DESIGN §3 "slot-aware answers"): pure functions
over the tenant's slots, the question's text and its embedding similarities.

A question names a slot through the lexicon's concepts ("where does she live" → any label the
tenant stores residence under: ``address``, ``home_city``, 現居城市 …) — by a word or phrase, or by
the example questions its embedding is closest to —, through the words of the tenant's own labels
(``eating_habits`` → "eating habits"), or through a label's embedding close to the question's; and
whose slot, by the subject's name ("Anna's diet", a Chinese name anywhere in the text) or the first
person ("my", 我 → the user's own). A person named with none of their labels ("what does Anna do
these days?") weighs all their slots, the more the closer the question is to the question each
label answers ("what is the occupation?", 職業是什麼？): question to question is what the
encoder compares best. A sure name (a concept, all of a label's words, a close
embedding) leads when it says whose slot it is — the subject named, or one subject holding that
label in view — and the question names no time; a weaker name only weighs in.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from uuid import UUID

from infra.settings import RetrievalSettings
from projections.text import DEFAULT_SUBJECTS, fold, query_terms, subject_terms, terms
from services.query.retrieval.lexicon import concept_strengths, concepts_of_label

#: The least strength of a sure name; naming a label by all its words; a concept by the examples
#: its embedding is closest to; a label by part of its words; the weight of a named subject's
#: slots the question names no label of.
SURE, ALL_WORDS, BY_EXAMPLE, PARTLY, SUBJECT_ONLY = 0.85, 0.95, 0.86, 0.6, 0.3
_FIRST_PERSON = re.compile(r"\b(?:i|me|my|mine|myself)\b|我(?!们)")
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


@dataclass(frozen=True)
class SlotEntry:
    """One of the tenant's slots, as the catalogue holds it."""

    slot_id: UUID
    scope: str
    project_id: str | None
    group_id: str | None
    subject: str
    label: str
    cardinality: str

    @property
    def key(self) -> tuple[str, str | None, str | None, str, str]:
        """The slot as candidates know it (``scoring.slot_key``): scope, project, group, subject, label."""
        return (self.scope, self.project_id, self.group_id, self.subject, self.label)


@dataclass(frozen=True)
class Naming:
    """The slots a question names: ``leads`` answer it first; ``weighed`` (with how strongly)
    only weigh in. ``reasons``: label → why it counts as named."""

    leads: tuple[SlotEntry, ...] = ()
    weighed: tuple[tuple[SlotEntry, float], ...] = ()
    reasons: Mapping[str, str] = field(default_factory=dict)
    #: label → how surely it is named
    strengths: Mapping[str, float] = field(default_factory=dict)

    def note(self) -> str:
        if not self.reasons:
            return "no slot named"
        led = sorted({f"{e.subject}/{e.label}" for e in self.leads})
        named = "; ".join(f"{label}: {why}" for label, why in sorted(self.reasons.items()))
        return named + (f"; leading {', '.join(led)}" if led else "; none leads")


def label_words(label: str) -> tuple[str, ...]:
    """A label's own words, ``eating_habits`` read as "eating habits"."""
    return terms(label.replace("_", " ").replace("-", " "))


def label_text(label: str) -> str:
    """What a label's embedding is made of."""
    return label.replace("_", " ").replace("-", " ")


def label_question(label: str) -> str:
    """The question a label answers, in the label's script: what its question-form embedding is
    made of."""
    return f"{label}是什麼？" if _CJK.search(label) else f"what is the {label_text(label)}?"


def asked_strengths(labels: Sequence[str], closeness: Mapping[str, float],
                    settings: RetrievalSettings) -> dict[str, float]:
    """How much each of a named person's labels weighs when the question names none of them:
    :data:`SUBJECT_ONLY`, rising to ``slot_asked`` as the question comes within
    ``slot_asked_spread`` of the closest label's question (``closeness``: label → similarity)."""
    known = [closeness[label] for label in labels if label in closeness]
    if not known:
        return dict.fromkeys(labels, SUBJECT_ONLY)
    best, spread = max(known), settings.slot_asked_spread
    lift = max(settings.slot_asked - SUBJECT_ONLY, 0.0)
    return {label: SUBJECT_ONLY + lift * max(0.0, 1 - (best - closeness[label]) / spread)
            if label in closeness else SUBJECT_ONLY for label in labels}


def subject_named(subject: str, asked: frozenset[str], folded: str, first_person: bool) -> bool:
    """Whether the question names ``subject``: the user's own by the first person, a Chinese name
    anywhere in the text (jieba cuts names it does not know into characters), a Latin one by
    all its words."""
    if subject.strip().lower() in DEFAULT_SUBJECTS:
        return first_person
    words = subject_terms(subject)
    if len(words) == 1 and _CJK.search(words[0]):
        return words[0] in folded
    return bool(words) and set(words) <= asked


def named_subjects(subjects: set[str], asked: frozenset[str], folded: str, first_person: bool) -> set[str]:
    """The subjects the question names; of two names where one holds the other (雅琪, 王雅琪),
    the longer."""
    named = {s for s in subjects if subject_named(s, asked, folded, first_person)}
    return {s for s in named if not any(s != t and fold(s) in fold(t) for t in named)}


def label_strength(label: str, asked: frozenset[str], concepts: Mapping[str, float],
                   similarity: float | None, settings: RetrievalSettings) -> tuple[float, str]:
    """How surely the question names ``label``, and why (0 and "" when it does not): a concept
    by a phrase 1, all the label's words 0.95, a concept by a word 0.9, an embedding at
    ``slot_similarity`` 0.85 — each of these a sure name —; part of its words 0.6, an embedding
    at ``slot_weak_similarity`` its similarity."""
    words = label_words(label)
    shared = len(set(words) & asked)
    found = [(concepts[c], f"concept {c}") for c in concepts_of_label(label, words) if c in concepts]
    found = [(strength, why) for strength, why in found if strength > 0]
    if words and shared == len(words):
        found.append((ALL_WORDS, "its words"))
    if similarity is not None and similarity >= settings.slot_similarity:
        found.append((SURE, f"embedding {similarity:.2f}"))
    if found:
        return max(found)
    if words and shared and shared / len(words) >= 0.5:
        return PARTLY, "some of its words"
    if similarity is not None and similarity >= settings.slot_weak_similarity:
        return similarity, f"embedding {similarity:.2f}"
    return 0.0, ""


def example_concepts(similarities: Mapping[str, float], settings: RetrievalSettings) -> dict[str, float]:
    """The concept the question's embedding names through the examples (``EXAMPLES``), if one
    stands out: at ``slot_example_similarity`` and ahead of the next concept by
    ``slot_example_margin`` surely (:data:`BY_EXAMPLE`); a little closer to it than to the rest
    (``slot_example_weak_*``), only to weigh in."""
    ranked = sorted(similarities.items(), key=lambda item: -item[1])
    if not ranked:
        return {}
    (best, similarity), runner_up = ranked[0], (ranked[1][1] if len(ranked) > 1 else -1.0)
    if similarity >= settings.slot_example_similarity \
            and similarity - runner_up >= settings.slot_example_margin:
        return {best: BY_EXAMPLE}
    if similarity >= settings.slot_example_weak_similarity \
            and similarity - runner_up >= settings.slot_example_weak_margin:
        return {best: similarity}
    return {}


class Slots:
    """A tenant's slots (those a query may see), indexed the ways naming reads them: by label and
    by subject. Built once per catalogue read, not per question."""

    def __init__(self, entries: Sequence[SlotEntry]) -> None:
        self.entries = list(entries)
        self.by_label: dict[str, list[SlotEntry]] = {}
        self.by_subject: dict[str, list[SlotEntry]] = {}
        for entry in self.entries:
            self.by_label.setdefault(entry.label, []).append(entry)
            self.by_subject.setdefault(entry.subject, []).append(entry)
        self.labels = sorted(self.by_label)
        self.subjects = set(self.by_subject)


def name_slots(text: str, slots: Slots | Sequence[SlotEntry], settings: RetrievalSettings, *,
               similarities: Mapping[str, float] | None = None,
               examples: Mapping[str, float] | None = None, names_time: bool = False,
               questions: Callable[[], Mapping[str, float] | None] | None = None) -> Naming:
    """The slots among ``slots`` (those the query may see) that ``text`` names.
    ``similarities``: each label's embedding similarity to the question's, when known;
    ``examples``: the concepts the question's embedding names (:func:`example_concepts`);
    ``questions``: each label's question-form similarity to the question (:func:`label_question`),
    asked for only when a person is named with none of their labels."""
    slots = slots if isinstance(slots, Slots) else Slots(slots)
    asked = frozenset(query_terms(text))
    # words and phrases first; none at all with the lexicon off
    concepts = {**(examples or {}), **concept_strengths(text)} if settings.lexicon else {}
    folded = fold(text)
    first_person = bool(_FIRST_PERSON.search(folded))
    subjects = named_subjects(slots.subjects, asked, folded, first_person)
    reasons: dict[str, str] = {}
    strengths: dict[str, float] = {}
    for label in slots.labels:
        strength, why = label_strength(label, asked, concepts,
                                       (similarities or {}).get(label), settings)
        if strength > 0:
            strengths[label], reasons[label] = strength, why
    named = [e for label in strengths for e in slots.by_label[label]
             if not subjects or e.subject in subjects]
    sure = sorted((e for e in named if strengths[e.label] >= SURE), key=lambda e: -strengths[e.label])
    whose = {e.subject for e in sure}
    if names_time or (not subjects and len(whose) > 1):
        sure = []  # a time, or several people's slots: weigh them, let relevance choose
    leads = tuple(sure)
    weighed = [(e, strengths[e.label]) for e in named if e not in leads]
    if not names_time:
        # a person named (not "I": "how do I …" asks about anything) and no time: the question
        # is about their slots, whichever of them it asks
        people = [s for s in sorted(subjects) if s.strip().lower() not in DEFAULT_SUBJECTS]
        closeness = (questions() if questions is not None and people else None) or {}
        for subject in people:
            rest = [e for e in slots.by_subject[subject] if e.label not in strengths]
            weights = asked_strengths([e.label for e in rest], closeness, settings)
            weighed += [(e, weights[e.label]) for e in rest]
    return Naming(leads, tuple(weighed), reasons, strengths)
