"""The ground truth: what DESIGN §2 says each write does to a slot, in plain Python.

Nothing here reads Palimpsest. The generator simulates every slot with :class:`SlotTruth` while it
draws the history, so each write carries the outcome the rules predict, and the questions ask the
same objects what held at a moment (world time) as known at a moment (system time).

Modelled (rules 1, 2, 4, 6): a single-value slot holds one valid card at a time; a different
value supersedes (the old card's validity closes at the new ``valid_from``); the same value
verifies; a write in the same session and turn as the slot's latest card overwrites it (the slip
is retracted); a conflicting write is queued when :func:`changes_counted` reaches
:data:`HIGH_FREQUENCY` or its ``valid_from`` lies :data:`LARGE_SPAN` back, and joins the slot's
pending case if one is open (one case per slot collects every proposal; a decision settles them
all: ``keep_old`` rejects every one, ``accept_new`` applies the latest). Multi-value slots
accumulate items; restating one verifies it. The generator only draws writes this model covers
(a new ``valid_from`` after the current card's, unless it is a large-span rewrite).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tests.benchmarks.aging.records import normalise_value

WINDOW = timedelta(days=30)
HIGH_FREQUENCY = 3
LARGE_SPAN = timedelta(days=30)
AGING = timedelta(days=180)


def changes_counted(change_times: list[datetime], now: datetime, window: timedelta = WINDOW) -> int:
    """The changes rule 4 counts for a conflicting write at ``now``: those recorded in the trailing
    window, *the incoming one included* (the third change in 30 days is the one queued)."""
    since = now - window
    return sum(1 for moment in change_times if since < moment <= now) + 1


class ModelError(Exception):
    """The generator drew a write the model does not cover: a bug in the generator."""


@dataclass
class Card:
    value: str
    valid_from: datetime
    recorded_at: datetime
    ref: int
    session: str | None = None
    turn: str | None = None
    #: (recorded at, valid_to): when the card's validity was closed, and where.
    closures: list[tuple[datetime, datetime]] = field(default_factory=list)
    retracted_at: datetime | None = None
    verified: list[datetime] = field(default_factory=list)

    def valid_to(self, known_at: datetime) -> datetime | None:
        closed = [valid_to for at, valid_to in self.closures if at <= known_at]
        return closed[-1] if closed else None

    def known(self, known_at: datetime) -> bool:
        return self.recorded_at <= known_at and (self.retracted_at is None or self.retracted_at > known_at)

    def holds(self, valid_at: datetime, known_at: datetime) -> bool:
        valid_to = self.valid_to(known_at)
        open_then = valid_to is None or valid_at < valid_to
        return self.known(known_at) and self.valid_from <= valid_at and open_then

    def anchor(self, at: datetime) -> datetime:
        """Where its age counts from at ``at``: the later of valid_from and the last verification."""
        return max([self.valid_from, *(v for v in self.verified if v <= at)])


@dataclass(frozen=True)
class Proposal:
    """A queued write waiting in a case."""

    ref: int
    value: str
    valid_from: datetime


@dataclass
class Case:
    """A slot's arbitration case: opened by a queued write (``ref``), joined by every later one
    while it is pending (``proposals``), pending from ``opened_at`` until ``decided_at``."""

    ref: int
    opened_at: datetime
    proposals: list[Proposal] = field(default_factory=list)
    decided_at: datetime | None = None
    decision: str | None = None

    @property
    def latest(self) -> Proposal:
        return self.proposals[-1]

    @property
    def value(self) -> str:
        return self.latest.value

    @property
    def valid_from(self) -> datetime:
        return self.latest.valid_from

    def pending(self, at: datetime) -> bool:
        return self.opened_at <= at and (self.decided_at is None or self.decided_at > at)


@dataclass
class SlotTruth:
    tenant: str
    subject: str
    label: str
    kind: str
    lang: str
    cardinality: str
    memory_type: str = "fact"
    cards: list[Card] = field(default_factory=list)
    change_times: list[datetime] = field(default_factory=list)
    cases: list[Case] = field(default_factory=list)

    @property
    def single(self) -> bool:
        return self.cardinality == "single_value"

    # ---- writing ------------------------------------------------------------------------------

    def write(self, value: str, at: datetime, valid_from: datetime, ref: int,
              session: str | None = None, turn: str | None = None) -> str:
        """Apply one write; the outcome Palimpsest should answer."""
        card = Card(value, valid_from, at, ref, session, turn)
        return self._single(card) if self.single else self._multi(card)

    def decide(self, case: Case, decision: str, at: datetime) -> str:
        """A person's decision on a pending case: ``keep_old`` rejects every proposal,
        ``accept_new`` applies the latest."""
        case.decided_at, case.decision = at, decision
        if decision == "keep_old":
            return "kept_old"
        if decision != "accept_new" or not self.single:
            raise ModelError(f"decision {decision!r} on a {self.cardinality} slot is not modelled")
        card = Card(case.value, case.valid_from, at, case.latest.ref)
        self._supersede(card, self._met(card))
        return "superseded"

    def _live(self) -> list[Card]:
        return [c for c in self.cards if c.retracted_at is None]

    def _met(self, card: Card) -> list[Card]:
        """Live cards whose validity overlaps the new card's [valid_from, ∞)."""
        return [c for c in self._live()
                if (end := c.valid_to(card.recorded_at)) is None or end > card.valid_from]

    def _single(self, card: Card) -> str:
        met = self._met(card)
        if not met:
            self.cards.append(card)
            return "remembered"
        if all(normalise_value(c.value) == normalise_value(card.value) for c in met):
            holder = next((c for c in met if c.valid_from <= card.valid_from), None)
            if holder is None:
                raise ModelError("a restatement reaching before the card it restates")
            holder.verified.append(card.recorded_at)
            return "verified"
        latest = max(met, key=lambda c: c.recorded_at)
        if card.session and card.turn and (latest.session, latest.turn) == (card.session, card.turn):
            latest.retracted_at = card.recorded_at
            card.valid_from = min(card.valid_from, latest.valid_from)
            self.cards.append(card)
            return "overwritten"
        at = card.recorded_at
        if changes_counted(self.change_times, at) >= HIGH_FREQUENCY or at - card.valid_from >= LARGE_SPAN:
            proposal = Proposal(card.ref, card.value, card.valid_from)
            open_case = next(iter(self.pending(at)), None)
            if open_case is None:
                open_case = Case(card.ref, at)
                self.cases.append(open_case)
            open_case.proposals.append(proposal)
            return "queued"
        self._supersede(card, met)
        return "superseded"

    def _supersede(self, card: Card, met: list[Card]) -> None:
        for old in met:
            if old.valid_from >= card.valid_from:
                raise ModelError("a supersession reaching before the card it supersedes")
            old.closures.append((card.recorded_at, card.valid_from))
        self.cards.append(card)
        self.change_times.append(card.recorded_at)

    def _multi(self, card: Card) -> str:
        key = normalise_value(card.value)
        same = next((c for c in self._live() if normalise_value(c.value) == key), None)
        if same is None:
            self.cards.append(card)
            return "remembered"
        same.verified.append(card.recorded_at)
        return "verified"

    # ---- asking -------------------------------------------------------------------------------

    def values_at(self, valid_at: datetime, known_at: datetime) -> list[str]:
        return [c.value for c in self.cards if c.holds(valid_at, known_at)]

    def value_at(self, valid_at: datetime, known_at: datetime) -> str | None:
        values = self.values_at(valid_at, known_at)
        if len(values) > 1 and self.single:
            raise ModelError(f"{self.subject}/{self.label} holds {values} at {valid_at}")
        return values[0] if values else None

    def card_at(self, at: datetime) -> Card | None:
        return next((c for c in self.cards if c.holds(at, at)), None)

    def current(self, at: datetime) -> str | None:
        return self.value_at(at, at)

    def pending(self, at: datetime) -> list[Case]:
        return [case for case in self.cases if case.pending(at)]

    def aging(self, at: datetime) -> bool:
        """Rule 6: the single value valid at ``at`` has been unverified and unreplaced ≥ 180 days."""
        card = self.card_at(at) if self.single else None
        return card is not None and at - card.anchor(at) >= AGING

    def history(self, at: datetime) -> list[Card]:
        """The cards known at ``at`` (not retracted then), oldest first."""
        return sorted((c for c in self.cards if c.known(at)), key=lambda c: c.valid_from)


@dataclass(frozen=True)
class EventTruth:
    ref: int
    tenant: str
    subject: str
    description: str
    occurred_at: datetime
    recorded_at: datetime
