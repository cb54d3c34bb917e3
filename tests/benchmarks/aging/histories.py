"""The writes of a simulated year, one slot (or one subject's events) at a time.

Each slot's history is drawn in time order against its own :class:`SlotTruth`, so every write
knows the outcome the rules predict; the slots are independent, so the runner can later replay all
writes merged in time order. :class:`Draw` turns each write into an :class:`Op` holding the real
command and the statement a baseline stores.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from services.command.commands import Remember
from tests.benchmarks.aging.records import SlotKey, Statement, slot_key
from tests.benchmarks.aging.truth import Case, EventTruth, SlotTruth

DAY = timedelta(days=1)
#: Picks a slot's next value, different from the current one (None: the slot is empty).
Picker = Callable[[str | None], str]


@dataclass(frozen=True)
class Calendar:
    """The simulated year: day ``n`` starts at ``start + n days``; people talk 08:00–20:00."""

    start: datetime
    days: int

    def at(self, day: float, rng: random.Random) -> datetime:
        base = self.start + timedelta(days=int(day))
        return base + timedelta(seconds=rng.randint(8 * 3600, 20 * 3600))


@dataclass
class Op:
    """One command of the history. ``action``: remember, resolve (a commitment) or arbitrate (a
    queued write: ``target`` is the op whose case it decides); ``expected``: the model's outcome."""

    ref: int
    at: datetime
    tenant: str
    action: str
    command: Remember | None = None
    target: int | None = None
    decision: str | None = None
    expected: str = ""
    slot: SlotKey | None = None
    statement: Statement | None = None


@dataclass
class Draw:
    """Collects the ops of the history (refs in drawing order) and the events' truth."""

    ops: list[Op] = field(default_factory=list)
    events: list[EventTruth] = field(default_factory=list)

    def _ref(self) -> int:
        return len(self.ops)

    def state(self, truth: SlotTruth, value: str, at: datetime, valid_from: datetime | None = None,
              session: str | None = None, turn: str | None = None) -> str:
        ref = self._ref()
        session, turn = session or f"s{ref}", turn or f"t{ref}"
        valid_from = valid_from or at
        outcome = truth.write(value, at, valid_from, ref, session, turn)
        command = Remember(kind="state", memory_type=truth.memory_type, subject=truth.subject,
                           label=truth.label, content=value, valid_from=valid_from,
                           cardinality=None if truth.single else "multi_value",
                           session_id=session, turn_id=turn)
        text = f"{truth.subject} {truth.label.replace('_', ' ')}: {value}"
        statement = Statement(ref, truth.tenant, "state", text, at, truth.subject, truth.label, value)
        self.ops.append(Op(ref, at, truth.tenant, "remember", command, expected=outcome,
                           slot=slot_key(truth.subject, truth.label), statement=statement))
        return outcome

    def decide(self, truth: SlotTruth, case: Case, decision: str, at: datetime) -> None:
        outcome = truth.decide(case, decision, at)
        self.ops.append(Op(self._ref(), at, truth.tenant, "arbitrate", target=case.ref, decision=decision,
                           expected=outcome, slot=slot_key(truth.subject, truth.label)))

    def other(self, tenant: str, kind: str, command: Remember, at: datetime, text: str, expected: str) -> int:
        ref = self._ref()
        self.ops.append(Op(ref, at, tenant, "remember", command, expected=expected,
                           statement=Statement(ref, tenant, kind, text, at)))
        return ref

    def event(self, tenant: str, subject: str, description: str, occurred_at: datetime, at: datetime,
              tags: tuple[str, ...]) -> None:
        command = Remember(kind="event", memory_type="event", content=description, occurred_at=occurred_at,
                           tags=tags, session_id=f"s{self._ref()}")
        ref = self.other(tenant, "event", command, at, description, "recorded")
        self.events.append(EventTruth(ref, tenant, subject, description, occurred_at, at))

    def resolve(self, tenant: str, target: int, at: datetime) -> None:
        self.ops.append(Op(self._ref(), at, tenant, "resolve", target=target, expected="resolved"))


def _late(rng: random.Random, at: datetime, after: datetime | None, share: float) -> datetime:
    """A ``valid_from`` learned late (2–20 days back, under the 30-day large span) with probability
    ``share``, always after ``after`` (the current card's valid_from) by more than a day."""
    if rng.random() >= share:
        return at
    back = timedelta(days=rng.uniform(2, 20))
    if after is not None:
        back = min(back, at - after - DAY)
    return at - back if back > DAY else at


