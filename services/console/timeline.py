"""A slot's versions on both timelines, laid out for an SVG: valid time across, recorded time up.

Each card of the slot is one *version* of the slot; each row of its history (``card_versions``)
is a rectangle ``[valid_from, valid_to) × [known_from, known_to)`` — the bi-temporal picture. An
open end (still valid, still believed) reaches the plot's right or top edge and says so. Besides
the rectangles: the edges between the slot's cards (``supersedes``, ``updates`` …), a same-turn
retraction, each verification, the erasure of a tombstone and the slot's pending arbitration case
(its proposal, where it would start, when it was heard).

:func:`draw` is pure: the history (as the ``history`` operation answers it) and the clock in,
positions out, in the units of the SVG's ``viewBox`` (:data:`WIDTH` × :data:`HEIGHT`). The template
only writes what it is given.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from uuid import UUID

from services.entrypoints.schemas import ArbitrationCase
from services.query.queries import CardHistory, Version

WIDTH, HEIGHT = 960.0, 560.0
#: The plot inside the SVG: room on the left for the recorded-time labels, below for valid time.
LEFT, TOP, RIGHT, BOTTOM = 96.0, 20.0, WIDTH - 24.0, HEIGHT - 56.0
#: A version valid or known for an instant (replaced at once) is still drawn this wide.
MIN_SIDE = 4.0
TICKS = 5
#: Edges drawn between two versions of the slot.
REVISIONS = ("supersedes", "updates", "extends", "derives")
#: Roughly how wide a character of a version's label is (15 px type): Latin, and CJK (wide).
NARROW, WIDE = 8.5, 15.0
#: A label starts this far into its rectangle and keeps this much room at its end.
INSET = 24.0


@dataclass(frozen=True)
class Axis:
    """A span of time mapped onto a pixel range (``low`` at ``start``)."""

    start: datetime
    end: datetime
    low: float
    high: float

    def at(self, moment: datetime) -> float:
        share = (moment - self.start) / (self.end - self.start)
        return self.low + share * (self.high - self.low)


@dataclass(frozen=True)
class Box:
    """One row of a card's history: its rectangle, in data and in SVG units."""

    version: int
    valid_from: datetime
    valid_to: datetime | None
    known_from: datetime
    known_to: datetime | None
    x: float
    y: float
    width: float
    height: float
    retracted: bool
    change: str

    @property
    def open_valid(self) -> bool:
        return self.valid_to is None

    @property
    def open_known(self) -> bool:
        return self.known_to is None


@dataclass(frozen=True)
class Mark:
    """Something that happened at one moment: ``verified``, ``retracted``, ``erased``, a pending
    ``arbitration`` or a ``decided`` one."""

    kind: str
    at: datetime
    x: float
    y: float
    text: str


@dataclass(frozen=True)
class Drawn:
    """A card of the slot (one version of the slot) with its rectangles — of the versions believed
    for a while: a retracted version is drawn as its ``retracted`` mark — and its marks."""

    card_id: UUID
    value: str | None
    status: str
    colour: int
    boxes: tuple[Box, ...]
    marks: tuple[Mark, ...]

    @property
    def text(self) -> str:
        return "erased" if self.value is None else self.value

    @property
    def caption(self) -> str:
        """The label drawn in its latest rectangle: as much of it as fits ("" if nothing does)."""
        return fit(self.text, self.boxes[-1].width - INSET) if self.boxes else ""

    @property
    def anchor(self) -> tuple[float, float]:
        """Where an edge to or from this card starts: the middle of its latest rectangle."""
        box = self.boxes[-1]
        return box.x + box.width / 2, box.y + box.height / 2


@dataclass(frozen=True)
class Arrow:
    src: UUID
    dst: UUID
    edge: str
    x1: float
    y1: float
    x2: float
    y2: float


@dataclass(frozen=True)
class Tick:
    at: datetime
    position: float
    text: str


@dataclass(frozen=True)
class Layout:
    cards: tuple[Drawn, ...]
    arrows: tuple[Arrow, ...]
    cases: tuple[Mark, ...]
    valid: Axis
    known: Axis
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]
    now_x: float
    now_y: float
    width: float = WIDTH
    height: float = HEIGHT
    left: float = LEFT
    top: float = TOP
    right: float = RIGHT
    bottom: float = BOTTOM


def draw(history: Sequence[CardHistory], now: datetime,
         cases: Iterable[ArbitrationCase] = (), zone: tzinfo = UTC) -> Layout:
    """The layout of ``history`` (a slot's cards, oldest first) at ``now``, with the slot's
    arbitration ``cases`` (pending ones where they were heard, decided ones where the decision was
    recorded); tick labels in ``zone``."""
    pending = list(cases)
    valid = _axis(_valid_moments(history, pending, now), LEFT, RIGHT)
    known = _axis(_known_moments(history, pending, now), BOTTOM, TOP)
    drawn = tuple(_card(card, i, valid, known) for i, card in enumerate(history))
    return Layout(
        cards=drawn, arrows=_arrows(history, {d.card_id: d for d in drawn}),
        cases=tuple(_case(case, valid, known) for case in pending), valid=valid, known=known,
        x_ticks=_ticks(valid, zone), y_ticks=_ticks(known, zone), now_x=valid.at(now),
        now_y=known.at(now))


def fit(text: str, room: float) -> str:
    """``text`` cut (with "…") to what ``room`` units of width hold, a wide character counted
    wide."""
    used, kept = 0.0, list[str]()
    for char in text:
        used += WIDE if unicodedata.east_asian_width(char) in ("W", "F") else NARROW
        if used > room:
            return "".join(kept[:-1]) + "…" if len(kept) > 1 else ""
        kept.append(char)
    return text


