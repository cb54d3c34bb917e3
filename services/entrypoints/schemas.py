"""What each operation takes and gives, as pydantic models: REST bodies and MCP tool schemas alike.

A write's input is its command with an optional ``tenant_id``, which must be the key's own (the
tenant comes from the key; a body naming another is refused). Operations on one card take its
``card_id`` from the REST path, so their fields come in two layers: ``…Fields`` (the body) and
``…Input`` (the body and the card). A read may pass ``min_position`` (a write's ``position``): it
then waits, bounded, until the read models include it, and says how far behind they still are.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from services.command.commands import Authored, Command, Remember, WriteResult
from services.query.queries import Briefing, CardHistory, Fact
from services.query.readmodels import Freshness
from services.query.retrieval.results import RetrievalResult, StoredCard
from services.query.slicing import CardSlice

__all__ = ["WriteResult"]

_TENANT = Field(default=None, description="The key's tenant, if named at all; another is refused (403).")


class Tenanted(BaseModel):
    tenant_id: str | None = _TENANT


class Request(Tenanted):
    model_config = ConfigDict(extra="forbid")


class Read(Request):
    min_position: int | None = Field(
        default=None, ge=0, description="A write's position: wait (bounded) until the read models "
        "include it; the answer's freshness says how far behind they still are.")


class AsOf(BaseModel):
    """A point on both timelines: valid at ``valid_at`` (world time), as known at ``known_at``
    (system time). Either alone: the other is the same moment (``valid_at`` alone: as known now)."""

    model_config = ConfigDict(extra="forbid")
    valid_at: AwareDatetime | None = None
    known_at: AwareDatetime | None = None


# --- writes ---------------------------------------------------------------------------------


class RememberInput(Remember, Tenanted):
    pass


class ReviseFields(Authored, Tenanted):
    content: str
    edge: str = "supersedes"
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    #: The card's slot; found from the card when not given.
    aggregate_id: UUID | None = None


class ReviseInput(ReviseFields):
    card_id: UUID


class CorrectFields(Authored, Tenanted):
    description: str
    reason: str
    occurred_at: datetime | None = None


class CorrectInput(CorrectFields):
    card_id: UUID


class VerifyFields(Command, Tenanted):
    aggregate_id: UUID | None = None


class VerifyInput(VerifyFields):
    card_id: UUID


class LinkFields(Command, Tenanted):
    edge: str
    target_id: UUID


class LinkInput(LinkFields):
    card_id: UUID


class MoveFields(Command, Tenanted):
    to: str = Field(description="wait, resolve, expire (a commitment) or archive (a blocker)")
    note: str = ""


class MoveInput(MoveFields):
    card_id: UUID


class ArbitrateFields(Command, Tenanted):
    decision: str = Field(description="keep_old, accept_new or both_valid")
    decided_by: str = Field(min_length=1, max_length=200)
    note: str = ""
    card_id: UUID | None = None


class ArbitrateInput(ArbitrateFields):
    case_id: UUID


# --- reads ----------------------------------------------------------------------------------


class GetCardInput(Read):
    card_id: UUID


class GetMemoriesInput(Read):
    card_ids: list[UUID] = Field(min_length=1, max_length=100)


class HistoryInput(Read):
    ref: str = Field(min_length=1, max_length=400,
                     description="a card id, a slot id, or subject/label")


class SearchInput(Read):
    query: str = Field(min_length=1)
    as_of: AsOf | None = None
    #: The question's clock (relative time words resolve against it); default the server's.
    now: AwareDatetime | None = None
    project_id: str | None = None
    group_ids: list[str] = Field(default_factory=list, max_length=50)
    include_global: bool = False
    memory_types: list[str] = Field(default_factory=list, max_length=10)
    subjects: list[str] = Field(default_factory=list, max_length=100,
                                description="Only cards of these subjects.")
    subject_prefix: str | None = Field(
        default=None, min_length=1, max_length=400, description="Only cards of this subject or "
        "of a subject below it: the prefix, then ':' and more ('a' never matches 'ab').")
    agent_ids: list[str] = Field(default_factory=list, max_length=100,
                                 description="Only cards these agents wrote.")
    session_ids: list[str] = Field(default_factory=list, max_length=100,
                                   description="Only cards of these sessions.")
    top_n: int | None = Field(default=None, ge=1, le=50)
    explain: bool = False


class ContextInput(SearchInput):
    pass


class FactsInput(Read):
    subject: str = Field(min_length=1, max_length=400)
    as_of: AsOf | None = None


class BriefingInput(Read):
    project_id: str | None = None


class ArbitrationsInput(Read):
    decided: bool = Field(default=False, description="Also list decided cases, each with its "
                          "decision, who decided and when (default: the pending cases only).")
    slot_id: UUID | None = Field(default=None, description="Only the cases of this slot.")


class StatusInput(Request):
    pass


class CardsInput(CardSlice, Tenanted):
    """A slice of the tenant's cards (``services.query.slicing``)."""

    min_position: int | None = Field(
        default=None, ge=0, description="A write's position: wait (bounded) until the read models "
        "include it before listing.")


