"""Which slots hold one value and which accumulate: a hard-coded table, then the caller's word.

The table wins when the two disagree; the disagreement is kept on the slot so it can be audited.
A label neither the table nor the caller knows is single-value: a wrong "single" shows up as a
supersession someone can review, a wrong "multi" silently lets a user live in two cities at once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from domain.values import Cardinality

SINGLE_VALUE_LABELS = frozenset({
    "address", "home_address", "home_city", "city", "country", "location", "residence",
    "job_title", "title", "role", "position", "current_company", "company", "employer",
    "browser", "editor", "operating_system", "phone", "phone_number", "email", "timezone",
    "name", "nickname", "birthday", "date_of_birth", "age", "marital_status", "partner",
    "launch_date", "release_date", "deadline", "due_date", "status", "stage", "current_stage",
    "version", "diet", "manager", "team", "school",
})

MULTI_VALUE_LABELS = frozenset({
    "skills", "skill", "interests", "interest", "hobbies", "hobby", "languages", "language",
    "spoken_languages", "tools", "tool", "tools_used", "frameworks", "libraries", "topics",
    "topics_discussed", "allergies", "pets", "children", "friends", "projects", "goals",
    "favorite_foods", "likes", "dislikes", "certifications", "tech_stack",
})

_SEPARATORS = re.compile(r"[\s\-]+")


def normalise_label(label: str) -> str:
    """``"Job Title"`` → ``"job_title"``."""
    return _SEPARATORS.sub("_", label.strip().lower())


@dataclass(frozen=True)
class CardinalityDecision:
    cardinality: Cardinality
    declared: Cardinality | None
    from_table: bool

    @property
    def disagreed(self) -> bool:
        return self.declared is not None and self.declared is not self.cardinality


def decide_cardinality(label: str, declared: Cardinality | str | None) -> CardinalityDecision:
    declared_value = Cardinality(declared) if declared is not None else None
    normalised = normalise_label(label)
    if normalised in SINGLE_VALUE_LABELS:
        return CardinalityDecision(Cardinality.SINGLE, declared_value, from_table=True)
    if normalised in MULTI_VALUE_LABELS:
        return CardinalityDecision(Cardinality.MULTI, declared_value, from_table=True)
    return CardinalityDecision(declared_value or Cardinality.SINGLE, declared_value, False)