# ---- the axes ----------------------------------------------------------------------------------

def _valid_from(version: Version) -> datetime:
    return version.valid_from or version.known_from


def _valid_moments(history: Sequence[CardHistory], cases: Sequence[ArbitrationCase],
                   now: datetime) -> list[datetime]:
    moments = [now, *(c.proposed_valid_from for c in cases)]
    for card in history:
        for v in card.versions:
            moments += [_valid_from(v), *([v.valid_to] if v.valid_to else [])]
    return moments


def _known_moments(history: Sequence[CardHistory], cases: Sequence[ArbitrationCase],
                   now: datetime) -> list[datetime]:
    moments = [now, *(c.decided_at or c.opened_at for c in cases)]
    for card in history:
        moments += [m for v in card.versions for m in (v.known_from, v.known_to, v.verified_at) if m]
        moments += [card.erased_at] if card.erased_at else []
    return moments


def _axis(moments: list[datetime], low: float, high: float) -> Axis:
    """The span of ``moments`` with a margin (an open end has room to show it goes on)."""
    start, end = min(moments), max(moments)
    margin = (end - start) / 16 if end > start else timedelta(minutes=1)
    return Axis(start - margin, end + margin, low, high)


def _ticks(axis: Axis, zone: tzinfo) -> tuple[Tick, ...]:
    span = axis.end - axis.start
    shape = ("%Y-%m-%d" if span > timedelta(days=3) else
             "%m-%d %H:%M" if span > timedelta(hours=3) else "%H:%M:%S")
    moments = [axis.start + span * (i + 0.5) / TICKS for i in range(TICKS)]
    return tuple(Tick(m, axis.at(m), m.astimezone(zone).strftime(shape)) for m in moments)


# ---- the cards ---------------------------------------------------------------------------------

def _card(card: CardHistory, colour: int, valid: Axis, known: Axis) -> Drawn:
    every = tuple(_box(v, valid, known) for v in card.versions)
    marks = _marks(card, every, valid, known)
    # once withdrawn, a version is no longer believed: its retraction is a mark, not a rectangle
    boxes = tuple(b for b in every if not b.retracted) or every[-1:]
    latest = card.versions[-1] if card.versions else None
    return Drawn(card_id=card.card_id, value=None if latest is None else (latest.title or latest.value),
                 status=_status(card, latest), colour=colour % 6, boxes=boxes, marks=marks)


def _status(card: CardHistory, latest: Version | None) -> str:
    if card.erased:
        return "erased"
    if latest is None:
        return "unknown"
    if latest.retracted:
        return "retracted"
    return "current" if latest.valid_to is None and latest.known_to is None else "closed"


def _box(version: Version, valid: Axis, known: Axis) -> Box:
    x0, x1 = valid.at(_valid_from(version)), valid.high if version.valid_to is None else valid.at(
        version.valid_to)
    y0, y1 = known.at(version.known_from), known.high if version.known_to is None else known.at(
        version.known_to)
    width, height = max(x1 - x0, MIN_SIDE), max(y0 - y1, MIN_SIDE)  # y grows downwards
    return Box(version=version.version, valid_from=_valid_from(version), valid_to=version.valid_to,
               known_from=version.known_from, known_to=version.known_to, x=x0, y=y0 - height,
               width=width, height=height, retracted=version.retracted, change=version.change)


def _marks(card: CardHistory, boxes: Sequence[Box], valid: Axis, known: Axis) -> tuple[Mark, ...]:
    marks: list[Mark] = []
    before: Version | None = None
    for version, box in zip(card.versions, boxes, strict=True):
        if version.retracted and not (before and before.retracted):
            marks.append(Mark("retracted", version.known_from, box.x, known.at(version.known_from),
                              "retracted"))
        moment = version.verified_at
        if moment and (before is None or before.verified_at != moment):
            marks.append(Mark("verified", moment, _inside(boxes, moment, known),
                              known.at(moment), "verified"))
        before = version
    if card.erased_at is not None and boxes:
        marks.append(Mark("erased", card.erased_at, boxes[-1].x, known.at(card.erased_at), "erased"))
    return tuple(marks)


def _inside(boxes: Sequence[Box], moment: datetime, known: Axis) -> float:
    """The x where a system-time moment meets the card: the left edge of the version known then."""
    for box in boxes:
        if box.known_from <= moment and (box.known_to is None or moment < box.known_to):
            return box.x + MIN_SIDE
    return boxes[-1].x + MIN_SIDE


def _arrows(history: Sequence[CardHistory], drawn: dict[UUID, Drawn]) -> tuple[Arrow, ...]:
    seen: dict[tuple[UUID, UUID, str], Arrow] = {}
    for card in history:
        for edge in card.edges:
            src, dst, kind = edge["src_id"], edge["dst_id"], edge["edge"]
            if kind in REVISIONS and src in drawn and dst in drawn and src != dst:
                (x1, y1), (x2, y2) = drawn[src].anchor, drawn[dst].anchor
                seen[(src, dst, kind)] = Arrow(src, dst, kind, x1, y1, x2, y2)
    return tuple(seen.values())


def _case(case: ArbitrationCase, valid: Axis, known: Axis) -> Mark:
    value = "erased" if case.proposed_value is None else case.proposed_value
    x = valid.at(case.proposed_valid_from)
    if case.decision is None or case.decided_at is None:
        return Mark("arbitration", case.opened_at, x, known.at(case.opened_at), f"pending: {value}")
    return Mark("decided", case.decided_at, x, known.at(case.decided_at),
                f"{case.decision} by {case.decided_by}: {value}")