class MemoryCard(StoredCard):
    """A card as the read models hold it now (``superseded`` once replaced)."""


class Answered(BaseModel):
    #: Set when the read passed ``min_position``: whether the read models included it.
    freshness: Freshness | None = None


class MemoriesOutput(Answered):
    cards: list[MemoryCard]
    #: Ids with no card the key's tenant can see.
    missing: list[UUID]


class CardOutput(MemoryCard, Answered):
    pass


class HistoryOutput(Answered):
    ref: str
    cards: list[CardHistory]


class SearchOutput(RetrievalResult, Answered):
    pass


class ContextOutput(Answered):
    text: str
    result: SearchOutput


class FactsOutput(Answered):
    subject: str
    valid_at: datetime | None
    known_at: datetime | None
    facts: list[Fact]


class BriefingOutput(Briefing, Answered):
    pass


class ArbitrationCase(BaseModel):
    """A case, pending until ``decision`` is set; a text erased since it was opened reads as None
    (DESIGN §7)."""

    case_id: UUID
    slot_id: UUID
    subject: str | None
    label: str | None
    current_values: list[str | None]
    proposed_value: str | None
    proposed_card_id: UUID
    proposed_valid_from: datetime
    reason: str
    opened_at: datetime
    #: Who proposed the value, and how sure (none for a case projected before they were kept).
    proposed_source: str | None = None
    proposed_agent_id: str | None = None
    proposed_session_id: str | None = None
    proposed_confidence: float | None = None
    #: ``keep_old``, ``accept_new`` or ``both_valid`` once decided (listed with ``decided``).
    decision: str | None = None
    decided_by: str | None = None
    decided_at: datetime | None = None


class ArbitrationsOutput(Answered):
    cases: list[ArbitrationCase]


class PipelineStatus(BaseModel):
    """The pipeline as the key's tenant sees it: its own events only, never the log's head nor
    another tenant's activity (decision 0018)."""

    #: The newest notification id of this tenant's events in the log.
    head: int
    #: This tenant's events the read models do not hold yet.
    projection_lag: int
    #: When the read models last moved this tenant's position (null: never).
    projected_at: datetime | None = None
    #: This tenant's cards waiting for their vectors.
    embeddings_pending: int = 0
    #: This tenant's requests to retry or skip a parked event not carried out yet.
    requests_pending: int = 0
    #: broker / relay / projector → alive, dead or unknown (from their heartbeats).
    liveness: dict[str, str]


class IngestStatus(BaseModel):
    #: Whether turns' cards are extracted (an LLM configured), and if not, how to turn it on.
    extraction: bool
    note: str | None = None
    #: This tenant's ingested turns per status: received, extracted, applied, dead_letter, erased.
    turns: dict[str, int]


class StatusOutput(BaseModel):
    tenant_id: str
    key_id: str
    scopes: list[str]
    #: The newest notification id of this tenant the read models include.
    projected_position: int
    #: Writes this server accepted for the tenant that the read models do not hold yet.
    pending_writes: int
    #: This tenant's parked events (``palimpsest failures``).
    parked: int
    pipeline: PipelineStatus | None = None
    ingest: IngestStatus | None = None


def dump(model: BaseModel) -> dict[str, Any]:
    """JSON-ready data of an output."""
    return model.model_dump(mode="json")
