"""Questions about now over raw conversation turns: the latest word on the matter first.

A conversation turn (an event card tagged ``conversation``, as ``ingest_turn`` stores it) is the
episodic record of what was said, and a later turn on the same matter speaks over it: "I live in
Leipzig" said in March is overtaken by "we moved to Dresden" said in May. Without a model nothing
says which turn supersedes which, so a question about now ranks them with the bounded prior of
DESIGN rule 5 (:class:`ConversationPrior`):

- the turns *on the matter* are those a route that matches the question's words or meaning
  (:data:`MATTER_ROUTES`) found at least ``share`` as strongly as the strongest turn it found;
- the latest of them is the latest word: Δt = 0, like the value a slot holds at the asked moment,
  never decayed for its age; each earlier one keeps ``floor + (1 − floor)·e^(−λ·Δt)`` of its
  relevance, Δt the days from when it was said to when the latest word was said;
- every other turn, and every other card, decays as rule 5 says (:class:`DecayPolicy`).

A question asks about now (:func:`question_reading`) when it asks for a current value
(``asks.reading``: tense, aspect and time words, English and Chinese), is not asked as of a moment
and names no range that ends before the asked moment (April, 上個月, yesterday). Any other
question asks about what was said or done: its turns rank by match alone, their age no penalty
(:func:`unaged`) — a turn from two years ago that answers "when did …" is not pushed below
yesterday's turn that shares a word with it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from domain.errors import InvalidCommandError
from services.query.retrieval.asks import RECORD, Reading, reading
from services.query.retrieval.query import RetrievalQuery
from services.query.retrieval.scoring import Candidate, Rankings, age_days, as_ranking

#: The routes that judge a card by the question's own words or meaning (not by time or a walk).
MATTER_ROUTES = ("semantic", "tags", "fuzzy")


def question_reading(query: RetrievalQuery) -> Reading:
    """What ``query`` asks for (see the module docstring), with the sign that decided."""
    if query.as_of:
        return Reading(RECORD, "asked as of a moment")
    try:
        ranges = query.time_ranges
    except InvalidCommandError:  # a vague time (之前, "a while ago"): the words decide
        ranges = []
    if any(r.end < query.reference_time for r in ranges):
        return Reading(RECORD, "names a time before the asked moment")
    return reading(query.text)


def asks_about_now(query: RetrievalQuery) -> bool:
    """Whether ``query`` asks for a current value (:func:`question_reading`)."""
    return question_reading(query).current


@dataclass(frozen=True)
class ConversationPrior:
    """The bounded prior over conversation turns for questions about now: λ ``rate`` per day,
    at least ``floor`` kept; a turn is on the matter at ``share`` of its route's strongest turn.
    ``enabled=False`` leaves conversation turns to :class:`DecayPolicy`, as any event."""

    rate: float = 0.1
    floor: float = 0.25
    share: float = 0.4
    enabled: bool = True

    def __post_init__(self) -> None:
        for name in ("floor", "share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"the conversation {name} lies in [0, 1], got {getattr(self, name)}")

    def factor(self, days: float) -> float:
        """What a turn said ``days`` before the latest word keeps of its relevance."""
        return self.floor + (1.0 - self.floor) * math.exp(-self.rate * max(0.0, days))


def is_turn(card: Candidate) -> bool:
    return card.kind == "event" and card.conversation


def on_the_matter(rankings: Rankings, turns: Iterable[UUID], share: float) -> set[UUID]:
    """The ``turns`` some matching route found at least ``share`` as strongly as its strongest."""
    wanted = set(turns)
    matter: set[UUID] = set()
    for name in MATTER_ROUTES:
        if name not in rankings:
            continue
        ranking = as_ranking(rankings[name])
        found: dict[UUID, float] = {}
        for index, card_id in enumerate(ranking.ids):
            if card_id in wanted:
                found[card_id] = max(found.get(card_id, 0.0), ranking.strength(index))
        best = max(found.values(), default=0.0)
        matter.update(card_id for card_id, strength in found.items() if strength >= share * best)
    return matter


def latest_first(rankings: Rankings, candidates: Mapping[UUID, Candidate],
                 prior: ConversationPrior) -> dict[UUID, tuple[float, float]]:
    """For each turn on the matter: (days before the latest word, the factor it keeps)."""
    turns = [card_id for card_id, card in candidates.items() if is_turn(card)]
    matter = on_the_matter(rankings, turns, prior.share)
    said = {card_id: _said(candidates[card_id]) for card_id in matter}
    latest = max(said.values(), default=None)
    if latest is None:
        return {}
    spans = {card_id: (latest - when).total_seconds() / 86_400 for card_id, when in said.items()}
    return {card_id: (days, prior.factor(days)) for card_id, days in spans.items()}


def unaged(candidates: Mapping[UUID, Candidate], moment: datetime) -> dict[UUID, tuple[float, float]]:
    """For a question about what was said or done, each turn: (its age in days at ``moment``,
    the factor 1): a turn's age is no penalty there (DESIGN rule 5)."""
    return {card_id: (age_days(card, moment), 1.0) for card_id, card in candidates.items()
            if is_turn(card)}


def _said(card: Candidate) -> datetime:
    return card.occurred_at or card.valid_from or card.recorded_at
