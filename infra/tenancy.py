"""The tenant a process's database work is for: what row-level security reads (decision 0018).

The HTTP processes connect as a role that sees and writes only the rows whose ``tenant_id`` is
the setting ``palimpsest.tenant`` (policies with FORCE, made by :mod:`infra.tenant_policies` and
:mod:`projections.schema`). The application sets it from the authenticated key: the key's
check binds :data:`CURRENT_TENANT` (a context variable: one request's, never its neighbour's),
and every connection the event store, the key ring and the key store take from their pools
applies it before its first statement (:func:`apply_tenant`). The query side's transactions set
it themselves (``ReadModels.tenant``). With none bound the setting is empty: nothing is
readable, nothing writable.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any
from weakref import WeakKeyDictionary

import psycopg
from eventsourcing.postgres import PostgresDatastore
from psycopg import Connection
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow

#: The setting the row-level security policies compare ``tenant_id`` with.
TENANT_SETTING = "palimpsest.tenant"
_SET = f"SELECT set_config('{TENANT_SETTING}', %s, %s)"

#: The tenant of the request under way in this context (None: no request, or not yet checked).
CURRENT_TENANT: ContextVar[str | None] = ContextVar("palimpsest_tenant", default=None)

#: What each connection's session holds already: applying it again costs no round trip.
_applied: WeakKeyDictionary[psycopg.Connection[Any], str] = WeakKeyDictionary()


def current_tenant() -> str | None:
    return CURRENT_TENANT.get()


def bind_tenant(tenant_id: str) -> None:
    """Make ``tenant_id`` the tenant of the rest of this context (a request, once its key is
    checked)."""
    CURRENT_TENANT.set(tenant_id)


@contextmanager
def acting_for(tenant_id: str | None) -> Iterator[None]:
    """``tenant_id`` bound for the length of the block, the previous one after it."""
    token = CURRENT_TENANT.set(tenant_id)
    try:
        yield
    finally:
        CURRENT_TENANT.reset(token)


def apply_tenant(conn: psycopg.Connection[Any]) -> None:
    """Set ``palimpsest.tenant`` on ``conn`` to the bound tenant ('' when none). An idle
    autocommit connection keeps it for its session, so the next use for the same tenant sends
    nothing; inside a transaction it is set for that transaction only."""
    tenant = CURRENT_TENANT.get() or ""
    idle = conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE
    if idle and _applied.get(conn) == tenant:
        return
    _applied.pop(conn, None)
    conn.execute(_SET, (tenant, not idle))
    if idle:
        _applied[conn] = tenant


def tenant_checked(conn: psycopg.Connection[Any]) -> None:
    """A pool's ``check``: each connection handed out carries the bound tenant."""
    apply_tenant(conn)


class TenantDatastore(PostgresDatastore):
    """eventsourcing's datastore whose connections carry the bound tenant: every statement of the
    event store (its inserts, the aggregates it reads, the notification log) runs under it."""

    @contextmanager
    def get_connection(self) -> Iterator[Connection[DictRow]]:
        with super().get_connection() as conn:
            apply_tenant(conn)
            yield conn


def tenant_datastore(datastore: PostgresDatastore) -> PostgresDatastore:
    """``datastore`` (the one eventsourcing's factory made from its environment) as a
    :class:`TenantDatastore`: the same pool and settings, each connection given the tenant."""
    if type(datastore) is PostgresDatastore:
        datastore.__class__ = TenantDatastore
    return datastore
