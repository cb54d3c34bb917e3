"""A Hypothesis state machine over one slot: whatever the sequence of writes, corrections and
arbitration decisions, a single-value slot never holds two values at one world time, at most one
card is current, and replaying the slot's events rebuilds exactly the same slot."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import uuid4

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from domain.cards import StateCard
from domain.errors import FutureTimeError, ValidityOrderError
from domain.policy import Policy
from domain.rules.arbitration import Decision
from domain.rules.timeline import Span, overlapping
from domain.slot import Outcome, Slot
from domain.values import Cardinality, Provenance, Scope

START = datetime(2026, 1, 1, tzinfo=UTC)
POLICY = Policy()


class SlotMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = START
        self.slot = Slot._create(  # type: ignore[attr-defined]
            Slot.Opened, id=uuid4(), tenant_id="t", scope=Scope.parse("personal"),  # type: ignore[attr-defined]
            subject="user", label="address", cardinality=Cardinality.SINGLE.value,
            declared_cardinality=None, timestamp=self.now)
        self.events: list[Any] = list(self.slot.collect_events())

    @rule(hours=st.integers(min_value=0, max_value=24 * 20))
    def time_passes(self, hours: int) -> None:
        self.now += timedelta(hours=hours)

    @rule(
        value=st.sampled_from(["Taipei", "Kyoto", "Kaohsiung", "Osaka"]),
        back_days=st.integers(min_value=-1, max_value=90),
        span_days=st.none() | st.integers(min_value=-2, max_value=60),
        session=st.sampled_from([None, "s1", "s2"]),
    )
    def write(self, value: str, back_days: int, span_days: int | None, session: str | None) -> None:
        valid_from = self.now - timedelta(days=back_days)
        valid_to = None if span_days is None else valid_from + timedelta(days=span_days)
        card = StateCard(card_id=uuid4(), value=value, memory_type="fact", valid_from=valid_from,
                         valid_to=valid_to, recorded_at=self.now,
                         provenance=Provenance(session_id=session, turn_id=session and "t1"))
        try:
            self.slot.write(card, now=self.now, policy=POLICY, case_id=uuid4())
        except (ValidityOrderError, FutureTimeError):
            assert not self.slot._pending_events, "a refused write made an event"
        self.events.extend(self.slot.collect_events())

    @precondition(lambda self: bool(self.slot.pending))
    @rule(decision=st.sampled_from(list(Decision)), data=st.data())
    def decide(self, decision: Decision, data: st.DataObject) -> None:
        cases = list(self.slot.pending)  # in the order they were queued
        case_id = cases[data.draw(st.integers(min_value=0, max_value=len(cases) - 1))]
        outcome = self.slot.settle(case_id, decision, self.now)
        assert outcome.outcome is not Outcome.QUEUED
        self.events.extend(self.slot.collect_events())

    @invariant()
    def one_value_at_any_world_time(self) -> None:
        live = [Span(c.card_id, c.valid_from, c.valid_to) for c in self.slot.live_cards]
        assert overlapping(live) is None
        assert len(self.slot.current_cards) <= 1

    @invariant()
    def replay_rebuilds_the_same_slot(self) -> None:
        rebuilt = None
        for domain_event in self.events:
            rebuilt = domain_event.mutate(rebuilt)
        assert rebuilt is not None
        assert rebuilt.cards == self.slot.cards and rebuilt.pending == self.slot.pending
        assert rebuilt.version == self.slot.version


TestSlotMachine = SlotMachine.TestCase
TestSlotMachine.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
