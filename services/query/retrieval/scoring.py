"""Post-processing of the read path (DESIGN §3): fusion, decay, scope boost and the alert blocks.

Pure functions over plain data: no database, no clock (``now`` is passed in; datetimes are tz-aware).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

KINDS = frozenset({"state", "event", "knowledge"})
CARDINALITIES = frozenset({"single_value", "multi_value"})
SCOPES = frozenset({"personal", "project", "group", "global"})


@dataclass(frozen=True)
class Candidate:
    """One card as a route returns it; ``group_id`` keeps two groups' slots apart;
    ``conversation``: a turn of a conversation (an event tagged ``conversation``)."""

    card_id: UUID
    kind: str
    cardinality: str | None
    scope: str
    project_id: str | None
    subject: str | None
    label: str | None
    value: str
    valid_from: datetime | None
    valid_to: datetime | None
    occurred_at: datetime | None
    recorded_at: datetime
    verified_at: datetime | None
    superseded: bool
    edges: tuple[tuple[str, UUID], ...] = ()
    group_id: str | None = None
    memory_type: str | None = None
    conversation: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown card kind {self.kind!r}")
        if self.scope not in SCOPES:
            raise ValueError(f"unknown scope {self.scope!r}")
        if self.kind == "state" and self.cardinality not in CARDINALITIES:
            raise ValueError(f"state card {self.card_id} needs a cardinality, got {self.cardinality!r}")

    @property
    def is_single_state(self) -> bool:
        return self.cardinality == "single_value" and self.kind == "state"


@dataclass(frozen=True)
class Contradiction:
    card_ids: tuple[UUID, UUID]  # smaller id first
    reason: str


@dataclass(frozen=True)
class Ranking:
    """A route's answer for fusion: card ids best first, and how strongly the route found each one
    (in (0, 1]: a similarity, a share of the query's term weight; None: every hit at full
    strength)."""

    ids: Sequence[UUID]
    strengths: Sequence[float] | None = None
    #: Cards of equal strength share the rank of the first of them: the route's order among
    #: equals is no judgement (the slot stage weighs a person's slots alike); a route that orders
    #: equals on purpose (tags: the newest first) leaves it off.
    shared: bool = False

    def __post_init__(self) -> None:
        if self.strengths is not None and len(self.strengths) != len(self.ids):
            raise ValueError("a ranking needs one strength per id")

    def strength(self, index: int) -> float:
        return 1.0 if self.strengths is None else self.strengths[index]


Rankings = Mapping[str, "Ranking | Sequence[UUID]"]


def as_ranking(found: Ranking | Sequence[UUID]) -> Ranking:
    return found if isinstance(found, Ranking) else Ranking(found)


def rrf(rankings: Rankings, k: int = 60, weights: Mapping[str, float] | None = None) -> dict[UUID, float]:
    """Reciprocal Rank Fusion that keeps what a route knows about strength: Σ over routes of
    ``weight × strength / (k + rank)``, rank from 1; repeats in a route count once, at their best
    rank (the ranks :func:`route_ranks` reports). With every strength and weight 1 it is plain
    RRF. Ranks alone compress — ranks 1 and 4 of a route differ by under 5 % at k = 60 — so a
    route that measures how well a card matches says so through the strength. In a ``shared``
    ranking, cards of the same strength share the rank of the first of them."""
    scores: dict[UUID, float] = {}
    for route, found in rankings.items():
        ranking = as_ranking(found)
        weight = 1.0 if weights is None else weights.get(route, 1.0)
        seen: set[UUID] = set()
        rank, previous = 0, None
        for index, card_id in enumerate(ranking.ids):
            if card_id in seen:
                continue
            seen.add(card_id)
            strength = ranking.strength(index)
            if not ranking.shared or strength != previous:
                rank, previous = index + 1, strength
            scores[card_id] = scores.get(card_id, 0.0) + weight * strength / (k + rank)
    return scores


def by_score(scores: Mapping[UUID, float]) -> list[UUID]:
    """Card ids best first; equal scores in id order (a UUID orders by its integer, which compares
    without a call into Python)."""
    return sorted(scores, key=lambda card_id: (-scores[card_id], card_id.int))


def route_ranks(rankings: Rankings) -> dict[UUID, dict[str, int]]:
    """Each card's 1-based rank per route that found it (its best rank there), for ``explain``."""
    ranks: dict[UUID, dict[str, int]] = {}
    for route, found in rankings.items():
        for rank, card_id in enumerate(as_ranking(found).ids, start=1):
            ranks.setdefault(card_id, {}).setdefault(route, rank)
    return ranks


