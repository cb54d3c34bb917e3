"""The use cases every edge offers, in one table: REST and MCP call the same operation with the
same input model, so they give the same answer for the same call.

Each :class:`services.entrypoints.operation.Operation` names the scope it needs and how it
behaves; :meth:`~services.entrypoints.operation.Operation.run` checks the key's scope, validates
the input, refuses a tenant named in it that is not the key's, and calls the use case with the
key's tenant. Writes answer their ``position``; a state a write created is kept in
:class:`services.query.pending.PendingWrites` until the read models include it, so a search by the same
tenant at once shows it (DESIGN §3, the read-your-writes overlay).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from uuid import UUID

from psycopg import sql
from pydantic import BaseModel

from domain.errors import CardNotFoundError, InvalidKindError
from domain.rules.commitments import reads_as
from domain.values import MemoryType
from services.command.commands import (
    Arbitrate,
    CorrectEvent,
    Link,
    Move,
    Remember,
    Revise,
    Verify,
    WriteResult,
)
from services.entrypoints import schemas as s
from services.entrypoints.erasure_ops import ERASURE_OPERATIONS
from services.entrypoints.ingest_ops import INGEST_OPERATIONS
from services.entrypoints.operation import Operation, fresh
from services.entrypoints.retention_ops import RETENTION_OPERATIONS
from services.entrypoints.review_ops import PARKED_OPERATIONS, REVIEW_OPERATIONS
from services.ingest.extraction import extraction_off_reason
from services.keys import Principal
from services.query import slicing
from services.query.context import render
from services.query.pending import pending_state
from services.query.retrieval.load import load_candidates
from services.query.retrieval.query import RetrievalQuery
from services.query.slicing import CardCounts, CardPage, CardSlice

if TYPE_CHECKING:
    from services.bootstrap import Services


# --- writes ---------------------------------------------------------------------------------


def _command(data: BaseModel, cls: type[Any], **extra: Any) -> Any:
    fields = data.model_dump(exclude={"tenant_id", "aggregate_id", *extra})
    return cls(**fields, **extra)


def remember(services: Services, who: Principal, data: s.RememberInput) -> WriteResult:
    command: Remember = _command(data, Remember)
    result = services.app.remember(who.tenant_id, command)
    services.pending.add(who.tenant_id, result,
                         pending_state(command, result, services.app.clock()))
    return result


def _slot(services: Services, who: Principal, card_id: UUID, given: UUID | None) -> UUID:
    """The aggregate a card lives in: as given, as this process wrote it, or as projected."""
    found = given or services.pending.slot_of(who.tenant_id, card_id)
    if found is None:
        found = _card(services, who, card_id).aggregate_id
    return found


def revise(services: Services, who: Principal, data: s.ReviseInput) -> WriteResult:
    projected = _cards(services, who, [data.card_id]).get(data.card_id)
    slot = data.aggregate_id or services.pending.slot_of(who.tenant_id, data.card_id) or (
        projected.aggregate_id if projected else None)
    if slot is None:
        raise CardNotFoundError(f"no card {data.card_id}")
    result = services.app.revise(who.tenant_id, slot, _command(data, Revise))
    written = None if projected is None else pending_state(
        _revision(projected, data), result, services.app.clock())
    services.pending.add(who.tenant_id, result, written)
    return result


def _revision(card: s.MemoryCard, data: s.ReviseInput) -> Remember:
    """A revision as the state it writes into the card's slot (for the overlay)."""
    return Remember(kind=card.kind, memory_type=card.memory_type, subject=card.subject,
                    label=card.label, cardinality=card.cardinality, scope=card.scope,
                    project_id=card.project_id, group_id=card.group_id, content=data.content,
                    valid_from=data.valid_from)


def correct(services: Services, who: Principal, data: s.CorrectInput) -> WriteResult:
    return services.app.correct(who.tenant_id, _command(data, CorrectEvent))


