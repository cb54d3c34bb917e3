"""Reading the read models as the runtime role, one tenant per transaction.

Row-level security does the isolation: each transaction sets ``palimpsest.tenant`` from the
caller's identity and the database shows nothing else.

An erased card (DESIGN §7) is listed as a tombstone: ``erased`` true, ``erased_at`` the erasure's
time, no content or title; its id, kind, times and edges stay.
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
from pydantic import BaseModel, computed_field

from domain.values import check_tenant
from infra.postgres import Database
from infra.vectors import VectorTypes
from projections import consolidation_sql
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
    #: None for a tombstone (its text was erased).
    content: str | None
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
    #: When its text was forgotten (an erasure); None while it holds its text.
    erased_at: datetime | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def erased(self) -> bool:
        """A tombstone: the card was erased; that it was known, and when, is all that is left."""
        return self.erased_at is not None


class IngestionRecord(BaseModel):
    """A row of ``ingestions``: one ingested turn and where it stands in extraction."""

    tenant_id: str
    ingestion_id: UUID
    event_card_id: UUID
    session_id: str
    turn_id: str
    role: str
    agent_id: str | None
    said_at: datetime
    timezone: str
    received_at: datetime
    #: received | extracted | applied | dead_letter | erased (an erasure took the turn: its
    #: extraction, in flight or later, writes nothing)
    status: str
    attempts: int
    error: str | None
    #: How many candidate cards the model proposed that were admitted (once extracted).
    candidates: int | None
    #: How many it proposed that were not written: their value has no support in the turn or the
    #: earlier turns shown (each with why in ``Ingestion.Extracted``).
    rejected: int | None = None
    #: The cards the candidates became (once applied).
    card_ids: list[UUID] | None
    updated_at: datetime


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
    {verified} AS verified_at, c.due_at, c.owner, c.erased_at"""


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
            "retracted, erased_at, erased_at IS NOT NULL AS erased FROM {s}.card_versions "
            "WHERE card_id = %s ORDER BY version").format(s=self.schema)
        with self.tenant(tenant_id) as conn:
            return conn.execute(query, (card_id,)).fetchall()

    def ingestions(self, tenant_id: str, status: str | None, limit: int) -> list[IngestionRecord]:
        """The tenant's ingested turns, newest first; with ``status``, only those."""
        query = sql.SQL(
            "SELECT * FROM {s}.ingestions WHERE (%(status)s::text IS NULL OR status = %(status)s) "
            "ORDER BY received_at DESC, ingestion_id LIMIT %(limit)s").format(s=self.schema)
        with self.tenant(tenant_id) as conn:
            rows = conn.execute(query, {"status": status, "limit": limit}).fetchall()
        return [IngestionRecord(**row) for row in rows]

    def ingest_counts(self, tenant_id: str) -> dict[str, int]:
        """How many of the tenant's ingested turns stand at each status (present ones only)."""
        query = sql.SQL("SELECT status, count(*) AS n FROM {s}.ingestions GROUP BY status").format(
            s=self.schema)
        with self.tenant(tenant_id) as conn:
            return {row["status"]: int(row["n"]) for row in conn.execute(query).fetchall()}

    def erasures(self, tenant_id: str, limit: int) -> list[dict[str, Any]]:
        """The tenant's erasures, the newest first (``erasures``: no reason, no personal text)."""
        query = sql.SQL(
            "SELECT erasure_id, unit, target, basis, requested_by, erased_at, keys_destroyed, "
            "cards FROM {s}.erasures ORDER BY erased_at DESC, position DESC LIMIT %s").format(
            s=self.schema)
        with self.tenant(tenant_id) as conn:
            return conn.execute(query, (limit,)).fetchall()

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

    # ---- consolidation (services.command.consolidation) ---------------------------------------------

    def consolidation_rows(self, tenant_id: str, max_cards: int) -> dict[str, list[dict[str, Any]]]:
        """What a consolidation scan of the tenant decides on, read in one transaction
        (:mod:`projections.consolidation_sql`): the ``vectors`` of the newest ``max_cards``
        compared cards (embeddings as float32 numpy arrays), ``items``, ``singles``,
        ``both_valid`` pairs, then the ``cards`` all of them name and the ``links`` and
        ``proposed`` pairs already touching those cards (or their slots)."""
        q = consolidation_sql.statements(self.schema)
        with self.tenant(tenant_id) as conn:
            VectorTypes().register(conn)
            rows = {name: conn.execute(q[name]).fetchall()
                    for name in ("items", "singles", "both_valid")}
            rows["vectors"] = [
                {**row, "embedding": row["embedding"].to_numpy()} for row in conn.execute(
                    q["vectors"], {"max_cards": max_cards}, binary=True).fetchall()]
            paired = sorted({row[end] for row in rows["both_valid"] for end in ("a_id", "b_id")})
            rows["cards"] = [*rows["vectors"], *rows["items"], *rows["singles"],
                             *conn.execute(q["cards"], {"ids": paired}).fetchall()]
            ids = sorted({card[key] for card in rows["cards"] for key in ("card_id", "aggregate_id")})
            rows["links"] = conn.execute(q["links"], {"ids": ids}).fetchall()
            rows["proposed"] = conn.execute(q["proposed"], {"ids": ids}).fetchall()
        return rows

    def consolidation_mark(self, tenant_id: str) -> tuple[int, int]:
        """(projected position, embeddings): when neither moved, a scan would find what the last
        one found."""
        q = consolidation_sql.statements(self.schema)
        with self.tenant(tenant_id) as conn:
            row = conn.execute(q["mark"], {"projection": NAME, "tenant": tenant_id}).fetchone()
        return (int(row["position"] or 0), int(row["embeddings"])) if row else (0, 0)

    def card_aggregates(self, tenant_id: str, card_ids: list[UUID]) -> dict[UUID, UUID]:
        """The aggregate each card lives in: its slot for a state card, itself otherwise."""
        q = consolidation_sql.statements(self.schema)
        with self.tenant(tenant_id) as conn:
            rows = conn.execute(q["cards"], {"ids": card_ids}).fetchall()
        return {row["card_id"]: row["aggregate_id"] for row in rows}

    def proposals(self, tenant_id: str, review: str | None, limit: int) -> list[ProposalRecord]:
        """The tenant's consolidation proposals, newest first; ``review``: ``pending``,
        ``accepted`` or ``rejected`` (None: all)."""
        q = consolidation_sql.statements(self.schema)
        with self.tenant(tenant_id) as conn:
            rows = conn.execute(q["proposals"], {"review": review, "limit": limit}).fetchall()
        return [ProposalRecord(**row) for row in rows]


class ProposalRecord(BaseModel):
    """A row of ``proposals``: two cards a consolidation scan found alike or at odds, and its
    review (``review`` None while pending)."""

    proposal_id: UUID
    #: duplicate | contradiction
    kind: str
    src_id: UUID
    dst_id: UUID
    #: What accepting it does: merge, related_to, contradicts, supersedes or updates.
    edge: str
    #: Why it was proposed; None once erased (with one of its cards).
    rationale: str | None
    score: float
    proposed_at: datetime
    #: accepted | rejected; None while pending.
    review: str | None
    reviewed_at: datetime | None
    reviewed_by: str | None
    note: str | None
