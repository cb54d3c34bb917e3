"""The conversations and their ground truth (``conversations/dev.json``, ``conversations/test.json``).

Each split file is ``{"split": …, "conversations": [...]}``; a conversation holds its turns (in
order, each with ``turn_id``, ``role``, ``said_at`` and ``text``), the facts its turns state
(subject, attribute, cardinality, the labels a model might give it, each value with the lower-case
substrings that recognise it, the turn that said it and since when it held, and the values
current at the end), the events it tells of (with the day each occurred) and ``not_facts``: things
said that are not true of anyone (a city considered and not chosen) and must not be stored.

A card's value *is* a truth value when it contains one of the value's ``match`` substrings, both
sides casefolded and with Traditional folded to Simplified (:func:`folded`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from projections.text import fold

HERE = Path(__file__).parent
CONVERSATIONS = HERE / "conversations"
SPLITS = ("dev", "test")


def folded(text: str) -> str:
    """NFKC, lower case, Traditional → Simplified: the form values and substrings are compared in."""
    return fold(text).casefold()


def holds(text: str, substrings: tuple[str, ...]) -> bool:
    """Whether ``text`` contains any of ``substrings`` (both folded)."""
    seen = folded(text)
    return any(part and folded(part) in seen for part in substrings)


@dataclass(frozen=True)
class Turn:
    turn_id: str
    role: str
    said_at: datetime
    text: str


@dataclass(frozen=True)
class Value:
    value: str
    match: tuple[str, ...]
    said_in: str
    valid_from: date | None = None
    vague: bool = False

    def found_in(self, text: str) -> bool:
        return holds(text, self.match)


@dataclass(frozen=True)
class Fact:
    subject: str
    attribute: str
    cardinality: str
    labels: tuple[str, ...]
    values: tuple[Value, ...]
    current: tuple[str, ...]

    @property
    def single(self) -> bool:
        return self.cardinality == "single_value"

    def value_named(self, name: str) -> Value:
        """The value ``name`` (as ``current`` lists it); one matching its own words if unlisted."""
        for value in self.values:
            if value.value == name:
                return value
        return Value(name, (name.lower(),), said_in="")

    def current_values(self) -> tuple[Value, ...]:
        return tuple(self.value_named(name) for name in self.current)

    def earlier_values(self) -> tuple[Value, ...]:
        now = {value.value for value in self.current_values()}
        return tuple(value for value in self.values if value.value not in now)


@dataclass(frozen=True)
class Event:
    what: str
    match: tuple[str, ...]
    said_in: str
    occurred_on: date

    def found_in(self, text: str) -> bool:
        return holds(text, self.match)


@dataclass(frozen=True)
class Conversation:
    id: str
    language: str
    timezone: str
    turns: tuple[Turn, ...]
    facts: tuple[Fact, ...] = ()
    events: tuple[Event, ...] = ()
    not_facts: tuple[str, ...] = ()
    split: str = ""

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def turn(self, turn_id: str) -> Turn:
        for turn in self.turns:
            if turn.turn_id == turn_id:
                return turn
        raise KeyError(f"{self.id} has no turn {turn_id!r}")


@dataclass
class TurnIndex:
    """Which conversation and turn a text (and, when texts repeat, a ``said_at``) belongs to."""

    by_text: dict[str, list[tuple[Conversation, Turn]]] = field(default_factory=dict)

    @classmethod
    def of(cls, conversations: list[Conversation]) -> TurnIndex:
        index = cls()
        for conversation in conversations:
            for turn in conversation.turns:
                index.by_text.setdefault(turn.text, []).append((conversation, turn))
        return index

    def find(self, text: str, said_at: str | None) -> tuple[Conversation, Turn] | None:
        found = self.by_text.get(text, [])
        if len(found) > 1 and said_at:
            try:
                when = datetime.fromisoformat(said_at)
            except ValueError:
                when = None
            found = [pair for pair in found if pair[1].said_at == when] or found
        return found[0] if found else None


def _day(raw: Any) -> date | None:
    return date.fromisoformat(str(raw)[:10]) if raw else None


def _value(raw: dict[str, Any]) -> Value:
    match = tuple(str(m).lower() for m in raw.get("match") or ()) or (str(raw["value"]).lower(),)
    return Value(value=str(raw["value"]), match=match, said_in=str(raw.get("said_in", "")),
                 valid_from=_day(raw.get("valid_from")), vague=bool(raw.get("valid_from_vague")))


def _fact(raw: dict[str, Any]) -> Fact:
    values = tuple(_value(v) for v in raw.get("values") or ())
    labels = tuple(str(label) for label in raw.get("label_variants") or ()) or (str(raw["attribute"]),)
    current = tuple(str(c) for c in raw.get("current") or ()) or tuple(v.value for v in values[-1:])
    return Fact(subject=str(raw.get("subject") or "user"), attribute=str(raw.get("attribute", "")),
                cardinality=str(raw.get("cardinality") or "single_value"), labels=labels,
                values=values, current=current)


def _event(raw: dict[str, Any]) -> Event:
    day = _day(raw.get("occurred_on"))
    if day is None:
        raise ValueError(f"event {raw.get('what')!r} has no occurred_on")
    match = tuple(str(m).lower() for m in raw.get("match") or ())
    return Event(what=str(raw.get("what", "")), match=match, said_in=str(raw.get("said_in", "")),
                 occurred_on=day)


def conversation(raw: dict[str, Any], split: str = "") -> Conversation:
    """One conversation from its JSON form."""
    turns = tuple(Turn(turn_id=str(t["turn_id"]), role=str(t.get("role") or "user"),
                       said_at=datetime.fromisoformat(str(t["said_at"])), text=str(t["text"]))
                  for t in raw["turns"])
    return Conversation(id=str(raw["id"]), language=str(raw.get("language", "")),
                        timezone=str(raw.get("timezone") or "UTC"), turns=turns,
                        facts=tuple(_fact(f) for f in raw.get("facts") or ()),
                        events=tuple(_event(e) for e in raw.get("events") or ()),
                        not_facts=tuple(str(n) for n in raw.get("not_facts") or ()), split=split)


def split_path(split: str) -> Path:
    return CONVERSATIONS / f"{split}.json"


def load(split: str, path: Path | None = None) -> list[Conversation]:
    """The conversations of ``split`` (from ``path``, default ``conversations/<split>.json``)."""
    path = path or split_path(split)
    if not path.exists():
        raise FileNotFoundError(f"no conversations for the {split} split: {path} does not exist")
    raw = json.loads(path.read_text(encoding="utf-8"))
    return [conversation(c, str(raw.get("split") or split)) for c in raw["conversations"]]
