"""The plain data the benchmark's parts hand each other: slots, statements, questions, answers."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

#: A slot as the benchmark names it: (subject, normalised label).
SlotKey = tuple[str, str]

_SEPARATORS = re.compile(r"[\s\-]+")


def normalise_label(label: str) -> str:
    """``"Job Title"`` → ``"job_title"``: how a label is compared, whatever the caller wrote."""
    return _SEPARATORS.sub("_", label.strip().lower())


def normalise_value(value: str) -> str:
    """Casefolded, whitespace collapsed: how values are compared."""
    return " ".join(value.split()).casefold()


def slot_key(subject: str, label: str) -> SlotKey:
    return subject, normalise_label(label)


@dataclass(frozen=True)
class Statement:
    """One write as a baseline stores it: every statement ever made, one row each."""

    ref: int
    tenant: str
    kind: str
    text: str
    recorded_at: datetime
    subject: str | None = None
    label: str | None = None
    value: str | None = None


@dataclass(frozen=True)
class Item:
    """One ranked result, whichever system returned it. ``ref`` is the write (op id) it came from,
    when known; ``superseded`` and ``aging`` are what Palimpsest says of it (baselines: False)."""

    kind: str
    subject: str | None
    label: str | None
    value: str
    ref: int | None = None
    superseded: bool = False
    aging: bool = False

    @property
    def slot(self) -> SlotKey | None:
        if self.subject is None or self.label is None:
            return None
        return slot_key(self.subject, self.label)


@dataclass
class Answer:
    items: list[Item]
    ms: float
    #: Slots named by a contradiction or arbitration alert; None: the system has no alerts.
    alert_slots: set[SlotKey] | None = None
    error: str | None = None


@dataclass(frozen=True)
class Question:
    """One question with its ground truth. ``kind``: current, as_of_valid, as_of_known, temporal,
    multi. ``expected``: the values (current, as-of: one; multi: every valid item); ``refs``: the
    expected events' op ids (temporal)."""

    qid: str
    checkpoint: int
    tenant: str
    kind: str
    lang: str
    text: str
    template: str
    names_label: bool
    slot_kind: str | None = None
    slot: SlotKey | None = None
    expected: tuple[str, ...] = ()
    refs: tuple[int, ...] = ()
    valid_at: datetime | None = None
    known_at: datetime | None = None
    top_n: int = 5
    #: The slot has an arbitration case pending at the checkpoint: an alert should name it.
    conflict: bool = False
    #: ``dev`` (the material the retrieval code was written against) or ``test`` (:mod:`testsplit`).
    split: str = "dev"

    @property
    def as_of(self) -> bool:
        return self.valid_at is not None or self.known_at is not None


@dataclass
class Snapshot:
    """What holds in one tenant at a checkpoint: each single-value slot's valid value, the slots
    whose value is aging (≥ 180 days unverified and unreplaced), those with a pending case."""

    current: dict[SlotKey, str] = field(default_factory=dict)
    aging: set[SlotKey] = field(default_factory=set)
    conflicted: set[SlotKey] = field(default_factory=set)


@dataclass(frozen=True)
class CardRef:
    """What a write result's card id stands for: its write and, for a state, its slot."""

    ref: int
    slot: SlotKey | None = None


RefMap = dict[UUID, CardRef]
