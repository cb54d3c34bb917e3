"""When a card extracted from a turn happened or began to hold (DESIGN rule 9, the ingest side).

The model answers an ``occurred_at_hint`` per candidate; :func:`decide_time` checks it against the
turn and decides the card's time. Pure: the turn's own ``said_at`` is the clock, never the wall
clock, so a backfill of last year's conversations resolves 昨天 against the day it was said.

The rules, in order:

1. **Parse.** The hint must be ISO 8601 (``2026-03-01T09:00:00+08:00``, ``…Z``, or a bare date).
   A relative word (``yesterday``, 今天) is not a time and is refused. A hint without a UTC offset is
   read as local time in the user's zone, and a bare date as that day's local midnight (the note
   says so): the prompt asks for the user's zone, and that is the zone a model that left the
   offset off was thinking in.
2. **Not in the future.** A hint later than ``said_at`` plus the clock-skew tolerance is refused.
3. **Consistent with the turn.** When the turn's text holds time expressions
   (``services.query.timeexpr.find_ranges`` against ``said_at`` in the user's zone), a hint inside one of
   their ranges stands. A hint outside every range (or refused above) disagrees with the turn,
   and when the turn holds exactly one range the **resolver wins**: the card's time is the start
   of that range (local midnight of 三天前's day) — a whole day is what the turn says, and a time
   of day would be invented. A range that starts in the future gives no card time (rule 2).
   Several different ranges and a hint in none: the turn cannot say which one the card means.
4. **Ambiguous** turn text (最近, "the other day"): the resolver has nothing to say; a valid hint
   stands, else the turn's time.
5. **Fallback**: the turn's own ``said_at``, with the reason. No hint at all also means the
   turn's time: the model judged that the card has no time of its own.

Every decision carries a ``note`` saying which rule decided it, for the card's audit trail.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

from services.query.timeexpr import AmbiguousTimeError, TimeRange, find_ranges

Source = Literal["hint", "resolver", "turn"]

_DATE_ONLY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclass(frozen=True)
class TimeDecision:
    """A candidate's time: ``occurred_at`` (aware), who decided it, and why."""

    occurred_at: datetime
    source: Source
    note: str

    def stored(self) -> dict[str, str]:
        return {"occurred_at": self.occurred_at.isoformat(), "source": self.source, "note": self.note}

    @classmethod
    def from_stored(cls, data: dict[str, str]) -> TimeDecision:
        source = data["source"]
        if source not in ("hint", "resolver", "turn"):
            raise ValueError(f"unknown time source {source!r}")
        return cls(datetime.fromisoformat(data["occurred_at"]), source, data.get("note", ""))  # type: ignore[arg-type]


def parse_hint(hint: str | None, zone: ZoneInfo, now: datetime) -> tuple[datetime | None, str]:
    """The hint as an aware datetime, or None; and a note on how it was read (or why refused).
    ``now`` (aware, in ``zone``) only tells a relative word from garbage."""
    if hint is None or not hint.strip():
        return None, "no occurred_at_hint"
    text = hint.strip()
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None, _unparsed(text, now)
    if parsed.tzinfo is not None and parsed.utcoffset() is not None:
        return parsed, f"hint {text}"
    local = parsed.replace(tzinfo=zone)
    read = "a date without a time, read as local midnight" if _DATE_ONLY.match(text) else \
        "no UTC offset, read as local time"
    return local, f"hint {text} ({read} in {zone.key}: {local.isoformat()})"


def _unparsed(text: str, now: datetime) -> str:
    try:
        spoken = bool(find_ranges(text, now))
    except AmbiguousTimeError as error:
        return f"hint {text!r} is not an ISO 8601 time ({error.reason})"
    if spoken:
        return f"hint {text!r} is a time expression (a relative word), not an ISO 8601 time"
    return f"hint {text!r} is not an ISO 8601 time"


def _turn_ranges(text: str, now: datetime) -> tuple[list[TimeRange], str | None]:
    """The distinct ranges of the turn's time expressions, or the reason they are ambiguous."""
    try:
        found = find_ranges(text, now)
    except AmbiguousTimeError as error:
        return [], str(error)
    distinct: dict[tuple[datetime, datetime], TimeRange] = {}
    for time_range in found:
        distinct.setdefault((time_range.start, time_range.end), time_range)
    return list(distinct.values()), None


def _span(time_range: TimeRange) -> str:
    return f"'{time_range.expression}' = [{time_range.start.isoformat()}, {time_range.end.isoformat()})"


def decide_time(hint: str | None, text: str, said_at: datetime, zone: ZoneInfo,
                tolerance: timedelta) -> TimeDecision:
    """The time of a card the model extracted from a turn said at ``said_at`` (aware) by a user in
    ``zone``; see the module docstring for the rules."""
    if said_at.tzinfo is None or said_at.utcoffset() is None:
        raise ValueError("said_at must be timezone-aware")
    now = said_at.astimezone(zone)
    latest = said_at + tolerance
    parsed, read = parse_hint(hint, zone, now)
    if parsed is not None and parsed > latest:
        parsed, read = None, f"{read} lies after the turn ({now.isoformat()} + {tolerance})"
    ranges, ambiguous = _turn_ranges(text, now)
    if ambiguous is not None:
        if parsed is not None:
            return TimeDecision(parsed, "hint", f"{read}; the turn's time is ambiguous ({ambiguous})")
        return _turn(now, f"{read}; the turn's time is ambiguous ({ambiguous})")
    if not ranges:
        return TimeDecision(parsed, "hint", read) if parsed is not None else _turn(now, read)
    if parsed is not None:
        inside = next((r for r in ranges if r.start <= parsed < r.end), None)
        if inside is not None:
            return TimeDecision(parsed, "hint", f"{read}, within the turn's {_span(inside)}")
    elif hint is None or not hint.strip():
        return _turn(now, read)
    if len(ranges) > 1:
        spans = "; ".join(_span(r) for r in ranges)
        return _turn(now, f"{read} matches none of the turn's times ({spans}), and which one the "
                          "card means is not clear")
    resolved = ranges[0]
    if resolved.start > latest:
        return _turn(now, f"{read}; the turn's {_span(resolved)} lies in the future")
    return TimeDecision(resolved.start, "resolver",
                        f"{read} disagrees with the turn's {_span(resolved)}: the resolver wins, "
                        "the start of that range")


def _turn(now: datetime, reason: str) -> TimeDecision:
    return TimeDecision(now, "turn", f"{reason}; the turn's own time is used")
