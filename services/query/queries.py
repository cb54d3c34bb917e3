"""The query side: search (the fused retrieval), facts, history, briefing and the prompt context.
Everything here reads the read models only, one tenant per transaction, and returns plain data.

An erased card (DESIGN §7) never answers a search or stands in the briefing; ``facts`` and
``history`` show it as a tombstone (``erased``, no value); ``erasures`` lists the erasures."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

from psycopg import sql
from pydantic import BaseModel, computed_field

from domain.errors import CardNotFoundError, InvalidCommandError
from domain.ingestion import IngestStatus
from domain.rules.commitments import UNRESOLVED, reads_as
from domain.rules.validation import check_text
from infra.settings import Settings
from projections import predicates
from services.command.application import Clock
from services.query.readmodels import KNOWN_BOUNDS, IngestionRecord, ProposalRecord, ReadModels
from services.query.retrieval.query import RetrievalQuery
from services.query.retrieval.results import RetrievalResult
from services.query.retrieval.retriever import Retriever
from services.query.retrieval.scoring import PendingWrite

#: The most ingested turns one listing returns.
MAX_INGESTIONS = 1_000
#: The most erasures one listing returns.
MAX_ERASURES = 1_000

_CARD_FIELDS = """card_id, aggregate_id, kind, memory_type, scope, project_id, group_id, subject,
    label, cardinality, content AS value, title, status, owner, due_at, valid_from, valid_to,
    occurred_at, recorded_at, verified_at, source, agent_id"""


class Fact(BaseModel):
    card_id: UUID
    subject: str | None
    label: str | None
    cardinality: str | None
    scope: str
    #: None for a tombstone (``erased``).
    value: str | None
    valid_from: datetime | None
    valid_to: datetime | None
    recorded_at: datetime
    verified_at: datetime | None
    superseded: bool
    source: str
    memory_type: str = "fact"
    #: A commitment's or blocker's status at the asked moment (``overdue`` past its due date).
    status: str | None = None
    due_at: datetime | None = None
    #: Its text was forgotten (an erasure), and when.
    erased: bool = False
    erased_at: datetime | None = None


class Version(BaseModel):
    version: int
    #: None once the card was erased (every version of it: erasure is retroactive).
    value: str | None
    title: str | None
    status: str | None
    valid_from: datetime | None
    valid_to: datetime | None
    known_from: datetime
    known_to: datetime | None
    retracted: bool
    verified_at: datetime | None
    change: str
    erased_at: datetime | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def erased(self) -> bool:
        return self.erased_at is not None


class CardHistory(BaseModel):
    card_id: UUID
    kind: str
    memory_type: str
    subject: str | None
    label: str | None
    versions: list[Version]
    edges: list[dict[str, Any]]
    #: When the card's text was forgotten; its versions, times and edges stay.
    erased_at: datetime | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def erased(self) -> bool:
        return self.erased_at is not None


class BriefingItem(BaseModel):
    card_id: UUID
    memory_type: str
    value: str
    status: str | None
    owner: str | None = None
    due_at: datetime | None = None
    since: datetime | None = None


class Briefing(BaseModel):
    now: datetime
    open: list[BriefingItem]
    waiting: list[BriefingItem]
    overdue: list[BriefingItem]
    blockers: list[BriefingItem]
    arbitrations: list[dict[str, Any]]
    aging_facts: list[BriefingItem]
    stale_knowledge: list[BriefingItem]

    @property
    def counts(self) -> dict[str, int]:
        return {name: len(getattr(self, name)) for name in (
            "open", "waiting", "overdue", "blockers", "arbitrations", "aging_facts", "stale_knowledge")}


class Queries:
    def __init__(self, read: ReadModels, retriever: Retriever, settings: Settings, clock: Clock) -> None:
        self.read = read
        self.retriever = retriever
        self.settings = settings
        self.clock = clock
        self.zone = ZoneInfo(settings.time_zone)
        self.s = sql.Identifier(settings.read_schema)

    def close(self) -> None:
        self.retriever.close()
        self.read.close()

    def now(self) -> datetime:
        return self.clock().astimezone(self.zone)

    def query(self, text: str, *, now: datetime | None = None, **options: Any) -> RetrievalQuery:
        """A ``RetrievalQuery`` on this process's clock and zone."""
        return RetrievalQuery(text=text, now=(now or self.now()).astimezone(self.zone), **options)

    def search(self, tenant_id: str, query: RetrievalQuery | str,
               pending: Sequence[PendingWrite] = ()) -> RetrievalResult:
        if isinstance(query, str):
            query = self.query(query)
        return self.retriever.search(tenant_id, query, pending)

    def facts(self, tenant_id: str, subject: str, valid_at: datetime | None = None,
              known_at: datetime | None = None) -> list[Fact]:
        """The facts (state cards) of a subject valid now, or valid at ``valid_at`` as known at
        ``known_at`` (either alone: the other is now / the same moment)."""
        check_text(subject, "subject")
        now = self.now()
        if valid_at is None and known_at is None:
            records, moment = self.read.current(tenant_id, subject=subject), now
        else:
            moment = valid_at or known_at or now
            records = self.read.as_of(tenant_id, moment, known_at or now, subject=subject)
        return [Fact(card_id=r.card_id, subject=r.subject, label=r.label, cardinality=r.cardinality,
                     scope=r.scope, value=r.content, valid_from=r.valid_from, valid_to=r.valid_to,
                     recorded_at=r.recorded_at, verified_at=r.verified_at, superseded=r.superseded,
                     source=r.source, memory_type=r.memory_type, due_at=r.due_at,
                     status=reads_as(r.memory_type, r.status, r.due_at, moment),
                     erased=r.erased, erased_at=r.erased_at)
                for r in records if r.kind == "state"]

    def history(self, tenant_id: str, ref: str) -> list[CardHistory]:
        """Every version of a card — or of every card of a slot — with both timelines, what
        changed at each version, and the card's edges. ``ref``: a card id, a slot id, or
        ``subject/label`` (all scopes)."""
        check_text(ref, "ref")
        with self.read.tenant(tenant_id) as conn:
            cards = conn.execute(sql.SQL(
                "SELECT c.card_id, c.kind, c.memory_type, c.subject, c.label, c.erased_at "
                "FROM {s}.cards c "
                "WHERE " + _match(ref) + " ORDER BY c.recorded_at, c.card_id").format(s=self.s),
                _ref_params(ref)).fetchall()
            if not cards:
                raise CardNotFoundError(f"no card or slot {ref!r}")
            ids = [c["card_id"] for c in cards]
            versions = conn.execute(sql.SQL(
                "SELECT card_id, version, content AS value, title, status, lower(valid) AS valid_from,"
                " upper(valid) AS valid_to, " + KNOWN_BOUNDS + ", "
                "retracted, verified_at, erased_at FROM {s}.card_versions "
                "WHERE card_id = ANY(%s::uuid[]) "
                "ORDER BY card_id, version").format(s=self.s), (ids,)).fetchall()
            edges = conn.execute(sql.SQL(
                "SELECT src_id, dst_id, edge, recorded_at FROM {s}.card_relations "
                "WHERE src_id = ANY(%(ids)s::uuid[]) OR dst_id = ANY(%(ids)s::uuid[]) "
                "ORDER BY recorded_at").format(s=self.s), {"ids": ids}).fetchall()
        by_card: dict[UUID, list[dict[str, Any]]] = {}
        for row in versions:
            by_card.setdefault(row.pop("card_id"), []).append(row)
        return [CardHistory(**card, versions=_changes(by_card.get(card["card_id"], [])),
                            edges=[e for e in edges if card["card_id"] in (e["src_id"], e["dst_id"])])
                for card in cards]

    def briefing(self, tenant_id: str, project_id: str | None = None,
                 now: datetime | None = None) -> Briefing:
        """Open, waiting and overdue commitments, active blockers, pending arbitrations, aging
        facts and stale knowledge, in personal scope and the given project."""
        now = now or self.now()
        retrieval = self.settings.retrieval
        params = {"project_id": project_id, "group_ids": [], "include_global": False, "now": now,
                  "aging": now - timedelta(days=retrieval.aging_days),
                  "stale": now - timedelta(days=retrieval.knowledge_stale_days),
                  "unresolved": sorted(UNRESOLVED)}
        seen = predicates.visible(self.settings.read_schema, as_of_query=False)

        def items(where: str, since: str = "c.recorded_at") -> list[BriefingItem]:
            statement = sql.SQL(
                "SELECT c.card_id, c.memory_type, c.content AS value, c.status, c.owner, c.due_at, "
                + since + " AS since FROM {s}.cards c WHERE {seen} AND " + where
                + " ORDER BY since, c.card_id").format(s=self.s, seen=seen)
            rows = conn.execute(statement, params).fetchall()
            return [BriefingItem(**{**row, "status": reads_as(row["memory_type"], row["status"],
                                                               row["due_at"], now)}) for row in rows]

        with self.read.tenant(tenant_id) as conn:
            commitments = "c.memory_type = 'commitment' AND c.status = "
            anchor = "greatest(coalesce(c.valid_from, c.recorded_at), c.verified_at)"
            briefing = Briefing(
                now=now,
                open=items(commitments + "'open' AND (c.due_at IS NULL OR c.due_at >= %(now)s)"),
                waiting=items(commitments + "'waiting' AND (c.due_at IS NULL OR c.due_at >= %(now)s)"),
                overdue=items("c.memory_type = 'commitment' AND c.status = ANY(%(unresolved)s) "
                              "AND c.due_at < %(now)s", since="c.due_at"),
                blockers=items("c.memory_type = 'blocker' AND c.status = 'active'"),
                arbitrations=conn.execute(sql.SQL(
                    "SELECT case_id, subject, label, current_values, proposed_value, reason, "
                    "opened_at FROM {s}.arbitration_queue WHERE decision IS NULL "
                    "ORDER BY opened_at").format(s=self.s)).fetchall(),
                aging_facts=items("c.kind = 'state' AND c.cardinality = 'single_value' "
                                  "AND c.memory_type NOT IN ('commitment', 'blocker') AND "
                                  + anchor + " <= %(aging)s", since=anchor),
                stale_knowledge=items("c.kind = 'knowledge' AND greatest(c.recorded_at, c.verified_at)"
                                      " <= %(stale)s", since="greatest(c.recorded_at, c.verified_at)"),
            )
        return briefing


    def ingestions(self, tenant_id: str, status: str | None = None,
                   limit: int = 100) -> list[IngestionRecord]:
        """The tenant's ingested turns, newest first (``status``: received, extracted, applied,
        dead_letter — the dead letters to re-run — or erased), at most ``limit`` (1–1000)."""
        if status is not None:
            try:
                status = IngestStatus(status).value
            except ValueError:
                choices = ", ".join(s.value for s in IngestStatus)
                raise InvalidCommandError(
                    f"unknown ingestion status {status!r}; expected one of {choices}") from None
        if not 1 <= limit <= MAX_INGESTIONS:
            raise InvalidCommandError(f"limit must lie in 1..{MAX_INGESTIONS}, got {limit}")
        return self.read.ingestions(tenant_id, status, limit)

    def ingest_counts(self, tenant_id: str) -> dict[str, int]:
        """How many of the tenant's ingested turns stand at each status (every status named,
        zero included): what ``status`` shows."""
        counts = self.read.ingest_counts(tenant_id)
        return {s.value: counts.get(s.value, 0) for s in IngestStatus}

    def erasures(self, tenant_id: str, limit: int = 50) -> list[dict[str, Any]]:
        """The tenant's erasures, the newest first, at most ``limit`` (1–1000): ``erasure_id``,
        ``unit``, ``target`` (an id, never a name), ``basis``, ``requested_by``, ``erased_at``,
        ``keys_destroyed`` and ``cards`` (how many became tombstones). The reason is sealed in the
        log with the tenant's key, never in a read model."""
        if not 1 <= limit <= MAX_ERASURES:
            raise InvalidCommandError(f"limit must lie in 1..{MAX_ERASURES}, got {limit}")
        return self.read.erasures(tenant_id, limit)

    def proposals(self, tenant_id: str, review: str | None = None,
                  limit: int = 100) -> list[ProposalRecord]:
        """The tenant's consolidation proposals, newest first: all, or those ``pending`` review,
        ``accepted`` or ``rejected``; at most ``limit`` (1–1000)."""
        if review not in (None, "pending", "accepted", "rejected"):
            raise InvalidCommandError(
                f"unknown review {review!r}; expected pending, accepted or rejected")
        if not 1 <= limit <= 1_000:
            raise InvalidCommandError(f"limit must lie in 1..1000, got {limit}")
        return self.read.proposals(tenant_id, review, limit)

