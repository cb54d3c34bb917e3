"""Slot resolution (DESIGN rule 12): a model's subject and label are suggestions; the slot is ours.

Before an extracted state candidate becomes a command, :func:`resolve` decides whose slot it is
and under which label, against the slots the tenant already holds:

* the **subject** — the first person ("I", "me", 我 …) is ``user``; a name is the subject already
  holding it, written alike (case, width, script) or as a part of it ("Jonas" for "Jonas Weber"),
  or else a new subject;
* the **label**, tried in order, the first that answers wins: the same label in normalised form
  (case, separators, script, a plural of the cardinality table's names); the model's own choice
  among the labels it was shown (``existing_label``), unless the two labels name different
  concepts; a concept of the lexicon that both labels name (``home city`` and ``residence``); the
  embeddings against the subject's slots — the mean of the labels' similarity and that of the
  attribute as stated ("diet: vegetarian" against "eating habits: vegan"), for the labels do not
  tell "favourite drink" from "favourite food" and the values do not tell an employer from a
  client — close enough (``reuse``) reuses, near (``near``) opens a new slot that becomes a
  consolidation proposal beside its twin, else a new slot.

The decision and its reason are recorded with the candidate (``Ingestion.Extracted``), so the
commands a worker rebuilds after a crash are the ones decided the first time. Pure: the label
similarities come in as a function.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from domain.rules.cardinality import MULTI_VALUE_LABELS, SINGLE_VALUE_LABELS, normalise_label
from domain.rules.tags import to_simplified
from services.query.retrieval.lexicon import CONCEPTS, concept_strengths, concepts_of_label
from services.query.retrieval.naming import label_text, label_words

#: The subject a first-person candidate is about: the person speaking to the assistant.
USER = "user"
#: What a model writes for the speaker, folded: pronouns of the first person and the names the
#: prompt itself gives the speaker.
FIRST_PERSON = frozenset({
    "i", "me", "my", "mine", "myself", "user", "the user", "speaker", "the speaker",
    "我", "我自己", "自己", "本人", "用户", "使用者",
})
#: What a model puts before a relation's name: "my sister", "user's sister", 我的姊姊 → sister.
_POSSESSIVE = re.compile(r"^(?:my|our|the user'?s|user'?s|the)\s+|^(?:我的|我们的|我們的)")
_SPACES = re.compile(r"\s+")
_TABLE = SINGLE_VALUE_LABELS | MULTI_VALUE_LABELS

#: How close a candidate (its label, its value) sits to each of some slots: label → closeness.
Similarities = Callable[[str, str, Sequence["KnownSlot"]], Mapping[str, float]]


class Decision(StrEnum):
    """What became of a candidate's label."""

    #: An existing slot of the subject.
    REUSED = "reused"
    #: A new slot, nothing close to it.
    NEW = "new"
    #: A new slot that sits close to an existing one: a consolidation proposal is filed.
    NEAR_TWIN = "near_twin"


@dataclass(frozen=True)
class KnownSlot:
    """One of the tenant's slots as resolution sees it."""

    subject: str
    label: str
    cardinality: str
    #: Its current values, the newest first.
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class Resolution:
    """Where a candidate lands: its subject and label, the decision and why; for a near twin,
    the twin's label and how close it sits."""

    subject: str
    label: str
    decision: Decision
    reason: str
    twin: str | None = None
    score: float | None = None

    def stored(self) -> dict[str, object]:
        return {"subject": self.subject, "label": self.label, "decision": self.decision.value,
                "reason": self.reason, "twin": self.twin, "score": self.score}


@dataclass(frozen=True)
class Thresholds:
    """Label embedding similarities: at least ``reuse`` reuses a slot; at least ``near`` opens a
    new slot proposed as a twin of the closest."""

    reuse: float
    near: float


def fold_name(text: str) -> str:
    """A name or label as compared: NFKC, lower case, Simplified, single spaces."""
    folded = to_simplified(unicodedata.normalize("NFKC", text).casefold())
    return _SPACES.sub(" ", folded).strip()


def resolve_subject(subject: str, known: Sequence[str]) -> tuple[str, str]:
    """(the subject, why) for a candidate's ``subject`` among the tenant's ``known`` subjects."""
    folded = fold_name(subject)
    if not folded or folded in FIRST_PERSON:
        return USER, f"{subject!r} is the speaker" if subject else "no subject: the speaker"
    bare = _POSSESSIVE.sub("", folded).strip() or folded
    by_fold = {fold_name(name): name for name in known}
    for form in (folded, bare):
        if form in by_fold:
            name = by_fold[form]
            return name, "the same name" if name == subject else f"written as {name!r} before"
    words = set(bare.split())
    holding = [name for form, name in by_fold.items()
               if form != USER and words and words <= set(form.split())]
    if len(holding) == 1:
        return holding[0], f"{subject!r} is part of the name {holding[0]!r}"
    held = [name for form, name in by_fold.items()
            if form != USER and len(words) > 1 and set(form.split()) < words]
    if len(held) == 1:
        return held[0], f"{held[0]!r} is part of the name {subject!r}"
    return subject if bare == folded else bare, "a subject not seen before"


