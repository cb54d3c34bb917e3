"""The arbitration case: a conflicting write a person must decide, and the decision."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from eventsourcing.domain import event

from domain.base import TenantAggregate
from domain.cards import StateCard
from domain.errors import InvalidTransitionError
from domain.rules.arbitration import Decision


class ArbitrationCase(TenantAggregate):
    @staticmethod
    def create_id(case_id: UUID) -> UUID:
        """A case is known by the id its slot queued the proposal under."""
        return case_id

    @event("Opened")
    def __init__(
        self, case_id: UUID, tenant_id: str, slot_id: UUID, label: str, subject: str,
        current: tuple[StateCard, ...], proposal: StateCard, reason: str, timestamp: datetime,
    ) -> None:
        self.tenant_id = tenant_id
        self.slot_id = slot_id
        self.label = label
        self.subject = subject
        self.current = current
        self.proposal = proposal
        self.reason = reason
        self.decision: Decision | None = None

    def decide(self, decision: Decision, decided_by: str, note: str, now: datetime) -> None:
        if self.decision is not None:
            raise InvalidTransitionError(
                f"arbitration {self.id} was already decided: {self.decision.value}"
            )
        self._decide(decision=decision.value, decided_by=decided_by, note=note, timestamp=now)

    @event("Decided")
    def _decide(self, decision: str, decided_by: str, note: str, timestamp: datetime) -> None:
        self.decision = Decision(decision)
