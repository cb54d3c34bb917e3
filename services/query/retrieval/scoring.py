"""What the read path's stages share (DESIGN §3): the candidate card, a route's ranking, the
caller's writes not projected yet, the keys of what a question names, and the pure formulas of
decay (rule 5), scope boost and the top n.

Pure functions over plain data: no database, no clock (``now`` is passed in; datetimes are tz-aware).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
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
class PendingWrite:
    """A write the caller made whose events the read models may not hold yet: ``candidate`` is the
    card it created; ``position`` its notification id."""

    position: int
    candidate: Candidate
    #: The write's provenance, for a question narrowed to agents or sessions.
    agent_id: str | None = None
    session_id: str | None = None


SlotKey = tuple[str, str | None, str | None, str | None, str | None]
#: What a question can name to be answered first: a slot, or a memory type outside any slot
#: (``("=type", "blocker")``: "where are we stuck").
LeadKey = SlotKey | tuple[str, str]


def slot_key(card: Candidate) -> SlotKey:
    """Which slot a state card belongs to: scope, project, group, subject, label."""
    return (card.scope, card.project_id, card.group_id, card.subject, card.label)


def type_key(memory_type: str) -> tuple[str, str]:
    return ("=type", memory_type)


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


def by_score(scores: Mapping[UUID, float]) -> list[UUID]:
    """Card ids best first; equal scores in id order (a UUID orders by its integer, which compares
    without a call into Python)."""
    return sorted(scores, key=lambda card_id: (-scores[card_id], card_id.int))


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


def later(*times: datetime | None) -> datetime:
    """The latest of ``times``, those that are None left out."""
    return max(t for t in times if t is not None)


def decay_anchor(candidate: Candidate) -> datetime:
    """Where Δt counts from: the later of the world time (occurred_at for events, else valid_from;
    recorded_at when neither is known) and the last verification."""
    world = candidate.valid_from
    if candidate.kind == "event":
        world = candidate.occurred_at or candidate.valid_from
    return later(world or candidate.recorded_at, candidate.verified_at)


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
