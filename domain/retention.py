"""A tenant's retention policy for raw conversation turns, and each time it was applied.

Ingest stores every turn as an event card of the conversation (``domain.ingestion``). A policy
says how many days such a turn is kept (None: always, the default) and whether what extraction
made of it goes with it. Applying it erases the older turns (``domain.erasure``), one erasure each,
and records the run: when, up to which moment, how many turns and cards.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from eventsourcing.domain import event

from domain.base import TenantAggregate, derived_id
from domain.errors import InvalidCommandError

#: The longest retention a policy may name: a hundred years is "keep".
MAX_TURN_DAYS = 36_500


def check_turn_days(days: int | None) -> int | None:
    if days is not None and not 1 <= days <= MAX_TURN_DAYS:
        raise InvalidCommandError(f"turn_days must be between 1 and {MAX_TURN_DAYS}, or none to keep "
                                  f"every turn; got {days}")
    return days


class Retention(TenantAggregate):
    """One per tenant: its policy and its runs."""

    @staticmethod
    def create_id(tenant_id: str) -> UUID:
        return derived_id("retention", tenant_id)

    @event("PolicySet")
    def __init__(self, tenant_id: str, turn_days: int | None, extracted: bool, set_by: str,
                 timestamp: datetime) -> None:
        self.tenant_id = tenant_id
        self.turn_days = turn_days
        self.extracted = extracted
        self.set_by = set_by
        self.runs = 0

    @event("PolicyChanged")
    def change(self, turn_days: int | None, extracted: bool, set_by: str, timestamp: datetime) -> None:
        self.turn_days = turn_days
        self.extracted = extracted
        self.set_by = set_by

    @event("Applied")
    def applied(self, cutoff: datetime, turns: int, cards: int, erasure_ids: tuple[UUID, ...],
                timestamp: datetime) -> None:
        """A run: the turns said before ``cutoff`` were erased (``turns`` of them, with ``cards``
        cards extraction made of them, when the policy takes those too)."""
        self.runs += 1