@dataclass(frozen=True)
class DecayPolicy:
    """Half-life decay as a bounded prior (DESIGN rule 5): ``β + (1 − β)·e^(−λ·Δt_days)``, so a
    card keeps at least ``floor`` (β) of its relevance however old it is; the half-life of the
    decaying part is ln 2 / λ. ``bounded=False`` is the old rule, ``e^(−λ·Δt)`` for every card
    (kept as a setting so benchmarks can show the difference).

    single_value 0.02 (~35 days): an address or job title is replaced, so an old one is likely wrong
    — but the value a slot holds at the asked moment is the answer, not decayed for its age
    (:meth:`exempt`: its age is the aging warning's business).
    multi_value 0.005 (~139 days): skills and interests accumulate; an old one is still mostly true.
    event 0.01 (~69 days): an event never stops having happened, so it fades slower than a single-value
    fact; its relevance, not its truth, declines.
    knowledge 0.003 (~231 days): concepts are durable; whether one is outdated is flagged separately
    (``stale_knowledge``), not buried by decay.
    """

    single_value: float = 0.02
    multi_value: float = 0.005
    event: float = 0.01
    knowledge: float = 0.003
    floor: float = 0.5
    bounded: bool = True

    def __post_init__(self) -> None:
        if not 0.0 <= self.floor <= 1.0:
            raise ValueError(f"the decay floor lies in [0, 1], got {self.floor}")

    def rate(self, candidate: Candidate) -> float:
        if candidate.kind == "state":
            return self.single_value if candidate.cardinality == "single_value" else self.multi_value
        return self.event if candidate.kind == "event" else self.knowledge

    def exempt(self, candidate: Candidate) -> bool:
        """The valid value of a single-value slot at the asked moment: never decayed."""
        return self.bounded and candidate.is_single_state and not candidate.superseded

    def factor(self, candidate: Candidate, days: float) -> float:
        """What ``days`` of age (≥ 0) leave of ``candidate``'s relevance."""
        if self.exempt(candidate):
            return 1.0
        fading = math.exp(-self.rate(candidate) * max(0.0, days))
        return self.floor + (1.0 - self.floor) * fading if self.bounded else fading


def _later(*times: datetime | None) -> datetime:
    return max(t for t in times if t is not None)


def decay_anchor(candidate: Candidate) -> datetime:
    """Where Δt counts from: the later of the world time (occurred_at for events, else valid_from;
    recorded_at when neither is known) and the last verification."""
    world = candidate.valid_from
    if candidate.kind == "event":
        world = candidate.occurred_at or candidate.valid_from
    return _later(world or candidate.recorded_at, candidate.verified_at)


def age_days(candidate: Candidate, moment: datetime) -> float:
    """Days from :func:`decay_anchor` up to ``moment`` (the asked moment); 0 for an anchor after it."""
    return max(0.0, (moment - decay_anchor(candidate)).total_seconds() / 86_400)


DEFAULT_DECAY = DecayPolicy()


def decay(score: float, candidate: Candidate, now: datetime, policy: DecayPolicy = DEFAULT_DECAY) -> float:
    """``score`` times what its age up to ``now`` leaves of it (:meth:`DecayPolicy.factor`)."""
    return score * policy.factor(candidate, age_days(candidate, now))


@dataclass(frozen=True)
class ScopeBoost:
    """Multiplicative factors: current project > personal > group > global.

    A project card of another project (or any project card when no project is current) is treated as
    global: it is visible but must not outrank what belongs here.
    """

    current_project: float = 1.2
    personal: float = 1.1
    group: float = 1.0
    global_: float = 0.9

    def largest(self, current_project: str | None) -> float:
        """The most any card can be boosted by, for a query in ``current_project`` (or none)."""
        return max(self.current_project if current_project is not None else self.global_,
                   self.personal, self.group, self.global_)

    def factor(self, candidate: Candidate, current_project: str | None) -> float:
        if candidate.scope == "project":
            same = current_project is not None and candidate.project_id == current_project
            return self.current_project if same else self.global_
        return {"personal": self.personal, "group": self.group}.get(candidate.scope, self.global_)


