"""Parked events (decision 0007) as one tenant's use cases: list them, request a retry after a
fix, request a skip with an audited decision.

``palimpsest failures`` does this on the database directly, for every tenant; REST and the console
do it for the key's tenant only, in an HTTP process that connects as the tenant-bound role and
holds no cross-tenant connection (decision 0018). The list is read from ``projection_failures`` as
that tenant (row-level security: another tenant's parked event is not found, as another tenant's
card is not). A retry or a skip changes the read models and, for a skip, records a decision of the
projection in the log: the HTTP process cannot, so it records a request
(:mod:`projections.requests`) that ``serve``'s own process carries out as the projector role; the
request's status, and the parked event's (parked, then retried or skipped), say how it went.
Listing needs ``memory:read``; requesting a retry or a skip changes what the read models hold, so
it needs ``memory:admin``, as deciding an arbitration does.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from datetime import datetime
from uuid import UUID

from psycopg import sql
from psycopg.rows import dict_row
from pydantic import BaseModel

from domain.errors import InvalidCommandError, NotFoundError
from projections.cards import NAME
from projections.failures import ParkedEventNotFoundError
from projections.requests import REQUESTED, RETRY, SKIP, ask, requests_of
from services.keys import Principal, require
from services.query.readmodels import ReadModels

READ, ADMIN = "memory:read", "memory:admin"


class ParkedRequestNotFoundError(NotFoundError):
    """No request of this tenant with that id."""


class ParkedEvent(BaseModel):
    """An event the cards projection could not apply, held until retried or skipped."""

    notification_id: int
    originator_id: UUID | None
    originator_version: int | None
    topic: str | None
    reason: str
    error: str | None
    #: parked, retried or skipped.
    status: str
    failures: int
    since: datetime
    last_failed_at: datetime | None = None
    resolution: str | None = None
    resolved_by: str | None = None
    resolved_at: datetime | None = None
    #: A request not carried out yet for this event: retry or skip.
    requested: str | None = None


class ParkedRequest(BaseModel):
    """A request to retry or skip a parked event: requested, then done, refused or failed."""

    request_id: UUID
    notification_id: int
    action: str
    reason: str | None = None
    requested_by: str
    requested_at: datetime
    status: str
    #: What was done (events applied, still parked) or why not; ids and counts only.
    outcome: str | None = None
    done_at: datetime | None = None


_PARKED = """SELECT f.notification_id, f.originator_id, f.originator_version, f.topic, f.reason,
    f.error, f.status, f.failures, f.failed_at AS since, f.last_failed_at, f.resolution,
    f.resolved_by, f.resolved_at,
    (SELECT r.action FROM {s}.projection_requests r WHERE r.tenant_id = f.tenant_id
     AND r.notification_id = f.notification_id AND r.status = 'requested'
     ORDER BY r.requested_at DESC LIMIT 1) AS requested
FROM {s}.projection_failures f
WHERE f.projection = %s AND f.tenant_id = %s AND (f.status = 'parked' OR %s)
ORDER BY f.notification_id"""


def parked_events(read: ReadModels, who: Principal, resolved: bool = False) -> list[ParkedEvent]:
    """The tenant's parked events, oldest first; with ``resolved``, the retried and skipped ones
    too (how a request is followed)."""
    require(who, READ)
    query = sql.SQL(_PARKED).format(s=read.schema)
    with read.tenant(who.tenant_id) as conn, conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(query, (NAME, who.tenant_id, resolved)).fetchall()
    return [ParkedEvent.model_validate(row) for row in rows]


def parked_requests(read: ReadModels, who: Principal, request_id: UUID | None = None,
                    limit: int = 20) -> list[ParkedRequest]:
    """The tenant's requests, newest first (the one named, with ``request_id``)."""
    require(who, READ)
    with read.tenant(who.tenant_id) as conn:
        found = requests_of(conn, read.schema, request_id, limit)
    if request_id is not None and not found:
        raise ParkedRequestNotFoundError(f"no request {request_id}")
    return [ParkedRequest.model_validate(asdict(r)) for r in found]


def request_retry(read: ReadModels, who: Principal, notification_id: int,
                  requested_by: str, wait: float = 0.0) -> ParkedRequest:
    """Ask for the parked event's aggregate to be applied again from the log (what still fails
    is parked again); with ``wait``, the request as it stands after at most that many seconds."""
    require(who, ADMIN)
    return _ask(read, who, notification_id, RETRY, requested_by, None, wait)


def request_skip(read: ReadModels, who: Principal, notification_id: int, reason: str,
                 requested_by: str, wait: float = 0.0) -> ParkedRequest:
    """Ask for the parked event to be skipped with a decision recorded in the log (who, why);
    the rest of its aggregate is then applied."""
    require(who, ADMIN)
    if not reason.strip():
        raise InvalidCommandError("a skip needs a reason")
    return _ask(read, who, notification_id, SKIP, requested_by, reason.strip(), wait)


def _ask(read: ReadModels, who: Principal, notification_id: int, action: str, requested_by: str,
         reason: str | None, wait: float) -> ParkedRequest:
    """The request recorded (the same action asked again while one waits: that one), waited for
    at most ``wait`` seconds."""
    event = next((e for e in parked_events(read, who) if e.notification_id == notification_id),
                 None)
    if event is None:
        raise ParkedEventNotFoundError(f"no parked event at notification {notification_id}")
    with read.tenant(who.tenant_id) as conn:
        waiting = [r for r in requests_of(conn, read.schema, limit=100) if r.status == REQUESTED
                   and r.notification_id == notification_id and r.action == action]
        made = waiting[0] if waiting and event.requested == action else ask(
            conn, read.schema, who.tenant_id, notification_id, action,
            requested_by.strip() or f"key {who.key_id}", reason)
    request = ParkedRequest.model_validate(asdict(made))
    deadline = time.monotonic() + wait
    while request.status == REQUESTED and time.monotonic() < deadline:
        time.sleep(0.1)
        request = parked_requests(read, who, request.request_id)[0]
    return request

