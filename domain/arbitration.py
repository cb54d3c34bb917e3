"""The arbitration case: the conflicting writes to one slot a person must decide, and the decision.

A slot has one pending case at a time. The write that opens it is its first proposal; every write
queued on the slot while it is pending joins it (``ProposalAdded``), and one decision settles them
all (``domain.rules.arbitration.accepted`` says which proposals it applies).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import event

from domain.base import TenantAggregate
from domain.cards import StateCard
from domain.errors import InvalidTransitionError
from domain.rules.arbitration import Decision, accepted


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
        #: Every proposal, in the order they came.
        self.proposals: tuple[StateCard, ...] = (proposal,)
        self.reason = reason
        self.decision: Decision | None = None

    @property
    def proposal(self) -> StateCard:
        """The latest proposal: the one ``accept_new`` takes unless told another."""
        return self.proposals[-1]

    def add_proposal(self, proposal: StateCard, reason: str, now: datetime) -> None:
        self._check_pending()
        self._add_proposal(proposal=proposal, reason=reason, timestamp=now)

    def decide(
        self, decision: Decision, decided_by: str, note: str, now: datetime,
        card_id: UUID | None = None,
    ) -> None:
        """``card_id``: the proposal ``accept_new`` takes, if not the latest."""
        self._check_pending()
        accepted(self.proposals, decision, card_id, by_item=False)  # names one of them, or none
        self._decide(decision=decision.value, decided_by=decided_by, note=note, card_id=card_id,
                     slot_id=self.slot_id, timestamp=now)

    def _check_pending(self) -> None:
        if self.decision is not None:
            raise InvalidTransitionError(
                f"arbitration {self.id} was already decided: {self.decision.value}"
            )

    @event("ProposalAdded")
    def _add_proposal(self, proposal: StateCard, reason: str, timestamp: datetime) -> None:
        self.proposals = (*self.proposals, proposal)
        self.reason = reason

    class Decided(TenantAggregate.Event):
        decision: str
        decided_by: str
        note: str
        #: The proposal the decision named (``accept_new``), if any.
        card_id: UUID | None
        #: The case's slot, whose key seals the note (``infra.sealing``); None: decided before
        #: the event named it (its note is under the case's own key).
        slot_id: UUID | None
        class_version = 3

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            state["card_id"] = None  # decided before a case could hold several proposals

        @staticmethod
        def upcast_v2_v3(state: dict[str, Any]) -> None:
            state["slot_id"] = None  # decided before the note was sealed under the slot's key

    @event(Decided)
    def _decide(
        self, decision: str, decided_by: str, note: str, card_id: UUID | None,
        slot_id: UUID | None, timestamp: datetime,
    ) -> None:
        self.decision = Decision(decision)
