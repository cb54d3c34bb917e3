"""Applies domain events to the read models in PostgreSQL, exactly once per event identity.

One batch is one transaction: the read-model rows, the per-aggregate tracking, the per-tenant
position and the batch's parked events commit together or not at all. Idempotency is keyed on the
event's identity (originator id, version), never on Kafka offsets:

- a version already applied is skipped (a duplicate delivery changes nothing); the batch's
  tenants are locked before their tracking is read, so a duplicate delivered to two projectors at
  once is skipped by the second;
- a version beyond the next one means a gap: the missing versions are read from the event store
  (the source of truth) and applied first, in order;
- an event that cannot be decoded or applied, or whose row the database refuses, parks its
  aggregate (decision 0007): it and the aggregate's later events are recorded in
  ``projection_failures`` and not applied, tracking stays before them, and the rest of the batch
  commits. Statements are pipelined, so a refused row is reported late, without its event: the
  batch is then applied again with a savepoint per event, which parks the event that made it;
- an operator's skip (:mod:`projections.decisions`, an event in the log) skips the event it names
  wherever it is met, and un-parks its aggregate when the decision itself arrives;
- an erasure applied (``Erasure.Erased``), once its batch has committed, is handed to
  ``on_erased`` (the key ring forgets the destroyed keys it cached, the touched tables are
  vacuumed): best effort, after the fact, never failing the batch.

A tenant's position is the highest notification it has *handled*: applied, or parked and listed.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql

from domain.errors import PalimpsestError
from infra.redact import described, traced
from projections.bookkeeping import Batch, Bookkeeping, channel
from projections.cards import ERASED, NAME, operations, storable
from projections.decisions import ProjectionDecisions, Skips, skips
from projections.ops import Forget
from projections.parking import (
    PROJECTION,
    REFUSED,
    UNDECODABLE,
    WAITING,
    Failure,
    Undecodable,
    undecodable,
)
from projections.sinks import PostgresSink

log = logging.getLogger(__name__)


class ProjectionError(PalimpsestError):
    """The projection cannot go on: its own bookkeeping failed (an event's failure parks it)."""


class ProjectionUnavailableError(ProjectionError):
    """The database went away mid-batch: nothing was applied; the same batch can be retried."""

    retryable = True


class _Redo(Exception):
    """A pipelined batch met an error it cannot place: apply it again, a savepoint per event."""


#: Errors of the connection, not of the event: retried, never recorded as a poison event.
TRANSIENT = (psycopg.OperationalError, psycopg.InterfaceError)


@dataclass(frozen=True)
class Delivered:
    """A domain event (or an :class:`Undecodable` in its place) and its notification id.
    ``clean``: its stored form shows it holds no text PostgreSQL cannot store (see
    :func:`decode`); otherwise its operations are searched for it."""

    notification_id: int
    event: Any
    clean: bool = False

    @property
    def tenant_id(self) -> str:
        return str(self.event.tenant_id)


def decode(mapper: Any, notification: Any) -> Delivered:
    """``notification`` as a domain event; one that cannot be decoded comes as an Undecodable."""
    try:
        event = mapper.to_domain_event(notification)
    except Exception as error:
        return Delivered(notification.id, undecodable(notification, error))
    return Delivered(notification.id, event, clean_state(notification.state))


#: Where, in a stored JSON state, a NUL or a surrogate can be: the escapes ``\\u0000`` and
#: ``\\uD800``–``\\uDFFF`` (JSON writes a NUL only so; a surrogate cannot be UTF-8 at all).
_ESCAPES = re.compile(rb"\\u(?:0000|[dD])")
_SEALED = b'"_sealed_"'


def clean_state(state: bytes) -> bool:
    """Whether a stored state certainly holds no NUL and no lone surrogate: JSON (an object,
    neither compressed nor encrypted) without those escapes, and with no sealed field (whose
    text the bytes do not show: ``infra.sealing``). One search of the bytes, where searching the
    decoded event's operations costs microseconds; it may say no for a clean state (a Hangul
    escape, a sealed field), never yes for another."""
    return state[:1] == b"{" and _ESCAPES.search(state) is None and _SEALED not in state


#: An aggregate's events ``after < version < before`` (``before`` None: all later), from the log.
ReadAggregate = Callable[[UUID, int, int | None], list[Delivered]]


class Projector:
    def __init__(
        self, connect: Callable[[], psycopg.Connection[Any]], schema: str,
        fetch_missing: ReadAggregate, name: str = NAME,
        decisions: Callable[[], Iterable[Any]] = tuple, cache_schema: str | None = None,
        on_erased: Callable[[list[Any]], None] | None = None,
    ) -> None:
        self.connect = connect
        self.schema = schema
        self.channel = channel(schema)
        self.name = name
        self.fetch_missing = fetch_missing
        self.decisions = decisions
        self.sink = PostgresSink(schema, cache_schema)
        #: Told the erasures a committed batch applied (see the module's notes).
        self.on_erased = on_erased
        #: Events this projector parked, in batches that committed.
        self.parked = 0
        self._skips: Skips | None = None
        self.sql = Bookkeeping(schema)
        self._conn: psycopg.Connection[Any] | None = None

    @property
    def conn(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = self.connect()
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    def _discard(self) -> None:
        """Drop the connection after a failed batch (a pipeline's state is not trusted)."""
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn = None

    @property
    def skips(self) -> Skips:
        """The operators' skip decisions, read from the log once, then kept by their events."""
        if self._skips is None:
            self._skips = skips(self.decisions())
        return self._skips

    def apply_batch(self, batch: Sequence[Delivered], retry: frozenset[UUID] = frozenset()
                    ) -> int:
        """Apply a batch in one transaction; returns how many events changed the read models.
        ``retry``: aggregates whose parked events are tried again (they are in ``batch``)."""
        try:
            return self._apply(batch, retry, pipelined=True)
        except (_Redo, psycopg.DatabaseError) as error:
            log.warning("projection %r: a row was refused or an event failed mid-batch (%s); "
                        "applying the batch again, a savepoint per event", self.name,
                        error if isinstance(error, _Redo) else described(error))
            return self._apply(batch, retry, pipelined=False)

    def retry(self, originator_id: UUID) -> int:
        """A parked aggregate's events applied again from the log, after a fix: its parked rows
        become ``retried``; what still fails is parked again. The tenant's erasures projected
        while it was parked then forget again (:meth:`_forget_again`)."""
        missing = self.fetch_missing(originator_id, 0, None)
        applied = self.apply_batch(missing, retry=frozenset({originator_id}))
        if applied and missing:
            self._forget_again(missing[0].tenant_id, min(d.notification_id for d in missing))
        return applied

    def _forget_again(self, tenant_id: str, since: int) -> None:
        """Apply again, in log order, what the tenant's erasures recorded after ``since`` forget:
        projected while the aggregate was parked, they found none of its rows, which the retry
        has just written (their texts read as erased, with the events' times). A rebuild applies
        them after those rows, so the tombstones must be the same (erasure's time, no words)."""
        schema = sql.Identifier(self.schema)
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.execute(self.sql.lock_tenants, (f"{self.name}/{self.schema}", [tenant_id]))
            cur.execute(self.sql.set_tenant, (tenant_id,))
            erasures = cur.execute(sql.SQL(
                "SELECT erasure_id FROM {}.erasures WHERE tenant_id = %s AND position > %s "
                "ORDER BY position").format(schema), (tenant_id, since)).fetchall()
            for (erasure_id,) in erasures:
                for item in self.fetch_missing(erasure_id, 0, None):
                    forgets = [op for op in operations(item.event, item.clean)
                               if isinstance(op, Forget)]
                    self.sink.position = item.notification_id
                    self.sink.apply_all(cur, forgets)

    def _apply(self, batch: Sequence[Delivered], retry: frozenset[UUID], pipelined: bool) -> int:
        decided = [d for d in batch if isinstance(d.event, ProjectionDecisions.Skipped)]
        tenants = {storable(t) for t in {d.tenant_id for d in batch}}
        tenants |= {d.event.event_tenant for d in decided}
        state = Batch()
        applied = 0
        try:
            with (self.conn.pipeline() if pipelined else contextlib.nullcontext()), \
                    self.conn.transaction(), self.conn.cursor() as cur:
                cur.execute(self.sql.lock_tenants, (f"{self.name}/{self.schema}", list(tenants)))
                originators = {d.event.originator_id for d in batch} | retry
                self.sql.read_state(cur, self.name, originators | {
                    d.event.aggregate_id for d in decided}, state)  # once the tenants are ours
                for originator_id in retry & state.parked.keys():
                    self._release(cur, originator_id, state)
                ordered = sorted(batch, key=lambda d: d.tenant_id)  # stable: keeps log order
                for tenant_id, items in groupby(ordered, key=lambda d: d.tenant_id):
                    applied += self._apply_tenant(cur, storable(tenant_id), list(items), state,
                                                  pipelined)
                for decision in decided:
                    applied += self._decide(cur, decision, state, pipelined)
                if applied:  # told at commit: the embedder wakes for the cards
                    cur.execute(self.sql.notify, (self.channel,))
        except (ProjectionError, _Redo):
            self._discard()
            raise
        except TRANSIENT as error:
            self._discard()
            raise ProjectionUnavailableError(
                f"projection {self.name!r}: the database failed mid-batch: {error}") from error
        except Exception as error:
            self._discard()
            if pipelined and isinstance(error, psycopg.DatabaseError):
                raise  # to apply_batch, which applies the batch again, a savepoint per event
            raise ProjectionError(f"projection {self.name!r} failed: {described(error)}"
                                  ) from error
        self._parked(state.recorded)
        self._erased(state.erased)
        return applied

    def _erased(self, erasures: list[Any]) -> None:
        """Hand a committed batch's erasures to ``on_erased``; what it raises is logged."""
        if not erasures or self.on_erased is None:
            return
        try:
            self.on_erased(erasures)
        except Exception as error:  # the erasure is in the read models: the rest is best effort
            log.error("projection %r: the follow-up of %d erasure(s) failed: %s", self.name,
                      len(erasures), traced(error))

    def _release(self, cur: psycopg.Cursor[Any], originator_id: UUID, state: Batch) -> None:
        """An aggregate un-parked: its parked rows (under each tenant they are under) retried."""
        del state.parked[originator_id]
        for tenant_id in sorted(state.parked_under.pop(originator_id, ())):
            cur.execute(self.sql.set_tenant, (tenant_id,))
            cur.execute(self.sql.unpark, (self.name, originator_id))

    def _apply_tenant(self, cur: psycopg.Cursor[Any], tenant_id: str, items: list[Delivered],
                      state: Batch, pipelined: bool) -> int:
        cur.execute(self.sql.set_tenant, (tenant_id,))
        versions = state.versions.setdefault(tenant_id, {})
        touched: set[UUID] = set()
        applied = 0
        for item in items:
            event = item.event
            originator_id = event.originator_id
            if event.originator_version <= versions.get(originator_id, 0):
                continue  # already applied: a duplicate delivery
            before = versions.get(originator_id, 0)
            applied += self._apply_aggregate(cur, item, versions, state, pipelined)
            if versions.get(originator_id, 0) > before:
                touched.add(originator_id)
        position = max(d.notification_id for d in items)
        ids = list(touched)
        tracked = (self.name, tenant_id, ids, [versions[i] for i in ids])
        if tenant_id == self.LOG:  # the decisions' tenant: the log position is the catch-up's
            if ids:
                cur.execute(self.sql.track, tracked)
        elif ids:
            cur.execute(self.sql.track_and_position, (*tracked, self.name, tenant_id, position))
        else:
            cur.execute(self.sql.position, (self.name, tenant_id, position))
        return applied

    def _apply_aggregate(self, cur: psycopg.Cursor[Any], item: Delivered,
                         versions: dict[UUID, int], state: Batch, pipelined: bool) -> int:
        """``item`` applied after the versions it misses, or parked with them."""
        originator_id = item.event.originator_id
        first = state.parked.get(originator_id)
        pending = [item] if first is not None else self._pending(
            item, versions.get(originator_id, 0))
        applied = 0
        for each in pending:
            if first is not None and each.event.originator_version == first.originator_version:
                cur.execute(self.sql.met_again, (self.name, each.notification_id))
                continue  # the parked event itself, delivered again: counted, left as it is
            if first is not None:
                self._record(cur, first.waiting(each.event, each.notification_id), state)
                continue
            first = self._apply_one(cur, each, pipelined)
            if first is not None:
                state.parked[originator_id] = first
                state.parked_under.setdefault(originator_id, set()).add(first.tenant_id)
                self._record(cur, first, state)
                continue
            versions[originator_id] = each.event.originator_version
            applied += 1
            if isinstance(each.event, ERASED):
                state.erased.append(each.event)
        return applied

    def _pending(self, item: Delivered, last: int) -> list[Delivered]:
        """The versions between ``last`` and ``item``'s from the log, then ``item``; a version
        the log does not have stands as an undecodable event (it parks the aggregate)."""
        event = item.event
        if event.originator_version == last + 1:
            return [item]
        missing = self.fetch_missing(event.originator_id, last, event.originator_version)
        expected = list(range(last + 1, event.originator_version))
        if [d.event.originator_version for d in missing] != expected:
            absent = Undecodable(event.originator_id, event.originator_version,
                                 type(event).__qualname__, item.tenant_id,
                                 f"versions {expected} are missing from the log")
            return [Delivered(item.notification_id, absent)]
        log.info("filled a gap of %d event(s) for %s from the log", len(missing),
                 event.originator_id)
        return [*missing, item]

    def _apply_one(self, cur: psycopg.Cursor[Any], item: Delivered, pipelined: bool
                   ) -> Failure | None:
        """Apply one event; the failure that parks it, if it fails."""
        event, notification_id = item.event, item.notification_id
        skips = self.skips  # first: an undecodable event can be skipped too
        skipped = skips.get((event.originator_id, event.originator_version)) if skips else None
        if skipped is not None:
            cur.execute(self.sql.failure, Failure.skipped(skipped).row(self.name))
            return None
        if isinstance(event, Undecodable):
            return Failure.of(event, notification_id, UNDECODABLE, event.error)
        try:
            ops = operations(event, item.clean)
        except Exception as error:
            return Failure.of(event, notification_id, PROJECTION, error)
        self.sink.position = notification_id
        if pipelined:
            try:
                self.sink.apply_all(cur, ops)
            except TRANSIENT:
                raise
            except Exception as error:  # some of its statements may be in the pipeline already
                raise _Redo(f"notification {notification_id}: {described(error)}") from error
            return None
        try:
            with self.conn.transaction():  # a savepoint: a refused row takes only its event back
                self.sink.apply_all(cur, ops)
        except TRANSIENT:
            raise
        except Exception as error:
            reason = REFUSED if isinstance(error, psycopg.DatabaseError) else PROJECTION
            return Failure.of(event, notification_id, reason, error)
        return None

    def _decide(self, cur: psycopg.Cursor[Any], item: Delivered, state: Batch,
                pipelined: bool) -> int:
        """A skip decision arrived: the event it names is skipped from now on, its row says so,
        and its aggregate's events up to the decision are applied again from the log."""
        decision = item.event
        self._skips = None  # read again: another process may have decided more meanwhile
        self.skips[(decision.aggregate_id, decision.aggregate_version)] = decision
        cur.execute(self.sql.set_tenant, (decision.event_tenant,))
        cur.execute(self.sql.failure, Failure.skipped(decision).row(self.name))
        if decision.aggregate_id not in state.parked:
            return 0
        self._release(cur, decision.aggregate_id, state)
        last = state.versions.get(decision.event_tenant, {}).get(decision.aggregate_id, 0)
        pending = [d for d in self.fetch_missing(decision.aggregate_id, last, None)
                   if d.notification_id <= item.notification_id]
        if not pending:
            return 0
        return self._apply_tenant(cur, decision.event_tenant, pending, state, pipelined)

    def _record(self, cur: psycopg.Cursor[Any], failure: Failure, state: Batch) -> None:
        cur.execute(self.sql.failure, failure.row(self.name))
        state.recorded.append(failure)

    def _parked(self, recorded: list[Failure]) -> None:
        """Say what a committed batch parked: a new failure once, a waiting event quietly."""
        self.parked += len(recorded)
        for failure in recorded:
            level = logging.DEBUG if failure.reason == WAITING else logging.WARNING
            log.log(level, "projection %r parked v%s of %s (notification %s, tenant %s): %s",
                    self.name, failure.originator_version, failure.originator_id,
                    failure.notification_id, failure.tenant_id, failure.error)

    def forget(self, forgotten: Sequence[Any]) -> None:
        """What erasures forget (:class:`~projections.ops.Forget`), applied without their events
        and in one transaction: a rebuild as known before them shows their tombstones."""
        if not forgotten:
            return
        with self.conn.transaction(), self.conn.cursor() as cur:
            for op in forgotten:
                cur.execute(self.sql.set_tenant, (op.tenant_id,))
                self.sink.apply(op, cur)

    #: The pseudo-tenant of the log position: "every event up to here is handled", advanced
    #: only by a catch-up that reads the log in order.
    LOG = "*"

    def log_position(self) -> int:
        with self.conn.transaction():
            self.conn.execute(self.sql.set_tenant, (self.LOG,))
            row = self.conn.execute(self.sql.log_position, (self.name, self.LOG)).fetchone()
        return int(row[0]) if row else 0

    def mark_log_position(self, position: int) -> None:
        with self.conn.transaction():
            self.conn.execute(self.sql.set_tenant, (self.LOG,))
            self.conn.execute(self.sql.position, (self.name, self.LOG, position))

    def record(self, failure: Failure) -> None:
        """Record a failure in a transaction of its own (one that is no event of a batch: a Kafka
        message that is not a relayed event)."""
        try:
            with self.connect() as conn, conn.transaction():
                conn.execute(self.sql.set_tenant, (failure.tenant_id,))
                conn.execute(self.sql.failure, failure.row(self.name))
        except Exception as error:  # recording must not hide the original failure
            log.error("could not record the failure of notification %s: %s",
                      failure.notification_id, traced(error))