def verify(services: Services, who: Principal, data: s.VerifyInput) -> WriteResult:
    slot = _slot(services, who, data.card_id, data.aggregate_id)
    return services.app.verify(who.tenant_id, slot, _command(data, Verify))


def link(services: Services, who: Principal, data: s.LinkInput) -> WriteResult:
    return services.app.link(who.tenant_id, _command(data, Link))


def move(services: Services, who: Principal, data: s.MoveInput) -> WriteResult:
    return services.app.move(who.tenant_id, _command(data, Move))


def arbitrate(services: Services, who: Principal, data: s.ArbitrateInput) -> WriteResult:
    return services.app.arbitrate(who.tenant_id, _command(data, Arbitrate))


# --- reads ----------------------------------------------------------------------------------


_MEMORY_TYPES = frozenset(t.value for t in MemoryType)


def _cards(services: Services, who: Principal, ids: list[UUID]) -> dict[UUID, s.MemoryCard]:
    queries = services.queries
    now = queries.now()
    probe = RetrievalQuery(text="cards by id", now=now)
    with queries.read.tenant(who.tenant_id) as conn:
        _, records = load_candidates(conn, queries.retriever.ctx, probe, ids)
    return {card_id: s.MemoryCard(**{**row, "status": reads_as(
        row["memory_type"], row["status"], row["due_at"], now)}) for card_id, row in records.items()}


def _card(services: Services, who: Principal, card_id: UUID) -> s.MemoryCard:
    found = _cards(services, who, [card_id]).get(card_id)
    if found is None:
        raise CardNotFoundError(f"no card {card_id}")
    return found


def get_card(services: Services, who: Principal, data: s.GetCardInput) -> s.CardOutput:
    freshness = fresh(services, who, data)
    card = _card(services, who, data.card_id)
    return s.CardOutput(**card.model_dump(), freshness=freshness)


def get_memories(services: Services, who: Principal, data: s.GetMemoriesInput) -> s.MemoriesOutput:
    freshness = fresh(services, who, data)
    wanted = list(dict.fromkeys(data.card_ids))
    found = _cards(services, who, wanted)
    return s.MemoriesOutput(cards=[found[c] for c in wanted if c in found],
                            missing=[c for c in wanted if c not in found], freshness=freshness)


def history(services: Services, who: Principal, data: s.HistoryInput) -> s.HistoryOutput:
    freshness = fresh(services, who, data)
    cards = services.queries.history(who.tenant_id, data.ref)
    return s.HistoryOutput(ref=data.ref, cards=cards, freshness=freshness)


def search(services: Services, who: Principal, data: s.SearchInput) -> s.SearchOutput:
    unknown = [t for t in data.memory_types if t not in _MEMORY_TYPES]
    if unknown:
        raise InvalidKindError(f"unknown memory type {unknown[0]!r}; expected any of "
                               + ", ".join(sorted(_MEMORY_TYPES)))
    freshness = fresh(services, who, data)
    queries = services.queries
    as_of = data.as_of or s.AsOf()
    top = data.top_n or services.settings.retrieval.top_n
    # a filter by memory type is applied to the ranked cards: ask for more, keep the top n of them
    asked = min(top * 4, 50) if data.memory_types else data.top_n
    query = queries.query(data.query, now=data.now, project_id=data.project_id,
                          group_ids=tuple(data.group_ids), include_global=data.include_global,
                          valid_at=as_of.valid_at, known_at=as_of.known_at, explain=data.explain,
                          top_n=asked, subjects=tuple(data.subjects),
                          subject_prefix=data.subject_prefix, agent_ids=tuple(data.agent_ids),
                          session_ids=tuple(data.session_ids), fresh_from=data.min_position)
    result = queries.search(who.tenant_id, query, services.pending.of(who.tenant_id))
    services.pending.projected(who.tenant_id, result.diagnostics.projected_position)
    cards = result.results
    if data.memory_types:
        cards = [c for c in cards if c.memory_type in data.memory_types][:top]
    return s.SearchOutput(**{**dict(result), "results": cards}, freshness=freshness)


