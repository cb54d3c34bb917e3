"""Forgetting on request, as every edge offers it (DESIGN §7): erase a unit, list the erasures,
export the cards.

``forget`` erases one unit — a card, a slot, a subject, an ingested session, or the whole tenant —
by destroying its keys (:mod:`services.command.erasure`); its answer carries the erasure's ``position``,
so a read passing it as ``min_position`` sees the tombstones. The scope matches the harm: a card or
a slot — what a writer can revise anyway — needs ``memory:write``; a subject, a session or the
whole tenant — everything a person said, a whole conversation — needs ``memory:erase``, a scope
granted only by name (``memory:admin`` does not hold it). Who asked is the key (``key <key id>``),
never the body.
``erasures`` lists them, newest first; ``export`` answers a tenant's or a subject's cards as JSON
lines (over REST streamed whole, ``GET /v1/export``; here bounded by ``limit``).
"""

from __future__ import annotations

from collections.abc import Generator
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal
from uuid import UUID

from pydantic import BaseModel, Field

from services.command.commands import Erase, ErasureResult
from services.entrypoints import schemas as s
from services.entrypoints.operation import Operation, fresh
from services.keys import Principal
from services.query import export as exporting

if TYPE_CHECKING:
    from services.bootstrap import Services

READ, WRITE, ERASE = "memory:read", "memory:write", "memory:erase"
#: The most erasures one listing returns, and the most lines one bounded export answers.
MAX_LISTED = 1_000

Unit = Literal["card", "slot", "subject", "session", "tenant"]


class ForgetInput(s.Request):
    """Which unit to forget, and why. A card: ``card_id``; a slot: ``slot_id``, or ``subject``
    and ``label`` (in ``scope``); a subject: ``subject``; an ingested session: ``session_id``;
    the tenant: nothing more. A card or a slot needs ``memory:write``; a subject, a session or
    the tenant ``memory:erase``."""

    unit: Unit = Field(description="card or slot (memory:write); subject, session or tenant "
                       "(memory:erase)")
    card_id: UUID | None = None
    slot_id: UUID | None = None
    subject: str | None = Field(default=None, min_length=1, max_length=200)
    label: str | None = Field(default=None, min_length=1, max_length=200)
    scope: str = Field(default="personal", description="A slot's scope: personal, project, "
                       "group or global (with project_id or group_id)")
    project_id: str | None = Field(default=None, max_length=200)
    group_id: str | None = Field(default=None, max_length=200)
    session_id: str | None = Field(default=None, min_length=1, max_length=200)
    basis: str = Field(default="request", min_length=1, max_length=100,
                       description="The legal basis or kind of request (gdpr-17, user-request …)")
    reason: str = Field(default="", max_length=2_000,
                        description="Why, in words (sealed; write no personal text in it)")
    request_id: str | None = Field(default=None, min_length=1, max_length=200)


class ErasuresInput(s.Read):
    limit: int = Field(default=50, ge=1, le=MAX_LISTED)


class ErasureRecord(BaseModel):
    """One erasure as carried out: the unit by id, who asked, when, how many keys and cards went
    with it (never the reason's text)."""

    erasure_id: UUID
    unit: str
    target: str
    basis: str
    requested_by: str
    erased_at: datetime
    keys_destroyed: int
    #: How many cards became tombstones.
    cards: int


class ErasuresOutput(s.Answered):
    erasures: list[ErasureRecord]


class ExportInput(s.Read):
    subject: str | None = Field(default=None, min_length=1, max_length=400,
                                description="Only this subject's cards (default: the tenant's)")
    limit: int = Field(default=100, ge=1, le=MAX_LISTED,
                       description="The most lines answered (REST streams them all)")


class ExportOutput(s.Answered):
    subject: str | None
    #: The cards as JSON lines, oldest recorded first; an erased card as a tombstone.
    text: str
    exported: int
    #: How many cards the limit left off (``GET /v1/export`` streams them all).
    left_off: int
    note: str | None = None


def forget(services: Services, who: Principal, data: ForgetInput) -> ErasureResult:
    fields = data.model_dump(exclude={"tenant_id"})
    result = services.app.erase(who.tenant_id, Erase(**fields, requested_by=f"key {who.key_id}"))
    services.pending.forget(who.tenant_id, None if data.unit == "tenant" else result.card_ids)
    return result


#: The units a key with ``memory:write`` alone may erase; every other needs ``memory:erase``.
WRITE_UNITS = frozenset({"card", "slot"})


def forget_scope(data: ForgetInput) -> str:
    """The scope an erasure needs: a card or a slot ``memory:write``; a subject, a session or the
    tenant — many cards at once, a person's or a conversation's — ``memory:erase``."""
    return WRITE if data.unit in WRITE_UNITS else ERASE


def erasures(services: Services, who: Principal, data: ErasuresInput) -> ErasuresOutput:
    freshness = fresh(services, who, data)
    found = services.queries.erasures(who.tenant_id, limit=data.limit)
    return ErasuresOutput(erasures=[ErasureRecord.model_validate(e) for e in found],
                          freshness=freshness)


def export_stream(services: Services, who: Principal, data: ExportInput,
                  ) -> Generator[bytes, None, None]:
    """Every card of the export as JSON lines, a batch a chunk, from a server-side cursor (the
    REST stream: no limit). Close it to give its connection back before it is exhausted."""
    lines = exporting.cards(services.queries.read, who.tenant_id, data.subject)
    try:
        yield from exporting.ndjson(lines)
    finally:
        lines.close()


def export(services: Services, who: Principal, data: ExportInput) -> ExportOutput:
    freshness = fresh(services, who, data)
    read = services.queries.read
    total = exporting.count(read, who.tenant_id, data.subject)
    lines = list(exporting.cards(read, who.tenant_id, data.subject, limit=data.limit))
    left_off = max(total - len(lines), 0)
    note = (f"{left_off} more card(s) left off: raise limit (at most {MAX_LISTED}), or "
            "stream them all with GET /v1/export") if left_off else None
    return ExportOutput(subject=data.subject, text="".join(exporting.encode(e) + "\n" for e in lines),
                        exported=len(lines), left_off=left_off, note=note, freshness=freshness)


ERASURE_OPERATIONS: tuple[Operation[Any, Any], ...] = (
    Operation("forget", "Forget a card or a slot (memory:write), or a subject, an ingested "
              "session or the whole tenant (memory:erase): its keys are destroyed, its cards "
              "become tombstones everywhere; the erasure itself is kept (who, when, why, which "
              "unit).",
              ForgetInput, ErasureResult, WRITE, forget, destructive=True, idempotent=True,
              scope_of=forget_scope),
    Operation("erasures", "The erasures carried out, newest first: unit, who asked, when, the "
              "keys destroyed and the cards forgotten.", ErasuresInput, ErasuresOutput, READ,
              erasures, read_only=True, idempotent=True),
    Operation("export", "The tenant's cards, or a subject's, as JSON lines with both timelines, "
              "edges and provenance (erased ones as tombstones), at most limit of them.",
              ExportInput, ExportOutput, READ, export, read_only=True, idempotent=True),
)
