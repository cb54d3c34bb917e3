"""Applies domain events to the read models in PostgreSQL, exactly once per event identity.

One batch is one transaction: the read-model rows, the per-aggregate tracking and the per-tenant
position commit together or not at all. Idempotency is keyed on the event's identity
(originator id, version), never on Kafka offsets:

- a version already applied is skipped (a duplicate delivery changes nothing); the batch's
  tenants are locked before their tracking is read, so a duplicate delivered to two projectors at
  once is skipped by the second;
- a version beyond the next one means a gap: the missing versions are read from the event store
  (the source of truth) and applied first, in order; if the log does not have them the batch fails;
- an event the projection cannot decode or apply is recorded in ``projection_failures`` and the
  batch fails: tracking does not move past it, and the projector stops. A row the database
  refuses is found the same way: the batch is applied again without the pipeline, statement by
  statement, so the refusal comes back with its event.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql

from domain.errors import PalimpsestError
from projections.cards import NAME, project
from projections.sinks import PostgresSink

log = logging.getLogger(__name__)


class ProjectionError(PalimpsestError):
    """The projection cannot apply an event; it stops rather than skip it."""


class ProjectionUnavailableError(ProjectionError):
    """The database went away mid-batch: nothing was applied; the same batch can be retried."""

    retryable = True


#: Errors of the connection, not of the event: retried, never recorded as a poison event.
TRANSIENT = (psycopg.OperationalError, psycopg.InterfaceError)


@dataclass(frozen=True)
class Delivered:
    """A domain event and the notification id the log gave it."""

    notification_id: int
    event: Any

    @property
    def tenant_id(self) -> str:
        return str(self.event.tenant_id)


#: Reads versions ``after < v < before`` of one aggregate from the event store.
FetchMissing = Callable[[UUID, int, int], list[Any]]


class Projector:
    def __init__(
        self, connect: Callable[[], psycopg.Connection[Any]], schema: str,
        fetch_missing: FetchMissing, name: str = NAME,
    ) -> None:
        self.connect = connect
        self.schema = schema
        self.name = name
        self.fetch_missing = fetch_missing
        self.sink = PostgresSink(schema)
        s = sql.Identifier(schema)
        self._set_tenant = "SELECT set_config('palimpsest.tenant', %s, true)"
        #: One transaction at a time per tenant (and projection and schema), locks taken in one
        #: order: two projectors given the same events at once (consumer-group members during a
        #: rebalance, a starting member's catch-up) apply them once.
        self._lock_tenants = (
            "SELECT count(pg_advisory_xact_lock(k)) FROM (SELECT DISTINCT "
            "hashtextextended(%s || '/' || t, 0) AS k FROM unnest(%s::text[]) AS t ORDER BY k) s")
        self._tracking = sql.SQL(
            "SELECT tenant_id, originator_id, version FROM {}.projection_tracking "
            "WHERE projection = %s AND originator_id = ANY(%s)").format(s)
        self._track = sql.SQL(
            "INSERT INTO {}.projection_tracking (projection, tenant_id, originator_id, version) "
            "SELECT %s, %s, o, v FROM unnest(%s::uuid[], %s::bigint[]) AS t(o, v) "
            "ON CONFLICT (projection, tenant_id, originator_id) "
            "DO UPDATE SET version = excluded.version").format(s)
        self._position = sql.SQL(
            "INSERT INTO {}.projection_position (projection, tenant_id, position) "
            "VALUES (%s, %s, %s) ON CONFLICT (projection, tenant_id) DO UPDATE SET "
            "position = greatest({}.projection_position.position, excluded.position), "
            "updated_at = now()").format(s, s)
        #: Both at once, when the batch applied some of the tenant's events.
        self._track_and_position = sql.Composed(
            [sql.SQL("WITH t AS ("), self._track, sql.SQL(") "), self._position])
        self._failure = sql.SQL(
            "INSERT INTO {}.projection_failures (projection, tenant_id, notification_id, "
            "originator_id, originator_version, topic, error) VALUES (%s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (projection, notification_id) DO UPDATE SET error = excluded.error, "
            "failed_at = now()").format(s)
        self._conn: psycopg.Connection[Any] | None = None
        self._pipelined = True
        for name, value in list(vars(self).items()):  # render once: composing per call is slow
            if isinstance(value, sql.Composable):
                setattr(self, name, value.as_string(None))

    @property
    def conn(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = self.connect()
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    def apply_batch(self, batch: Sequence[Delivered]) -> int:
        """Apply a batch in one transaction; returns how many events changed the read models.

        Statements are pipelined, so a row the database refuses is reported at the end of the
        batch, without its event: the batch is then applied again statement by statement, which
        stops at that event and records it in ``projection_failures``."""
        try:
            return self._apply(batch, pipelined=True)
        except psycopg.DatabaseError as error:
            log.warning("projection %r: the database refused a row (%s); finding its event",
                        self.name, error)
            return self._apply(batch, pipelined=False)

    def _apply(self, batch: Sequence[Delivered], pipelined: bool) -> int:
        applied = 0
        self._pipelined = pipelined
        try:
            with (self.conn.pipeline() if pipelined else contextlib.nullcontext()), \
                    self.conn.transaction(), self.conn.cursor() as cur:
                cur.execute(self._lock_tenants, (f"{self.name}/{self.schema}",
                                                 list({d.tenant_id for d in batch})))
                versions = self._versions(cur, batch)  # read once the tenants are this one's
                ordered = sorted(batch, key=lambda d: d.tenant_id)  # stable: keeps log order
                for tenant_id, items in groupby(ordered, key=lambda d: d.tenant_id):
                    applied += self._apply_tenant(cur, tenant_id, list(items), versions)
        except ProjectionError:
            raise
        except TRANSIENT as error:
            self._conn = None
            raise ProjectionUnavailableError(
                f"projection {self.name!r}: the database failed mid-batch: {error}") from error
        except Exception as error:
            self._conn = None
            if pipelined and isinstance(error, psycopg.DatabaseError):
                raise  # to apply_batch, which applies the batch again statement by statement
            raise ProjectionError(f"projection {self.name!r} failed: {error}") from error
        return applied

    def _versions(self, cur: psycopg.Cursor[Any], batch: Sequence[Delivered]
                  ) -> dict[str, dict[UUID, int]]:
        """Tenant → aggregate → last applied version, for the whole batch in one round trip (the
        projector role reads every tenant's tracking; it writes only the tenant it set)."""
        originators = list({d.event.originator_id for d in batch})
        cur.execute(self._tracking, (self.name, originators))
        versions: dict[str, dict[UUID, int]] = {}
        for tenant_id, originator_id, version in cur.fetchall():
            versions.setdefault(tenant_id, {})[originator_id] = version
        return versions

    def _apply_tenant(self, cur: psycopg.Cursor[Any], tenant_id: str, items: list[Delivered],
                      known: dict[str, dict[UUID, int]]) -> int:
        cur.execute(self._set_tenant, (tenant_id,))
        versions = known.get(tenant_id, {})
        touched: set[UUID] = set()
        applied = 0
        for item in items:
            event = item.event
            last = versions.get(event.originator_id, 0)
            if event.originator_version <= last:
                continue  # already applied: a duplicate delivery
            pending = self._fill_gap(event, last) + [event]
            for each in pending:
                self._apply_one(cur, each, item.notification_id)
                versions[each.originator_id] = each.originator_version
                applied += 1
            touched.add(event.originator_id)
        position = max(d.notification_id for d in items)
        if touched:
            ids = list(touched)
            cur.execute(self._track_and_position, (self.name, tenant_id, ids,
                                                   [versions[i] for i in ids],
                                                   self.name, tenant_id, position))
        else:
            cur.execute(self._position, (self.name, tenant_id, position))
        return applied

    #: The pseudo-tenant of the log position: "every event up to here is applied", advanced
    #: only by a catch-up that reads the log in order.
    LOG = "*"

    def log_position(self) -> int:
        with self.conn.transaction():
            self.conn.execute(self._set_tenant, (self.LOG,))
            row = self.conn.execute(sql.SQL(
                "SELECT position FROM {}.projection_position WHERE projection = %s "
                "AND tenant_id = %s").format(sql.Identifier(self.schema)),
                (self.name, self.LOG)).fetchone()
        return int(row[0]) if row else 0

    def mark_log_position(self, position: int) -> None:
        with self.conn.transaction():
            self.conn.execute(self._set_tenant, (self.LOG,))
            self.conn.execute(self._position, (self.name, self.LOG, position))

    def _fill_gap(self, event: Any, last: int) -> list[Any]:
        if event.originator_version == last + 1:
            return []
        missing = self.fetch_missing(event.originator_id, last, event.originator_version)
        expected = list(range(last + 1, event.originator_version))
        if [e.originator_version for e in missing] != expected:
            raise ProjectionError(
                f"aggregate {event.originator_id}: versions {expected} are missing from the log"
            )
        log.info("filled a gap of %d event(s) for %s from the log", len(missing),
                 event.originator_id)
        return missing

    def _apply_one(self, cur: psycopg.Cursor[Any], event: Any, notification_id: int) -> None:
        try:
            self.sink.apply_all(cur, project(event))
        except TRANSIENT:
            raise
        except Exception as error:
            if self._pipelined and isinstance(error, psycopg.DatabaseError):
                raise  # a pipeline reports a refused row late: it may be an earlier event's
            self.record_failure(event.tenant_id, notification_id, event.originator_id,
                                event.originator_version, type(event).__qualname__, error)
            raise ProjectionError(
                f"cannot apply {type(event).__qualname__} v{event.originator_version} of "
                f"{event.originator_id} (notification {notification_id}): {error}"
            ) from error

    def record_failure(
        self, tenant_id: str, notification_id: int, originator_id: UUID | None,
        version: int | None, topic: str | None, error: BaseException | str,
    ) -> None:
        """Record an event the projection could not apply, in a transaction of its own."""
        try:
            with self.connect() as conn, conn.transaction():
                conn.execute(self._set_tenant, (tenant_id,))
                conn.execute(self._failure, (self.name, tenant_id, notification_id, originator_id,
                                             version, topic, str(error)[:2000]))
        except Exception:  # recording must not hide the original failure
            log.exception("could not record the failure of notification %s", notification_id)


def deliveries(notifications: Iterable[Any], to_domain_event: Callable[[Any], Any]
               ) -> list[Delivered]:
    return [Delivered(n.id, to_domain_event(n)) for n in notifications]
