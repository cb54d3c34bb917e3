"""The ingest operations every edge offers: hand over conversation turns, list them (the dead
letters among them), re-run a dead letter.

``ingest`` answers at once: each turn is stored as an episodic event card and handed to the
extraction worker through the ingest topic, the turns of one call in one save (one refused turn
refuses the call); answers never wait on the model. Without an LLM
configured the answer says extraction is off (and how to turn it on): the turns are still stored
and searchable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from uuid import UUID

from pydantic import AwareDatetime, BaseModel, Field

from domain.errors import ContentTooLargeError
from services.command.commands import IngestResult, IngestTurn, WriteResult
from services.entrypoints import schemas as s
from services.entrypoints.operation import Operation, fresh
from services.ingest.extraction import extraction_off_reason
from services.keys import Principal
from services.query.readmodels import IngestionRecord

if TYPE_CHECKING:
    from services.bootstrap import Services

#: The most turns one ingest call hands over.
MAX_TURNS = 500


class TurnInput(BaseModel):
    """One conversation turn: who said what, when, in which zone (the tenant is the key's)."""

    model_config = s.Request.model_config
    session_id: str = Field(min_length=1, max_length=200)
    turn_id: str = Field(min_length=1, max_length=200)
    role: str = Field(description="user, assistant, system or tool")
    text: str
    said_at: AwareDatetime = Field(description="When it was said (a backfill keeps old times)")
    timezone: str = Field(default="UTC", max_length=64,
                          description="The user's IANA zone: relative times (昨天, last week) are "
                          "resolved in it")
    agent_id: str | None = Field(default=None, max_length=200)
    speaker: str | None = Field(
        default=None, min_length=1, max_length=400,
        description="The subject the speaker's own facts are written under (default user): a "
        "platform serving many people in one tenant names each")


class IngestInput(s.Request):
    turns: list[TurnInput] = Field(min_length=1, max_length=MAX_TURNS)


class Extraction(BaseModel):
    """Whether the turns' cards will be extracted, and if not, how to turn it on."""

    on: bool
    note: str | None = None


class IngestOutput(BaseModel):
    turns: list[IngestResult]
    extraction: Extraction


class IngestionsInput(s.Read):
    status: str | None = Field(default=None, description="received, extracted, applied, "
                               "dead_letter (the turns to re-run) or erased")
    limit: int = Field(default=100, ge=1, le=1_000)


class IngestionsOutput(s.Answered):
    ingestions: list[IngestionRecord]
    counts: dict[str, int]
    extraction: Extraction


class RerunFields(s.Request):
    pass


class RerunInput(RerunFields):
    ingestion_id: UUID


def extraction(services: Services) -> Extraction:
    note = extraction_off_reason(services.settings)
    return Extraction(on=note is None, note=note)


def ingest(services: Services, who: Principal, data: IngestInput) -> IngestOutput:
    most = services.settings.max_content_chars
    for index, turn in enumerate(data.turns):  # every turn checked before the first is stored
        if len(turn.text) > most:
            raise ContentTooLargeError(f"turn {index} ({turn.session_id}/{turn.turn_id}) holds "
                                       f"{len(turn.text)} characters; at most {most}")
    results = services.app.ingest_turns(who.tenant_id, [IngestTurn(**turn.model_dump())
                                                       for turn in data.turns])
    return IngestOutput(turns=results, extraction=extraction(services))


def ingestions(services: Services, who: Principal, data: IngestionsInput) -> IngestionsOutput:
    freshness = fresh(services, who, data)
    queries = services.queries
    return IngestionsOutput(ingestions=queries.ingestions(who.tenant_id, data.status, data.limit),
                            counts=queries.ingest_counts(who.tenant_id),
                            extraction=extraction(services), freshness=freshness)


def rerun(services: Services, who: Principal, data: RerunInput) -> WriteResult:
    return services.app.ingest_rerun(who.tenant_id, data.ingestion_id,
                                     requested_by=f"key {who.key_id}")


READ, WRITE = "memory:read", "memory:write"

INGEST_OPERATIONS: tuple[Operation[Any, Any], ...] = (
    Operation("ingest", "Hand over conversation turns: each is stored at once as an episodic event "
              "card, then its cards are extracted in the background (answers never wait).",
              IngestInput, IngestOutput, WRITE, ingest, idempotent=True),
    Operation("ingestions", "Ingested turns and where each stands (received, extracted, applied, "
              "dead_letter, erased), with counts and whether extraction is on.", IngestionsInput,
              IngestionsOutput, READ, ingestions, read_only=True, idempotent=True),
    Operation("rerun_ingestion", "Re-run a dead-lettered turn's extraction.", RerunInput,
              WriteResult, WRITE, rerun),
)
