"""Parked events: what a projection could not apply, as rows of ``projection_failures``.

An event that cannot be decoded or applied, or whose row the database refuses, parks its
aggregate: that event and every later event of the aggregate are a :class:`Failure` each, the
aggregate's tracking stays before them, and every other aggregate goes on (decision 0007). The
incremental projector and the rebuild's fold make the same failures from the same log.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from infra.redact import described
from projections.cards import storable

PARKED, RETRIED, SKIPPED = "parked", "retried", "skipped"
#: Why an event is parked.
UNDECODABLE = "undecodable"  # the event cannot be read from its stored form
PROJECTION = "projection"  # the projection (or a sink's rule) raised
REFUSED = "refused"  # the database refused a row it made
WAITING = "waiting"  # an earlier event of its aggregate is parked
MESSAGE = "message"  # a Kafka message that carries no relayed event (not an event of the log)

#: The columns a failure fills (the rest: first and last failure time, count, take defaults).
COLUMNS = ("projection", "tenant_id", "notification_id", "originator_id", "originator_version",
           "topic", "reason", "error", "status", "resolution", "resolved_by", "resolved_at")
#: Errors are kept to this many characters. An error names the exception's type and ids, never
#: its message (:meth:`Failure.of`).
ERROR_CHARS = 2000


@dataclass(frozen=True)
class Undecodable:
    """Stands in for an event that cannot be decoded, so that its aggregate is parked. The tenant
    and timestamp are read from the stored JSON where they can be (tenant ``'*'`` otherwise)."""

    originator_id: UUID
    originator_version: int
    topic: str
    tenant_id: str
    error: str
    timestamp: datetime | None = None


def undecodable(notification: Any, error: BaseException) -> Undecodable:
    tenant, timestamp = "*", None
    try:
        state = json.loads(bytes(notification.state))
        tenant = str(state.get("tenant_id") or tenant)
        stamp = state.get("timestamp")
        timestamp = datetime.fromisoformat(stamp["_data_"] if isinstance(stamp, dict) else stamp)
    except Exception:  # noqa: S110 - best effort: what cannot be read stays unknown
        pass
    return Undecodable(notification.originator_id, notification.originator_version,
                       str(notification.topic), tenant, described(error), timestamp)


@dataclass(frozen=True)
class Failure:
    """One row of ``projection_failures``."""

    tenant_id: str
    notification_id: int
    originator_id: UUID | None
    originator_version: int | None
    topic: str | None
    reason: str
    error: str
    status: str = PARKED
    resolution: str | None = None
    resolved_by: str | None = None
    resolved_at: datetime | None = None

    @classmethod
    def of(cls, event: Any, notification_id: int, reason: str, error: BaseException | str
           ) -> Failure:
        """``event`` (notification ``notification_id``) parked for ``reason``. An exception is
        kept as its type and the schema's names (:func:`infra.redact.described`): its message can
        quote the event's text, which no erasure would reach here; a string is one this package
        composed of ids."""
        text = error if isinstance(error, str) else described(error)
        return cls(storable(str(event.tenant_id)), notification_id, event.originator_id,
                   event.originator_version, topic_of(event), reason,
                   storable(text)[:ERROR_CHARS])

    def waiting(self, event: Any, notification_id: int) -> Failure:
        """A later ``event`` of this failure's aggregate, parked behind it."""
        return Failure.of(event, notification_id, WAITING,
                          f"waits for v{self.originator_version} of its aggregate "
                          f"(notification {self.notification_id}, {self.reason})")

    @classmethod
    def skipped(cls, decision: Any) -> Failure:
        """The event a skip decision names, as the decision recorded it."""
        return cls(decision.event_tenant, decision.notification_id, decision.aggregate_id,
                   decision.aggregate_version, decision.topic, decision.kind, decision.error,
                   SKIPPED, decision.reason, decision.decided_by, decision.timestamp)

    def row(self, projection: str) -> tuple[Any, ...]:
        return (projection, self.tenant_id, self.notification_id, self.originator_id,
                self.originator_version, self.topic, self.reason, self.error, self.status,
                self.resolution, self.resolved_by, self.resolved_at)


def topic_of(event: Any) -> str:
    """The stored topic of ``event`` (its class, as eventsourcing names it)."""
    if isinstance(event, Undecodable):
        return event.topic
    cls = type(event)
    return f"{cls.__module__}:{cls.__qualname__}"