DEFAULT_BOOSTS = ScopeBoost()


def scope_boost(
    score: float, candidate: Candidate, current_project: str | None, boosts: ScopeBoost = DEFAULT_BOOSTS
) -> float:
    return score * boosts.factor(candidate, current_project)


def drop_superseded(candidates: Iterable[Candidate], as_of: bool) -> list[Candidate]:
    """Superseded cards stay only when the query asks about the past (as-of); order is kept."""
    return [c for c in candidates if as_of or not c.superseded]


def _normalised(value: str) -> str:
    return " ".join(value.split()).casefold()


def _pair(a: UUID, b: UUID) -> tuple[UUID, UUID]:
    return (a, b) if a < b else (b, a)


def contradictions(candidates: Iterable[Candidate]) -> list[Contradiction]:
    """Valid (not superseded) cards in conflict: two single-value state cards of one slot (scope, project,
    group, subject, label) whose values differ once casefolded and whitespace-normalised, or two cards
    joined by a ``contradicts`` edge (either direction). Both ends must be among the candidates.
    One entry per pair, sorted by the pair's ids; a pair found both ways carries both reasons."""
    valid = {c.card_id: c for c in candidates if not c.superseded}
    reasons: dict[tuple[UUID, UUID], list[str]] = {}
    slots: dict[tuple[str, str | None, str | None, str | None, str], list[Candidate]] = {}
    for card in valid.values():
        if card.is_single_state and card.label is not None:
            key = (card.scope, card.project_id, card.group_id, card.subject, card.label)
            slots.setdefault(key, []).append(card)
    for (_, _, _, subject, label), cards in slots.items():
        for i, a in enumerate(cards):
            for b in cards[i + 1:]:
                if _normalised(a.value) != _normalised(b.value):
                    reason = f"same slot {subject}/{label} holds different values"
                    reasons.setdefault(_pair(a.card_id, b.card_id), []).append(reason)
    for card in valid.values():
        for edge, other in card.edges:
            if edge == "contradicts" and other in valid and other != card.card_id:
                found = reasons.setdefault(_pair(card.card_id, other), [])
                if "linked by contradicts" not in found:
                    found.append("linked by contradicts")
    return [Contradiction(pair, "; ".join(why)) for pair, why in sorted(reasons.items())]


def aging_facts(candidates: Iterable[Candidate], now: datetime, days: int = 180) -> list[UUID]:
    """Single-value state cards, not superseded, whose later of valid_from (recorded_at when unknown) and
    verified_at is ≥ ``days`` old; oldest first, then by id."""
    facts = [c for c in candidates if c.is_single_state and not c.superseded]
    return _older_than([(_later(c.valid_from or c.recorded_at, c.verified_at), c.card_id) for c in facts],
                       now, days)


def stale_knowledge(candidates: Iterable[Candidate], now: datetime, days: int = 90) -> list[UUID]:
    """Knowledge cards whose later of recorded_at and verified_at is ≥ ``days`` old; oldest first."""
    knowledge = [c for c in candidates if c.kind == "knowledge"]
    return _older_than([(_later(c.recorded_at, c.verified_at), c.card_id) for c in knowledge], now, days)


def _older_than(anchors: list[tuple[datetime, UUID]], now: datetime, days: float) -> list[UUID]:
    limit = timedelta(days=days)
    return [card_id for anchor, card_id in sorted(anchors) if now - anchor >= limit]


def top_n(scored: Mapping[UUID, float], n: int = 5,
          newer: Mapping[UUID, datetime] | None = None) -> list[tuple[UUID, float]]:
    """The ``n`` highest scores, highest first; equal scores the newer first (``newer``: each
    card's decay anchor, when given), then in card_id order."""
    if n <= 0:
        return []
    if newer is None:
        return sorted(scored.items(), key=lambda item: (-item[1], item[0]))[:n]
    return sorted(scored.items(),
                  key=lambda item: (-item[1], -newer[item[0]].timestamp(), item[0]))[:n]