def context(services: Services, who: Principal, data: s.ContextInput) -> s.ContextOutput:
    result = search(services, who, data)
    return s.ContextOutput(text=render(result, services.queries.zone), result=result,
                           freshness=result.freshness)


def facts(services: Services, who: Principal, data: s.FactsInput) -> s.FactsOutput:
    freshness = fresh(services, who, data)
    as_of = data.as_of or s.AsOf()
    found = services.queries.facts(who.tenant_id, data.subject, as_of.valid_at, as_of.known_at)
    return s.FactsOutput(subject=data.subject, valid_at=as_of.valid_at, known_at=as_of.known_at,
                         facts=found, freshness=freshness)


def briefing(services: Services, who: Principal, data: s.BriefingInput) -> s.BriefingOutput:
    freshness = fresh(services, who, data)
    found = services.queries.briefing(who.tenant_id, data.project_id)
    return s.BriefingOutput(**dict(found), freshness=freshness)


_CASES = """SELECT case_id, slot_id, subject, label, current_values, proposed_value,
    proposed_card_id, proposed_valid_from, reason, opened_at, proposed_source, proposed_agent_id,
    proposed_session_id, proposed_confidence, decision, decided_by, decided_at
FROM {s}.arbitration_queue
WHERE (%(decided)s OR decision IS NULL) AND (%(slot)s::uuid IS NULL OR slot_id = %(slot)s::uuid)
ORDER BY opened_at, case_id"""


def arbitrations(services: Services, who: Principal,
                 data: s.ArbitrationsInput) -> s.ArbitrationsOutput:
    freshness = fresh(services, who, data)
    queries = services.queries
    with queries.read.tenant(who.tenant_id) as conn:
        rows = conn.execute(sql.SQL(_CASES).format(s=queries.s),
                            {"decided": data.decided, "slot": data.slot_id}).fetchall()
    return s.ArbitrationsOutput(cases=[s.ArbitrationCase(**row) for row in rows],
                                freshness=freshness)


def status(services: Services, who: Principal, data: s.StatusInput) -> s.StatusOutput:
    """The tenant's own figures, read as the tenant (the HTTP role holds no cross-tenant view)."""
    from projections.status import tenant_pipeline

    read = services.queries.read
    with read.tenant(who.tenant_id) as conn:
        projected = read.position(conn, who.tenant_id)
        own = tenant_pipeline(conn, services.settings, who.tenant_id, projected)
    services.pending.projected(who.tenant_id, projected)
    pipeline = s.PipelineStatus(head=own.head, projection_lag=own.projection_lag,
                                projected_at=own.projected_at,
                                embeddings_pending=own.embeddings_pending,
                                requests_pending=own.requests_pending, liveness=own.liveness)
    note = extraction_off_reason(services.settings)
    ingest = s.IngestStatus(extraction=note is None, note=note,
                            turns=services.queries.ingest_counts(who.tenant_id))
    return s.StatusOutput(tenant_id=who.tenant_id, key_id=who.key_id, scopes=sorted(who.scopes),
                          projected_position=projected,
                          pending_writes=len(services.pending.of(who.tenant_id)),
                          parked=own.parked, pipeline=pipeline, ingest=ingest)


def list_cards(services: Services, who: Principal, data: s.CardsInput) -> CardPage:
    freshness = fresh(services, who, data)
    page = slicing.list_cards(services.queries.read, who.tenant_id, _slice(data),
                              services.queries.now())
    return page.model_copy(update={"freshness": freshness})


def count_cards(services: Services, who: Principal, data: s.CardsInput) -> CardCounts:
    freshness = fresh(services, who, data)
    counts = slicing.count_cards(services.queries.read, who.tenant_id, _slice(data),
                                 services.queries.now())
    return counts.model_copy(update={"freshness": freshness})