def _match(ref: str) -> str:
    if _uuid(ref) is not None:
        return "(c.card_id = %(id)s OR c.aggregate_id = %(id)s)"
    if ref.count("/") != 1 or not all(part.strip() for part in ref.split("/")):
        raise InvalidCommandError(f"expected a card id, a slot id or subject/label, got {ref!r}")
    return "(c.subject = %(subject)s AND c.label = %(label)s)"


def _ref_params(ref: str) -> dict[str, Any]:
    if (card_id := _uuid(ref)) is not None:
        return {"id": card_id}
    subject, label = (part.strip() for part in ref.split("/"))
    return {"subject": subject, "label": label}


def _uuid(text: str) -> UUID | None:
    try:
        return UUID(text)
    except ValueError:
        return None


def _changes(versions: list[dict[str, Any]]) -> list[Version]:
    """Each version with what distinguishes it from the one before."""
    out, before = [], None
    for row in versions:
        out.append(Version(**row, change=_change(before, row)))
        before = row
    return out


def _change(before: dict[str, Any] | None, after: dict[str, Any]) -> str:
    if before is None:
        return "recorded"
    changes = []
    if after["retracted"] and not before["retracted"]:
        changes.append("retracted")
    if after["valid_to"] != before["valid_to"]:
        changes.append("validity closed" if after["valid_to"] else "validity reopened")
    if after["value"] != before["value"] or after["title"] != before["title"]:
        changes.append("content revised")
    if after["status"] != before["status"]:
        changes.append(f"status {before['status'] or '—'} → {after['status']}")
    if after["verified_at"] != before["verified_at"]:
        changes.append("verified")
    return ", ".join(changes) or "tags or links changed"
