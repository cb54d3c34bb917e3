"""The event card: something that happened at a time. Write-once; only its description may be
corrected, and every correction is an audited event."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from eventsourcing.domain import event

from domain.base import TenantAggregate
from domain.errors import InvalidKindError, OccurredAtImmutableError
from domain.policy import Policy
from domain.rules.validation import check_content, check_not_future
from domain.values import Edge, Provenance, Scope


class EventCard(TenantAggregate):
    @event("Recorded")
    def __init__(
        self, tenant_id: str, scope: Scope, description: str, occurred_at: datetime,
        tags: tuple[str, ...], provenance: Provenance, perspective: str | None,
        timestamp: datetime,
    ) -> None:
        self.tenant_id = tenant_id
        self.scope = scope
        self.description = description
        self.occurred_at = occurred_at
        self.tags = tags
        self.provenance = provenance
        self.perspective = perspective
        self.corrections: list[tuple[str, str]] = []
        self.links: dict[UUID, str] = {}

    def correct(
        self, description: str, reason: str, provenance: Provenance, now: datetime,
        policy: Policy, occurred_at: datetime | None = None,
    ) -> None:
        """Fix a bad summary. The event's happening and its ``occurred_at`` stay as recorded."""
        if occurred_at is not None and occurred_at != self.occurred_at:
            raise OccurredAtImmutableError(
                f"an event's occurred_at ({self.occurred_at.isoformat()}) cannot be moved; "
                "record a new event if the first one never happened at that time"
            )
        description = check_content(description, policy, "description")
        check_content(reason, policy, "reason for the correction")
        self._correct(
            description=description, previous_description=self.description, reason=reason,
            provenance=provenance, tags=self.tags, timestamp=now,
        )

    def link(self, edge: Edge, target_id: UUID, now: datetime) -> None:
        """An event ``affects`` the state it changed, or relates to another card."""
        if edge not in (Edge.AFFECTS, Edge.RELATED_TO, Edge.CONTRADICTS):
            raise InvalidKindError(f"an event card links with affects / related_to, not {edge.value!r}")
        if self.links.get(target_id) != edge.value:
            self._link(edge=edge.value, target_id=target_id, timestamp=now)

    @event("Corrected")
    def _correct(
        self, description: str, previous_description: str, reason: str, provenance: Provenance,
        tags: tuple[str, ...], timestamp: datetime,
    ) -> None:
        self.corrections.append((previous_description, reason))
        self.description = description

    @event("Linked")
    def _link(self, edge: str, target_id: UUID, timestamp: datetime) -> None:
        self.links[target_id] = edge


def check_occurred_at(occurred_at: datetime, now: datetime, policy: Policy) -> datetime:
    return check_not_future(occurred_at, now, policy, "occurred_at")