def _slice(data: s.CardsInput) -> CardSlice:
    return CardSlice(**data.model_dump(exclude={"tenant_id", "min_position"}))


def _table(*operations: Operation[Any, Any]) -> dict[str, Operation[Any, Any]]:
    return {op.name: op for op in operations}


READ, WRITE, ADMIN = "memory:read", "memory:write", "memory:admin"

OPERATIONS: dict[str, Operation[Any, Any]] = _table(
    Operation("remember", "Write one card (state, event or knowledge); answers its outcome and "
              "position.", s.RememberInput, WriteResult, WRITE, remember),
    Operation("revise", "Revise a state card with a new value, drawing a typed edge to it.",
              s.ReviseInput, WriteResult, WRITE, revise),
    Operation("correct", "Correct an event card's description (audited).", s.CorrectInput,
              WriteResult, WRITE, correct),
    Operation("verify", "Confirm a card still holds: resets its aging clock.", s.VerifyInput,
              WriteResult, WRITE, verify, idempotent=True),
    Operation("link", "Draw a typed edge from a card to another.", s.LinkInput, WriteResult, WRITE,
              link, idempotent=True),
    Operation("move", "Move a commitment (wait, resolve, expire) or archive a blocker.",
              s.MoveInput, WriteResult, WRITE, move),
    Operation("get_card", "One card by id, as the read models hold it now.", s.GetCardInput,
              s.CardOutput, READ, get_card, read_only=True, idempotent=True),
    Operation("get_memories", "Several cards by id; ids with no card are listed, not an error.",
              s.GetMemoriesInput, s.MemoriesOutput, READ, get_memories, read_only=True,
              idempotent=True),
    Operation("history", "Every version of a card or of a slot's cards, on both timelines.",
              s.HistoryInput, s.HistoryOutput, READ, history, read_only=True, idempotent=True),
    Operation("search", "The fused retrieval, as of any point of both timelines.",
              s.SearchInput, s.SearchOutput, READ, search, read_only=True, idempotent=True),
    Operation("facts", "The facts of a subject, now or as of a point of both timelines.",
              s.FactsInput, s.FactsOutput, READ, facts, read_only=True, idempotent=True),
    Operation("briefing", "Open, waiting and overdue commitments, blockers, pending arbitrations, "
              "aging facts and stale knowledge.", s.BriefingInput, s.BriefingOutput, READ,
              briefing, read_only=True, idempotent=True),
    Operation("arbitrations", "The pending arbitration cases (with decided, the decided ones too).",
              s.ArbitrationsInput, s.ArbitrationsOutput, READ, arbitrations, read_only=True,
              idempotent=True),
    Operation("arbitrate", "Decide a pending case: keep_old, accept_new or both_valid.",
              s.ArbitrateInput, WriteResult, ADMIN, arbitrate, destructive=True),
    Operation("context", "A search rendered as the prompt blocks an LLM reads.", s.ContextInput,
              s.ContextOutput, READ, context, read_only=True, idempotent=True),
    Operation("status", "This tenant's projection position and lag, pending writes, parked "
              "events and requests, and the pipeline's liveness.", s.StatusInput, s.StatusOutput,
              READ, status, read_only=True, idempotent=True),
    Operation("list_cards", "Cards filtered along the six axes (kind and type, time, scope, "
              "source, confidence, relation, concept), as of any moment, a page at a time.",
              s.CardsInput, CardPage, READ, list_cards, read_only=True, idempotent=True),
    Operation("count_cards", "How many cards a slice keeps, grouped by one axis.", s.CardsInput,
              CardCounts, READ, count_cards, read_only=True, idempotent=True),
    *INGEST_OPERATIONS,
    *REVIEW_OPERATIONS,
    *PARKED_OPERATIONS,
    *ERASURE_OPERATIONS,
    *RETENTION_OPERATIONS,
)