def single_history(draw: Draw, truth: SlotTruth, pick: Picker, rng: random.Random, calendar: Calendar,
                   mean_gap: float, *, flip: bool, rewrite: bool) -> None:
    """Changes, restatements, same-turn slips, late facts; a flip-flop and a large-span rewrite
    where asked."""
    day = 0 if rng.random() < 0.8 else rng.randint(1, 120)
    at = calendar.at(day, rng)
    draw.state(truth, pick(None), at, _late(rng, at, None, 0.2))
    while True:
        day += max(5, int(rng.expovariate(1 / mean_gap)))
        if day > calendar.days:
            return
        at = calendar.at(day, rng)
        card = truth.card_at(at)
        current = card.value if card else None
        if flip and day > 20 and (rng.random() < 0.4 or day > calendar.days * 0.6):
            flip, day = False, flip_flop(draw, truth, pick, rng, calendar, day)
        elif rewrite and day > 60 and rng.random() < 0.5:
            rewrite, day = False, large_span(draw, truth, pick, rng, calendar, day)
        elif current is not None and rng.random() < 0.3:
            draw.state(truth, current, at)
        elif rng.random() < 0.12:
            slip = pick(current)
            session, turn = f"slip-{truth.tenant}-{day}", f"turn-{len(draw.ops)}"
            draw.state(truth, slip, at, session=session, turn=turn)
            fixed = at + timedelta(seconds=rng.randint(15, 90))
            draw.state(truth, pick(slip), fixed, session=session, turn=turn)
        else:
            draw.state(truth, pick(current), at, _late(rng, at, card.valid_from if card else None, 0.3))


def flip_flop(draw: Draw, truth: SlotTruth, pick: Picker, rng: random.Random, calendar: Calendar,
              day: int) -> int:
    """Three or four changes within 25 days; then maybe a person decides the slot's case (every
    queued change is in it). Returns the day after which the slot rests (past the 30-day window)."""
    first = at = calendar.start + timedelta(days=day)
    for _ in range(rng.choice((3, 4, 4))):
        at = calendar.at(day, rng)
        draw.state(truth, pick(truth.current(at)), at)
        day += rng.randint(3, 8)
    pending = [case for case in truth.pending(at) if case.opened_at >= first]
    if pending and rng.random() < 0.6:
        day += rng.randint(2, 12)
        at = calendar.at(day, rng)
        case, card = pending[-1], truth.card_at(at)
        newer = card is None or case.valid_from > card.valid_from  # else accepting rewrites history
        draw.decide(truth, case, "accept_new" if newer and rng.random() < 0.5 else "keep_old", at)
    return day + 35


def large_span(draw: Draw, truth: SlotTruth, pick: Picker, rng: random.Random, calendar: Calendar,
               day: int) -> int:
    """A value said to have held since 35–70 days back: rewrites history, so it is queued."""
    at = calendar.at(day, rng)
    draw.state(truth, pick(truth.current(at)), at, at - timedelta(days=rng.randint(35, 70)))
    pending = truth.pending(at)
    if pending and rng.random() < 0.5:
        day += rng.randint(2, 10)
        draw.decide(truth, pending[-1], "keep_old", calendar.at(day, rng))
    return day + 35


def multi_history(draw: Draw, truth: SlotTruth, pool: tuple[str, ...], rng: random.Random,
                  calendar: Calendar) -> None:
    """One to three items at first, then a new item (sometimes learned late) or a restatement
    every couple of months."""
    day = 0 if rng.random() < 0.7 else rng.randint(1, 150)
    at = calendar.at(day, rng)
    held: list[str] = []
    for value in rng.sample(pool, rng.randint(1, 3)):
        draw.state(truth, value, at)
        held.append(value)
        at += timedelta(minutes=2)
    while True:
        day += max(10, int(rng.expovariate(1 / 75)))
        if day > calendar.days:
            return
        at = calendar.at(day, rng)
        fresh = [v for v in pool if v not in held]
        if not fresh or rng.random() < 0.25:
            draw.state(truth, rng.choice(held), at)
            continue
        value = rng.choice(fresh)
        draw.state(truth, value, at, _late(rng, at, None, 0.2))
        held.append(value)
