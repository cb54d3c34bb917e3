"""World-time placement of a single-value card: what a new card closes, withdraws and leaves.

A single-value slot holds at most one valid card at any world time. A new card valid over
``[start, end)`` (``end`` None = open) takes that stretch over. For every live card it meets:

- one that started before ``start`` is closed at ``start`` (its ``valid_to`` becomes ``start``);
- one that started inside the stretch is retracted: the new card says it never held there;
- the part of a card that outlasts ``end`` continues as a new card of the same value from ``end``.

Nothing is edited in place: closing a validity is the supersede-fork, and a continuation is a new
card linked to the one it continues.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID


@dataclass(frozen=True)
class Span:
    card_id: UUID
    valid_from: datetime
    valid_to: datetime | None


@dataclass(frozen=True)
class Continuation:
    source_id: UUID
    valid_from: datetime
    valid_to: datetime | None


@dataclass(frozen=True)
class Placement:
    closed: dict[UUID, datetime]
    retracted: tuple[UUID, ...]
    continued: tuple[Continuation, ...]

    @property
    def touched(self) -> tuple[UUID, ...]:
        return (*self.closed, *self.retracted)


def _ends_after(valid_to: datetime | None, moment: datetime | None) -> bool:
    if moment is None:
        return False
    return valid_to is None or valid_to > moment


def overlaps(span: Span, start: datetime, end: datetime | None) -> bool:
    starts_before_end = end is None or span.valid_from < end
    ends_after_start = span.valid_to is None or span.valid_to > start
    return starts_before_end and ends_after_start


def place(live: Iterable[Span], start: datetime, end: datetime | None) -> Placement:
    closed: dict[UUID, datetime] = {}
    retracted: list[UUID] = []
    continued: list[Continuation] = []
    for span in sorted(live, key=lambda s: s.valid_from):
        if not overlaps(span, start, end):
            continue
        if span.valid_from < start:
            closed[span.card_id] = start
        else:
            retracted.append(span.card_id)
        if end is not None and _ends_after(span.valid_to, end):
            continued.append(Continuation(span.card_id, end, span.valid_to))
    return Placement(closed, tuple(retracted), tuple(continued))


def overlapping(spans: Iterable[Span]) -> tuple[Span, Span] | None:
    """The first two spans that share a moment of world time, if any."""
    ordered = sorted(spans, key=lambda s: s.valid_from)
    for earlier, later in zip(ordered, ordered[1:], strict=False):
        if earlier.valid_to is None or earlier.valid_to > later.valid_from:
            return earlier, later
    return None
