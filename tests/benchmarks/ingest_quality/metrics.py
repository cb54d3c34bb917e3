"""The figures of the ingest-quality benchmark: pure functions over one conversation's ground truth
and the cards its turns became (plain data, read back over REST).

A card *holds* a value of a fact when its text contains one of the value's ``match`` substrings
(folded: :func:`~tests.benchmarks.ingest_quality.dataset.holds`). A card is *of* a fact when it
holds one of its values; when it holds values of several facts, the facts whose subject is the
card's subject are preferred (a model's "Anna" for the fact about Anna), then those among whose
``label_variants`` the card's label is. Each card of a fact has one *value*: the current value it
holds if any, else the first it holds. Slots are the ``(subject, label)`` pairs of the state
cards, as the server stored them. A card *stores* a ``not_fact`` when it holds it — unless the
not_fact is a true value of some fact (the brother does live in Newcastle; the user does not):
then only a state card of another subject stores it (:func:`stores_not_fact`).

- **slot precision** — of the produced slots, the share that are of a fact and store no
  ``not_fact`` (a slot of nothing known — a hallucination or an attribute the truth does not list —
  counts against it);
- **slot recall** — of the facts, the share that some slot is of;
- **two cities** — single-value facts with, at the end, two or more currently valid cards of the
  fact that hold two different values or sit in two different slots (goal 0);
- **split facts** — facts (single- or multi-value) whose cards sit in two or more slots, valid or not;
- **supersessions right** — single-value facts with more than one value where, at the end, the
  current value is held by a valid card and no valid card's value is an earlier one;
- **multi-value completeness** — multi-value facts whose current values are all held by valid cards;
- **time anchoring right** — of the events found (an event card holding the event) and of the fact
  values with an exact ``valid_from`` found (a card of the fact with that value), the share whose
  card's ``occurred_at`` / ``valid_from`` falls on the true day in the conversation's zone;
- **not_facts stored** — ``not_facts`` stored by any card the turns became (goal 0).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from datetime import datetime
from zoneinfo import ZoneInfo

from tests.benchmarks.ingest_quality.dataset import Conversation, Fact, Value, folded, holds


@dataclass(frozen=True)
class Card:
    """A card a turn became, as the listing shows it; ``current``: valid now (not superseded)."""

    kind: str
    subject: str | None
    label: str | None
    value: str
    current: bool
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    occurred_at: datetime | None = None
    status: str | None = None
    card_id: str = ""

    @property
    def slot(self) -> tuple[str, str] | None:
        if self.kind != "state" or not self.subject or not self.label:
            return None
        return self.subject, self.label


@dataclass
class Ratio:
    """``hit`` of ``total``; printed ``0.81 (34/42)``."""

    hit: int = 0
    total: int = 0

    @property
    def value(self) -> float | None:
        return self.hit / self.total if self.total else None

    def __add__(self, other: Ratio) -> Ratio:
        return Ratio(self.hit + other.hit, self.total + other.total)

    def __str__(self) -> str:
        return f"{self.value:.2f} ({self.hit}/{self.total})" if self.total else "– (0/0)"

    def count(self, of: str) -> str:
        """As a count: ``2 (of 14 single-value facts)``."""
        return f"{self.hit} (of {self.total} {of})"


@dataclass
class Quality:
    """The quality figures of one conversation, or summed over several."""

    precision: Ratio = field(default_factory=Ratio)
    recall: Ratio = field(default_factory=Ratio)
    two_cities: Ratio = field(default_factory=Ratio)
    split_facts: Ratio = field(default_factory=Ratio)
    supersessions: Ratio = field(default_factory=Ratio)
    completeness: Ratio = field(default_factory=Ratio)
    anchoring: Ratio = field(default_factory=Ratio)
    not_facts: Ratio = field(default_factory=Ratio)

    def __add__(self, other: Quality) -> Quality:
        return Quality(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})


def same_subject(card_subject: str | None, fact_subject: str) -> bool:
    """Whether a card's subject names the fact's (folded; a name inside the other counts)."""
    a, b = folded(card_subject or "user").strip(), folded(fact_subject).strip()
    return a == b or (min(len(a), len(b)) >= 3 and (a in b or b in a))


def label_key(label: str) -> str:
    """A label as compared with ``label_variants``: folded, ``_`` and ``-`` read as spaces."""
    return " ".join(re.split(r"[\s_\-]+", folded(label))).strip()


def facts_of(card: Card, facts: tuple[Fact, ...]) -> list[int]:
    """The indices of the facts ``card`` is of (see the module's docstring)."""
    found = [i for i, fact in enumerate(facts) if any(v.found_in(card.value) for v in fact.values)]
    if len(found) > 1:
        found = [i for i in found if same_subject(card.subject, facts[i].subject)] or found
    if len(found) > 1 and card.label:
        key = label_key(card.label)
        found = [i for i in found if key in {label_key(x) for x in facts[i].labels}] or found
    return found


def stores_not_fact(card: Card, not_fact: str, facts: tuple[Fact, ...]) -> bool:
    """Whether ``card`` stores ``not_fact``. A not_fact that is a true value of someone (the
    brother lives in Newcastle; the user does not) is stored only by a state card of another
    subject: a card of the brother holding it is right, an event naming it says nothing of whom."""
    if not holds(card.value, (not_fact,)):
        return False
    true_of = [fact for fact in facts if any(v.found_in(not_fact) for v in fact.values)]
    if not true_of:
        return True
    return card.kind == "state" and not any(same_subject(card.subject, f.subject) for f in true_of)


def value_of(card: Card, fact: Fact) -> Value | None:
    """The value of ``fact`` the card holds: a current one first."""
    for value in (*fact.current_values(), *fact.values):
        if value.found_in(card.value):
            return value
    return None


class Assigned:
    """The state cards of a conversation, each with the facts it is of."""

    def __init__(self, conversation: Conversation, cards: Iterable[Card]) -> None:
        self.facts = conversation.facts
        self.state = [c for c in cards if c.slot is not None]
        self.of = [set(facts_of(card, self.facts)) for card in self.state]

    def cards(self, fact: int, current: bool = False) -> list[Card]:
        return [card for card, of in zip(self.state, self.of, strict=True)
                if fact in of and (card.current or not current)]

    def slots(self) -> dict[tuple[str, str], set[int]]:
        """Each produced slot and the facts its cards are of."""
        found: dict[tuple[str, str], set[int]] = {}
        for card, of in zip(self.state, self.of, strict=True):
            assert card.slot is not None
            found.setdefault(card.slot, set()).update(of)
        return found


def slot_precision(conversation: Conversation, cards: list[Card]) -> Ratio:
    assigned = Assigned(conversation, cards)
    wrong = {card.slot for card in assigned.state
             if any(stores_not_fact(card, nf, conversation.facts) for nf in conversation.not_facts)}
    slots = assigned.slots()
    return Ratio(sum(1 for slot, of in slots.items() if of and slot not in wrong), len(slots))


def slot_recall(conversation: Conversation, cards: list[Card]) -> Ratio:
    assigned = Assigned(conversation, cards)
    return Ratio(sum(1 for i in range(len(conversation.facts)) if assigned.cards(i)),
                 len(conversation.facts))


def two_cities(conversation: Conversation, cards: list[Card]) -> Ratio:
    """Single-value facts with two valid cards of different values or slots, of all such facts."""
    assigned = Assigned(conversation, cards)
    singles = [i for i, fact in enumerate(conversation.facts) if fact.single]
    count = 0
    for i in singles:
        valid = assigned.cards(i, current=True)
        values = {v.value for card in valid if (v := value_of(card, conversation.facts[i]))}
        count += int(len(valid) >= 2 and (len(values) >= 2 or len({c.slot for c in valid}) >= 2))
    return Ratio(count, len(singles))


def split_details(conversation: Conversation, cards: list[Card]) -> list[str]:
    """A line per fact split over two or more slots, or single-value with two valid cards: the
    attribute, then each of its cards' slot and value (``*`` valid now)."""
    assigned = Assigned(conversation, cards)
    lines = []
    for i, fact in enumerate(conversation.facts):
        found = assigned.cards(i)
        doubled = fact.single and len(assigned.cards(i, current=True)) >= 2
        if len({card.slot for card in found}) >= 2 or doubled:
            held = "; ".join(f"{'*' if c.current else ''}{c.subject}/{c.label}={c.value[:40]!r}"
                             for c in found)
            lines.append(f"{conversation.id}: {fact.subject} — {fact.attribute}: {held}")
    return lines


def split_facts(conversation: Conversation, cards: list[Card]) -> Ratio:
    """Facts whose cards (valid or not) sit in two or more slots, of all facts."""
    assigned = Assigned(conversation, cards)
    split = sum(1 for i in range(len(conversation.facts))
                if len({card.slot for card in assigned.cards(i)}) >= 2)
    return Ratio(split, len(conversation.facts))


def supersessions(conversation: Conversation, cards: list[Card]) -> Ratio:
    assigned = Assigned(conversation, cards)
    asked = [i for i, fact in enumerate(conversation.facts) if fact.single and len(fact.values) > 1]
    right = 0
    for i in asked:
        fact = conversation.facts[i]
        held = {v.value for card in assigned.cards(i, current=True) if (v := value_of(card, fact))}
        current = {v.value for v in fact.current_values()}
        right += int(held == current)
    return Ratio(right, len(asked))


def completeness(conversation: Conversation, cards: list[Card]) -> Ratio:
    assigned = Assigned(conversation, cards)
    asked = [i for i, fact in enumerate(conversation.facts) if not fact.single]
    right = 0
    for i in asked:
        valid = assigned.cards(i, current=True)
        right += int(all(any(v.found_in(c.value) for c in valid)
                         for v in conversation.facts[i].current_values()))
    return Ratio(right, len(asked))


def _day(moment: datetime | None, zone: ZoneInfo) -> object:
    return moment.astimezone(zone).date() if moment is not None else None


def anchoring(conversation: Conversation, cards: list[Card]) -> Ratio:
    """Events and exact fact values found, and how many of them sit on their true day."""
    zone, ratio = conversation.zone, Ratio()
    for event in conversation.events:
        found = [c for c in cards if c.kind == "event" and event.found_in(c.value)]
        if found:
            ratio += Ratio(int(any(_day(c.occurred_at, zone) == event.occurred_on for c in found)), 1)
    assigned = Assigned(conversation, cards)
    for i, fact in enumerate(conversation.facts):
        for value in fact.values:
            if value.valid_from is None or value.vague:
                continue
            found = [c for c in assigned.cards(i) if (v := value_of(c, fact)) and v.value == value.value]
            if found:
                ratio += Ratio(int(any(_day(c.valid_from, zone) == value.valid_from for c in found)), 1)
    return ratio


def not_facts_stored(conversation: Conversation, cards: list[Card]) -> Ratio:
    """``not_facts`` some card holds, of all of them."""
    stored = sum(1 for nf in conversation.not_facts
                 if any(stores_not_fact(c, nf, conversation.facts) for c in cards))
    return Ratio(stored, len(conversation.not_facts))


def quality(conversation: Conversation, cards: list[Card]) -> Quality:
    """Every quality figure of one conversation from the cards its turns became (the turns' own
    episodic cards left out by the caller)."""
    return Quality(precision=slot_precision(conversation, cards), recall=slot_recall(conversation, cards),
                   two_cities=two_cities(conversation, cards), split_facts=split_facts(conversation, cards),
                   supersessions=supersessions(conversation, cards),
                   completeness=completeness(conversation, cards),
                   anchoring=anchoring(conversation, cards),
                   not_facts=not_facts_stored(conversation, cards))


@dataclass
class RunFigures:
    """How the ingest path ran: turns, their wall time, the proxy's counts, dead letters."""

    turns: int = 0
    seconds: float = 0.0
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated: int = 0  # calls whose tokens were estimated (the answer had no usage)
    dead_letters: int = 0
    unknown: int = 0
    candidates: int = 0  # what the model proposed
    written: int = 0  # the cards they became
    queued: dict[str, int] = field(default_factory=dict)  # pending arbitration cases by reason

    def per_turn(self, amount: float) -> float | None:
        return amount / self.turns if self.turns else None

    @property
    def turns_per_second(self) -> float | None:
        return self.turns / self.seconds if self.seconds > 0 else None
