"""Requests to retry or skip a parked event, made where the projector cannot run (decision 0018).

An HTTP process connects as the tenant-bound role: it reads its tenant's parked events
(``projection_failures`` is under row-level security like every read model) but can neither write
the read models nor record a projection decision, whose aggregate is every tenant's. It records a
request instead — a row of ``projection_requests``, of its tenant (:func:`ask`) — and ``serve``'s
own process, which holds the runtime role's log and the projector role's database, carries it out
(:class:`RequestKeeper`: a short poll, one ``serve`` at a time by a lease) with what ``palimpsest
failures`` does (:func:`projections.failures.retry`, :func:`projections.failures.skip`) for that
tenant only, then records the outcome on the request. The parked event's own status (parked, then
retried or skipped) and the request's (:data:`REQUESTED`, then done, refused or failed) say how
it went.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from domain.errors import InvalidCommandError
from infra.postgres import Database, Lease
from infra.redact import described, traced
from projections.cards import NAME
from projections.failures import ParkedEventNotFoundError, retry, skip

log = logging.getLogger(__name__)

RETRY, SKIP = "retry", "skip"
#: A request's status: waiting, carried out, refused (no such parked event of its tenant, or
#: an invalid skip), failed (an error; the parked event stays parked, another request may follow).
REQUESTED, DONE, REFUSED, FAILED = "requested", "done", "refused", "failed"


@dataclass(frozen=True)
class Request:
    """One request, as ``projection_requests`` holds it."""

    tenant_id: str
    request_id: UUID
    notification_id: int
    action: str
    reason: str | None
    requested_by: str
    requested_at: datetime
    status: str = REQUESTED
    outcome: str | None = None
    done_at: datetime | None = None


#: A read schema: its name, or its identifier (``ReadModels.schema``).
Schema = str | sql.Identifier


def _schema(schema: Schema) -> sql.Identifier:
    return schema if isinstance(schema, sql.Identifier) else sql.Identifier(schema)


_COLUMNS = ("tenant_id, request_id, notification_id, action, reason, requested_by, requested_at, "
            "status, outcome, done_at")
_ASK = ("INSERT INTO {s}.projection_requests (tenant_id, request_id, projection, notification_id, "
        "action, reason, requested_by) VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING " + _COLUMNS)
_LIST = ("SELECT " + _COLUMNS + " FROM {s}.projection_requests WHERE projection = %s "
         "AND (%s::uuid IS NULL OR request_id = %s::uuid) ORDER BY requested_at DESC LIMIT %s")
_OPEN = ("SELECT " + _COLUMNS + " FROM {s}.projection_requests WHERE status = 'requested' "
         "AND projection = %s ORDER BY requested_at LIMIT %s")
_RECORD = ("UPDATE {s}.projection_requests SET status = %s, outcome = %s, done_at = now(), "
           "reason = NULL "  # carried out: the reason lives on only sealed, in the decision's event
           "WHERE tenant_id = %s AND request_id = %s")


def ask(conn: psycopg.Connection[Any], schema: Schema, tenant_id: str, notification_id: int,
        action: str, requested_by: str, reason: str | None = None) -> Request:
    """Record a request of ``tenant_id`` on ``conn``, whose transaction is that tenant's (the
    policy refuses a row of any other)."""
    query = sql.SQL(_ASK).format(s=_schema(schema))
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(query, (tenant_id, uuid4(), NAME, notification_id, action, reason,
                                  requested_by)).fetchone()
    assert row is not None  # RETURNING of one inserted row
    return Request(**row)


def requests_of(conn: psycopg.Connection[Any], schema: Schema, request_id: UUID | None = None,
                limit: int = 20) -> list[Request]:
    """The requests ``conn`` may read (a tenant's transaction: that tenant's), newest first."""
    query = sql.SQL(_LIST).format(s=_schema(schema))
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(query, (NAME, request_id, request_id, limit)).fetchall()
    return [Request(**row) for row in rows]


def open_requests(conn: psycopg.Connection[Any], schema: Schema, limit: int = 50) -> list[Request]:
    """The requests not carried out yet, oldest first (as the projector role: every tenant's)."""
    query = sql.SQL(_OPEN).format(s=_schema(schema))
    with conn.cursor(row_factory=dict_row) as cur:
        return [Request(**row) for row in cur.execute(query, (NAME, limit)).fetchall()]


def carry_out(projector: Any, app: Any, request: Request) -> tuple[str, str]:
    """Retry or skip the parked event ``request`` names, if it is the request's tenant's: the
    status and outcome to record. An outcome names ids and counts, never an event's text."""
    try:
        if request.action == RETRY:
            done = retry(projector, app, request.notification_id, tenant=request.tenant_id)
            applied, still = sum(r.applied for r in done), any(r.parked for r in done)
            return DONE, f"retried: {applied} event(s) applied" + ("; still parked" if still else "")
        one = skip(projector, app, request.notification_id, request.reason or "",
                   request.requested_by, tenant=request.tenant_id)
        return DONE, (f"skipped: {one.applied} later event(s) applied"
                      + ("; still parked" if one.parked else ""))
    except (ParkedEventNotFoundError, InvalidCommandError) as error:  # messages of ids only
        return REFUSED, str(error)
    except Exception as error:  # the projector's or the database's: recorded, the next one goes on
        log.error("request %s (%s of notification %d) failed: %s", request.request_id,
                  request.action, request.notification_id, described(error))
        return FAILED, described(error)


def record(conn: psycopg.Connection[Any], schema: Schema, request: Request, status: str,
           outcome: str) -> None:
    """Store the request's outcome, in a transaction of its tenant (the policy's check)."""
    with conn.transaction():
        conn.execute("SELECT set_config('palimpsest.tenant', %s, true)", (request.tenant_id,))
        conn.execute(sql.SQL(_RECORD).format(s=_schema(schema)),
                     (status, outcome, request.tenant_id, request.request_id))


class RequestKeeper:
    """Carries out the open requests every ``interval`` seconds until ``stop``: a thread of
    ``serve``'s own process, with ``lease`` one process at a time. ``db`` is the projector role's
    database; ``make_projector`` makes the incremental projector on it (a batch's)."""

    def __init__(self, db: Database, schema: str, app: Any,
                 make_projector: Callable[[], Any], stop: threading.Event,
                 lease: Lease | None = None, interval: float = 1.0) -> None:
        self.db, self.schema, self.app = db, schema, app
        self.make_projector = make_projector
        self.stop = stop
        self.lease = lease
        self.interval = interval

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self._run, name="parked-event requests", daemon=True)
        thread.start()
        return thread

    def once(self) -> int:
        """Carry out what is requested now; how many requests were."""
        with self.db.connect(autocommit=True) as conn:
            found = open_requests(conn, self.schema)
            if not found:
                return 0
            projector = self.make_projector()
            try:
                for request in found:
                    started = time.monotonic()
                    status, outcome = carry_out(projector, self.app, request)
                    record(conn, self.schema, request, status, outcome)
                    log.info("request %s: %s of notification %d %s in %.2f s", request.request_id,
                             request.action, request.notification_id, status,
                             time.monotonic() - started)
            finally:
                projector.close()
        return len(found)

    def _run(self) -> None:
        try:
            while not self.stop.wait(self.interval):
                if self.lease is not None and not self.lease.held():
                    continue
                try:
                    self.once()
                except psycopg.Error as error:  # the database is away: the next turn tries again
                    log.debug("parked-event requests not read: %s", described(error))
                except Exception as error:  # the thread goes on: a request stays until carried out
                    log.error("parked-event requests not carried out: %s", traced(error))
                    self.stop.wait(5.0)
        finally:
            if self.lease is not None:
                self.lease.release()
