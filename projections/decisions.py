"""The operators' decisions about parked events, kept in the event log (decision 0007).

A skip is an event of the projection's :class:`ProjectionDecisions` aggregate (one per projection,
its id derived from the projection's name): the log is the audit trail, and every reader of the log
— the Faust projector, a catch-up, a rebuild — skips the same event, so a rebuild comes to the same
read models. The aggregate's ``tenant_id`` is ``'*'``, the projector's own pseudo-tenant: the
decision is the operator's; the event it names belongs to ``event_tenant``.

This module's path is part of the stored events' topic: it must not move.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import event

from domain.base import TenantAggregate, derived_id

#: The tenant of the decisions: the projector's, not a user's (the log position's pseudo-tenant).
SYSTEM = "*"


class ProjectionDecisions(TenantAggregate):
    @staticmethod
    def create_id(projection: str) -> UUID:
        return derived_id("projection decisions", projection)

    @event("Started")
    def __init__(self, projection: str, tenant_id: str = SYSTEM) -> None:
        self.tenant_id = tenant_id
        self.projection = projection
        self.skipped: list[tuple[UUID, int]] = []

    class Skipped(TenantAggregate.Event):
        event_tenant: str
        aggregate_id: UUID
        aggregate_version: int
        notification_id: int
        topic: str
        kind: str
        error: str
        reason: str
        decided_by: str

    @event(Skipped)
    def skip(self, event_tenant: str, aggregate_id: UUID, aggregate_version: int,
             notification_id: int, topic: str, kind: str, error: str, reason: str,
             decided_by: str) -> None:
        """Skip version ``aggregate_version`` of ``aggregate_id`` (notification ``notification_id``)
        in this projection; ``kind`` and ``error`` say why it was parked, ``reason`` why it is
        skipped."""
        self.skipped.append((aggregate_id, aggregate_version))


#: One skip decision: the event it names, (aggregate id, version) → the decision's event.
Skips = dict[tuple[UUID, int], Any]


def skips(decisions: Iterable[Any], known_at: datetime | None = None) -> Skips:
    """The skip decisions among ``decisions`` (events of a :class:`ProjectionDecisions`), those
    recorded by ``known_at`` if given."""
    return {(d.aggregate_id, d.aggregate_version): d for d in decisions
            if isinstance(d, ProjectionDecisions.Skipped)
            and (known_at is None or d.timestamp <= known_at)}
