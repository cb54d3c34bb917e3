"""What an operator does with parked events (decision 0007): list them, retry them after a fix,
or skip one with an audited decision.

- :func:`retry` applies a parked aggregate's events again from the log, and after it the
  aggregates of its tenant the database refused later (an edge to one of its cards waits with it);
  with no id, every parked aggregate, oldest first. What still fails is parked again.
- :func:`skip` records a decision, an event of the projection's :class:`ProjectionDecisions` in
  the log, and applies it at once: the projector skips the event it names and applies the rest of
  its aggregate. Every later reader of the log (a catch-up, a rebuild) skips the same event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError
from eventsourcing.persistence import IntegrityError
from psycopg import sql
from psycopg.rows import dict_row

from domain.errors import InvalidCommandError, NotFoundError
from projections.cards import NAME
from projections.decisions import ProjectionDecisions
from projections.parking import MESSAGE, PARKED, REFUSED
from projections.projector import Projector
from projections.replay import catch_up, read_log


class ParkedEventNotFoundError(NotFoundError):
    """No parked event at that notification."""


@dataclass(frozen=True)
class Retried:
    """One aggregate tried again: the events it applied, and whether it is still parked."""

    originator_id: UUID | None
    tenant_id: str
    applied: int
    parked: bool


_ROWS = """SELECT notification_id, tenant_id, originator_id, originator_version, topic, reason,
    error, status FROM {}.projection_failures WHERE projection = %s AND {} ORDER BY notification_id"""


def _rows(projector: Projector, where: str, *params: Any) -> list[dict[str, Any]]:
    query = sql.SQL(_ROWS).format(sql.Identifier(projector.schema), sql.SQL(where))
    with projector.connect() as conn, conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query, (projector.name, *params)).fetchall()


def _named(projector: Projector, notification_id: int, tenant: str | None
           ) -> list[dict[str, Any]]:
    """The row parked at ``notification_id``, if it is ``tenant``'s (any tenant's: None)."""
    rows = _rows(projector, "notification_id = %s AND status = %s", notification_id, PARKED)
    return [r for r in rows if tenant is None or r["tenant_id"] == tenant]


def _first_per_aggregate(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each parked aggregate's first parked row, oldest first (a message's row stands alone)."""
    first: dict[Any, dict[str, Any]] = {}
    for row in rows:
        first.setdefault(row["originator_id"], row)
    return sorted(first.values(), key=lambda r: r["notification_id"])


def retry(projector: Projector, app: Any, notification_id: int | None = None,
          tenant: str | None = None) -> list[Retried]:
    """Apply parked aggregates again from the log: the one parked at ``notification_id`` (and
    those of its tenant refused after it), or every parked aggregate, oldest first. With
    ``tenant``, the event at ``notification_id`` must be that tenant's (a request of one tenant
    never reaches another's)."""
    parked = _first_per_aggregate(_rows(projector, "status = %s", PARKED))
    if notification_id is not None:
        named = _named(projector, notification_id, tenant)
        if not named:
            raise ParkedEventNotFoundError(f"no parked event at notification {notification_id}")
        first = next(r for r in parked if r["originator_id"] == named[0]["originator_id"])
        parked = [first] + [r for r in parked if r["reason"] == REFUSED and r is not first
                            and r["tenant_id"] == first["tenant_id"]
                            and r["notification_id"] > first["notification_id"]]
    return [_retry_one(projector, app, row) for row in parked]


def _retry_one(projector: Projector, app: Any, row: dict[str, Any]) -> Retried:
    if row["reason"] == MESSAGE:  # no event of its own: the log has the message's events
        applied = catch_up(projector, app)
        with projector.connect() as conn, conn.transaction():
            conn.execute("SELECT set_config('palimpsest.tenant', %s, true)", (row["tenant_id"],))
            conn.execute(sql.SQL(
                "UPDATE {}.projection_failures SET status = 'retried', resolved_at = now() "
                "WHERE projection = %s AND notification_id = %s").format(
                sql.Identifier(projector.schema)), (projector.name, row["notification_id"]))
        return Retried(None, row["tenant_id"], applied, False)
    applied = projector.retry(row["originator_id"])
    still = _rows(projector, "originator_id = %s AND status = %s", row["originator_id"], PARKED)
    return Retried(row["originator_id"], row["tenant_id"], applied, bool(still))


def skip(projector: Projector, app: Any, notification_id: int, reason: str, decided_by: str,
         tenant: str | None = None) -> Retried:
    """Skip the parked event at ``notification_id`` (``tenant``'s, when given) with an audited
    decision: an event in the log (who, why, and the failure it answers), applied at once. Says
    how many of its aggregate's later events were then applied, and whether it is still parked."""
    if not reason.strip() or not decided_by.strip():
        raise InvalidCommandError("a skip needs a reason and who decided it (--reason, --by)")
    rows = _named(projector, notification_id, tenant)
    if not rows or rows[0]["originator_id"] is None:
        raise ParkedEventNotFoundError(f"no parked event at notification {notification_id}")
    row = rows[0]
    before = _tracked(projector, row["originator_id"])
    position = _decide(app, row, reason.strip(), decided_by.strip())
    projector.apply_batch(list(read_log(app, position, position)))
    after = _tracked(projector, row["originator_id"])
    still = _rows(projector, "originator_id = %s AND status = %s", row["originator_id"], PARKED)
    return Retried(row["originator_id"], row["tenant_id"],
                   max(after - before - (after >= row["originator_version"]), 0), bool(still))


def _tracked(projector: Projector, originator_id: UUID) -> int:
    """The aggregate's last applied version (0: none)."""
    with projector.connect() as conn:
        row = conn.execute(sql.SQL(
            "SELECT max(version) FROM {}.projection_tracking WHERE projection = %s "
            "AND originator_id = %s").format(sql.Identifier(projector.schema)),
            (projector.name, originator_id)).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def _decide(app: Any, row: dict[str, Any], reason: str, decided_by: str, attempts: int = 5
            ) -> int:
    """The skip decision saved in the projection's decisions aggregate; its notification id."""
    for _ in range(attempts):
        try:
            decisions = app.repository.get(ProjectionDecisions.create_id(NAME))
        except AggregateNotFoundError:
            decisions = ProjectionDecisions(projection=NAME)
        decisions.skip(event_tenant=row["tenant_id"], aggregate_id=row["originator_id"],
                       aggregate_version=row["originator_version"],
                       notification_id=row["notification_id"], topic=row["topic"] or "",
                       kind=row["reason"], error=row["error"], reason=reason,
                       decided_by=decided_by)
        try:
            recordings = app.save(decisions)
        except IntegrityError:  # another operator decided meanwhile: load it again
            continue
        return max(r.notification.id for r in recordings)
    raise InvalidCommandError("the decision lost the race with other decisions; try again")
