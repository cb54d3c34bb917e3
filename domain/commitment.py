"""Commitments (``open → waiting → resolved | expired``) and blockers (``active → archived``)."""

from __future__ import annotations

from datetime import datetime
from enum import Enum

from eventsourcing.domain import event

from domain.base import TenantAggregate
from domain.errors import InvalidTransitionError
from domain.values import Provenance, Scope


class CommitmentStatus(str, Enum):
    OPEN = "open"
    WAITING = "waiting"
    RESOLVED = "resolved"
    EXPIRED = "expired"


_MOVES: dict[CommitmentStatus, frozenset[CommitmentStatus]] = {
    CommitmentStatus.OPEN: frozenset({CommitmentStatus.WAITING, CommitmentStatus.RESOLVED,
                                      CommitmentStatus.EXPIRED}),
    CommitmentStatus.WAITING: frozenset({CommitmentStatus.RESOLVED, CommitmentStatus.EXPIRED}),
    CommitmentStatus.RESOLVED: frozenset(),
    CommitmentStatus.EXPIRED: frozenset(),
}


class Commitment(TenantAggregate):
    @event("Opened")
    def __init__(
        self, tenant_id: str, scope: Scope, description: str, owner: str, due_at: datetime | None,
        provenance: Provenance, timestamp: datetime,
    ) -> None:
        self.tenant_id = tenant_id
        self.scope = scope
        self.description = description
        self.owner = owner
        self.due_at = due_at
        self.provenance = provenance
        self.status = CommitmentStatus.OPEN

    def _check_move(self, to: CommitmentStatus) -> None:
        if to not in _MOVES[self.status]:
            raise InvalidTransitionError(
                f"a {self.status.value} commitment cannot become {to.value}"
            )

    def wait(self, reason: str, now: datetime) -> None:
        self._check_move(CommitmentStatus.WAITING)
        self._wait(reason=reason, timestamp=now)

    def resolve(self, resolution: str, now: datetime) -> None:
        self._check_move(CommitmentStatus.RESOLVED)
        self._resolve(resolution=resolution, timestamp=now)

    def expire(self, now: datetime) -> None:
        self._check_move(CommitmentStatus.EXPIRED)
        if self.due_at is None or now < self.due_at:
            due = self.due_at.isoformat() if self.due_at else "none"
            raise InvalidTransitionError(f"a commitment expires only after its due date ({due})")
        self._expire(timestamp=now)

    def is_overdue(self, now: datetime) -> bool:
        return (
            self.status in (CommitmentStatus.OPEN, CommitmentStatus.WAITING)
            and self.due_at is not None and now >= self.due_at
        )

    @event("Waiting")
    def _wait(self, reason: str, timestamp: datetime) -> None:
        self.status = CommitmentStatus.WAITING

    @event("Resolved")
    def _resolve(self, resolution: str, timestamp: datetime) -> None:
        self.status = CommitmentStatus.RESOLVED

    @event("Expired")
    def _expire(self, timestamp: datetime) -> None:
        self.status = CommitmentStatus.EXPIRED


class Blocker(TenantAggregate):
    @event("Raised")
    def __init__(
        self, tenant_id: str, scope: Scope, description: str, provenance: Provenance,
        timestamp: datetime,
    ) -> None:
        self.tenant_id = tenant_id
        self.scope = scope
        self.description = description
        self.provenance = provenance
        self.active = True

    def archive(self, note: str, now: datetime) -> None:
        if not self.active:
            raise InvalidTransitionError("this blocker is already archived")
        self._archive(note=note, timestamp=now)

    @event("Archived")
    def _archive(self, note: str, timestamp: datetime) -> None:
        self.active = False
