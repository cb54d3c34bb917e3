"""Reading the read models as the runtime role, one tenant per transaction.

Row-level security does the isolation: each transaction sets ``palimpsest.tenant`` from the
caller's identity and the database shows nothing else.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool
from pydantic import BaseModel

from domain.values import check_tenant
from infra.postgres import Database
from projections.cards import NAME
from projections.predicates import CURRENT, SUPERSEDED_AS_OF, VERSION_AS_OF


class CardRecord(BaseModel):
    card_id: UUID
    aggregate_id: UUID
    kind: str
    memory_type: str
    scope: str
    subject: str | None
    label: str | None
    content: str
    title: str | None
    valid_from: datetime | None
    valid_to: datetime | None
    occurred_at: datetime | None
    recorded_at: datetime
    retracted_at: datetime | None
    status: str | None
    source: str
    superseded: bool
    cardinality: str | None = None
    verified_at: datetime | None = None
    due_at: datetime | None = None
    owner: str | None = None


class Freshness(BaseModel):
    """Whether the read models include a given write, and if not, by how many events not."""

    position: int
    projected: int
    stale_by: int

    @property
    def fresh(self) -> bool:
        return self.stale_by == 0


_CARD = """c.card_id, c.aggregate_id, c.kind, c.memory_type, c.scope, c.subject, c.label,
    {content} AS content, {title} AS title, c.valid_from, {valid_to} AS valid_to, c.occurred_at,
    c.recorded_at, c.retracted_at, {status} AS status, c.source, c.cardinality,
    {verified} AS verified_at, c.due_at, c.owner"""


#: A version's known-time bounds, as ``known_from`` and ``known_to``. A version replaced at the
#: instant it was recorded has an empty range (no bounds): it was known from and to the moment
#: the next version of its card was.
_REPLACED = ("min(lower(known)) OVER (PARTITION BY card_id ORDER BY version "
             "ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING)")
KNOWN_BOUNDS = (f"CASE WHEN isempty(known) THEN {_REPLACED} ELSE lower(known) END AS known_from, "
                f"CASE WHEN isempty(known) THEN {_REPLACED} ELSE upper(known) END AS known_to")


class ReadModels:
    def __init__(self, db: Database, schema: str, pool_size: int = 4) -> None:
        self.schema = sql.Identifier(schema)
        self.pool = ConnectionPool(
            kwargs={"host": db.host, "port": db.port, "dbname": db.dbname, "user": db.user,
                    "password": db.password, "row_factory": dict_row},
            min_size=1, max_size=pool_size, open=True)

    def close(self) -> None:
        self.pool.close()

    @contextmanager
    def tenant(self, tenant_id: str, settings: Mapping[str, str] | None = None,
               ) -> Iterator[psycopg.Connection[Any]]:
        """A transaction that reads as ``tenant_id``, with these settings for its length
        (``SET LOCAL``), all set in one statement."""
        check_tenant(tenant_id)
        gucs = {"palimpsest.tenant": tenant_id, **(settings or {})}
        setting = "SELECT " + ", ".join("set_config(%s, %s, true)" for _ in gucs)
        with self.pool.connection() as conn, conn.transaction():
            conn.execute(setting, [value for pair in gucs.items() for value in pair])
            yield conn

    def current(self, tenant_id: str, subject: str | None = None) -> list[CardRecord]:
        """Cards valid now (``projections.predicates.CURRENT``; events and knowledge included);
        with ``subject``, its cards and the commitments it owns."""
        query = sql.SQL(
            "SELECT " + _CARD.format(content="c.content", title="c.title", valid_to="c.valid_to",
                                     status="c.status", verified="c.verified_at")
            + ", false AS superseded FROM {s}.cards c WHERE " + CURRENT
            + " AND (%(subject)s::text IS NULL OR c.subject = %(subject)s "
            "OR (c.subject IS NULL AND c.owner = %(subject)s)) "
            "ORDER BY c.recorded_at, c.card_id").format(s=self.schema)
        with self.tenant(tenant_id) as conn:
            rows = conn.execute(query, {"subject": subject}).fetchall()
        return [CardRecord(**row) for row in rows]

    def as_of(self, tenant_id: str, valid_at: datetime, known_at: datetime,
              subject: str | None = None) -> list[CardRecord]:
        """Cards that, as known at ``known_at``, were valid at ``valid_at``: one indexed query,
        the same version search sees (``projections.predicates.VERSION_AS_OF``)."""
        query = sql.SQL(
            "SELECT " + _CARD.format(content="v.content", title="v.title",
                                     valid_to="upper(v.valid)", status="v.status",
                                     verified="v.verified_at")
            + ", " + SUPERSEDED_AS_OF + " AS superseded "
            "FROM {s}.cards c JOIN {s}.card_versions v ON " + VERSION_AS_OF
            + " WHERE (%(subject)s::text IS NULL OR c.subject = %(subject)s "
            "OR (c.subject IS NULL AND c.owner = %(subject)s)) "
            "ORDER BY c.recorded_at, c.card_id").format(s=self.schema)
        with self.tenant(tenant_id) as conn:
            rows = conn.execute(query, {"known_at": known_at, "valid_at": valid_at,
                                        "subject": subject}).fetchall()
        return [CardRecord(**row) for row in rows]

    def history(self, tenant_id: str, card_id: UUID) -> list[dict[str, Any]]:
        """Every version of a card, with both timelines. A version replaced at the instant it
        was recorded (two events of one card at one moment) was known for no time: its range is
        empty, and it reads as known from and to the moment the next version was."""
        query = sql.SQL(
            "SELECT version, content, title, status, lower(valid) AS valid_from, "
            "upper(valid) AS valid_to, " + KNOWN_BOUNDS + ", "
            "retracted FROM {s}.card_versions WHERE card_id = %s ORDER BY version").format(
            s=self.schema)
        with self.tenant(tenant_id) as conn:
            return conn.execute(query, (card_id,)).fetchall()

    def projected(self, tenant_id: str) -> int:
        with self.tenant(tenant_id) as conn:
            return self.position(conn, tenant_id)

    def position(self, conn: psycopg.Connection[Any], tenant_id: str) -> int:
        """The highest notification id of the tenant the read models include."""
        query = sql.SQL("SELECT position FROM {}.projection_position WHERE projection = %s "
                        "AND tenant_id = %s").format(self.schema)
        row = conn.execute(query, (NAME, tenant_id)).fetchone()
        return int(row["position"]) if row else 0

    def wait_for(self, tenant_id: str, position: int, timeout: float = 5.0,
                 poll: float = 0.02) -> Freshness:
        """Wait until the tenant's read models include notification ``position``; on timeout,
        say how many notifications behind they are."""
        deadline = time.monotonic() + timeout
        while True:
            projected = self.projected(tenant_id)
            if projected >= position or time.monotonic() >= deadline:
                return Freshness(position=position, projected=projected,
                                 stale_by=max(position - projected, 0))
            time.sleep(poll)