def _label_key(label: str) -> str:
    """A label's normalised form: ``Job Title`` / ``job-title`` → ``job_title``, script folded;
    a plural the cardinality table names, or whose singular it names, is its singular
    (``hobbies`` → ``hobby``)."""
    key = to_simplified(normalise_label(unicodedata.normalize("NFKC", label)))
    single = key[:-3] + "y" if key.endswith("ies") else key[:-1] if key.endswith("s") else ""
    return single if single and {key, single} & _TABLE else key


def label_concepts(label: str) -> frozenset[str]:
    """The lexicon's concepts a label stands for (``concepts_of_label``); for a label that names
    none that way, those it asks about as a question would (住在哪, "where she works")."""
    named = concepts_of_label(to_simplified(label.casefold()), label_words(label))
    return named or frozenset(concept_strengths(label_text(label)))


def concept_cardinality(label: str) -> str | None:
    """The cardinality the table gives a concept's labels, for a label that is one of them in
    another language or script (興趣 is ``interests``: multi-value; 居住地 is ``address``:
    single-value); None otherwise. A label that only shares a concept's words gets none: a
    slot nobody declared stays single-value (``domain.rules.cardinality``)."""
    key = _label_key(label)
    found = {"single_value" if name in SINGLE_VALUE_LABELS else "multi_value"
             for concept in CONCEPTS if key in {_label_key(own) for own in concept.labels}
             for name in map(normalise_label, concept.labels) if name in _TABLE}
    return found.pop() if len(found) == 1 else None


def resolve_label(label: str, value: str, chosen: str | None, slots: Sequence[KnownSlot],
                  similarities: Similarities | None, thresholds: Thresholds,
                  ) -> tuple[str, Decision, str, str | None, float | None]:
    """(label, decision, why, twin, score) for a candidate's ``label`` and ``value`` among one
    subject's ``slots``; ``chosen``: the existing label the model said it updates."""
    labels = [slot.label for slot in slots]
    by_key = {_label_key(existing): existing for existing in labels}
    if (key := _label_key(label)) in by_key:
        return by_key[key], Decision.REUSED, "the same label in normalised form", None, None
    own = label_concepts(label)
    if chosen is not None and (existing := by_key.get(_label_key(chosen))) is not None:
        theirs = label_concepts(existing)
        if not own or not theirs or own & theirs:
            return existing, Decision.REUSED, "the model chose it among the labels shown", None, None
    sharing = [existing for existing in labels if own & label_concepts(existing)]
    close = dict(similarities(label, value, slots)) if similarities is not None and slots else {}
    if sharing:
        best = max(sharing, key=lambda existing: close.get(existing, 0.0))
        shared = sorted(own & label_concepts(best))
        return best, Decision.REUSED, f"both labels name the concept {'/'.join(shared)}", None, None
    # a label of another known concept is never a twin by embedding alone
    open_labels = [e for e in labels if not (own and label_concepts(e))]
    if not open_labels or not close:
        return label, Decision.NEW, "no slot of the subject comes close", None, None
    best = max(open_labels, key=lambda existing: close[existing])
    score = round(close[best], 3)
    if score >= thresholds.reuse:
        return best, Decision.REUSED, f"it sits {score} close to {best!r}", None, score
    if score >= thresholds.near:
        return label, Decision.NEAR_TWIN, f"a new slot {score} from {best!r}: proposed as its twin", \
            best, score
    return label, Decision.NEW, f"the closest label, {best!r}, sits {score} away", None, score


def resolve(subject: str, label: str, value: str, chosen: str | None,
            catalogue: Sequence[KnownSlot], similarities: Similarities | None,
            thresholds: Thresholds) -> Resolution:
    """Where a state candidate (``subject``, ``label``, ``value``, the model's ``chosen`` label)
    lands in the tenant's ``catalogue``."""
    subjects = list(dict.fromkeys(slot.subject for slot in catalogue))
    resolved_subject, whose = resolve_subject(subject, subjects)
    slots = [slot for slot in catalogue if slot.subject == resolved_subject]
    name, decision, why, twin, score = resolve_label(label, value, chosen, slots, similarities,
                                                     thresholds)
    return Resolution(subject=resolved_subject, label=name, decision=decision,
                      reason=f"subject: {whose}; label: {why}", twin=twin, score=score)
