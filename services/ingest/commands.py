"""The ingest commands: a turn stored as its event card, and what the extraction worker records.

:meth:`IngestCommands.ingest_turn` stores, in one save, the turn's episodic record (an
``EventCard`` of the conversation, searchable once projected) and ``Ingestion.Received``, which
the ingest relay hands to the extraction worker. Both ids derive from (tenant, session, turn): the
same turn sent again finds its ``Ingestion`` and is answered with the first call's ids, storing
nothing; two copies sent at once meet on the store's version check, and the loser decides again
and finds the winner's. The worker's commands (:meth:`~IngestCommands.record_extraction`,
:meth:`~IngestCommands.record_applied`, :meth:`~IngestCommands.record_dead_letter`) and a
person's :meth:`~IngestCommands.ingest_rerun` move the turn along its states
(:mod:`domain.ingestion`). Every one goes through ``_execute``: text hygiene, idempotency by
request id, turns on a contended aggregate, retries.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from domain.base import derived_id
from domain.event_card import EventCard
from domain.ingestion import Ingestion, Role, check_zone, parse_role
from domain.rules.tags import normalise_tags
from domain.rules.validation import check_content, check_not_future, check_slot_part
from domain.values import Provenance, Scope, ScopeKind, Source
from services.command.application import BaseApplication
from services.command.commands import (
    IngestResult,
    IngestTurn,
    RecordApplied,
    RecordDeadLetter,
    RecordExtraction,
    RerunIngestion,
    WriteResult,
)

#: What the command boundary refuses in text (``domain.rules.validation``): the worker's records
#: of model output and error messages get U+FFFD in its place instead, so recording never fails.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]|\r(?!\n)")
#: The longest error message a dead letter keeps.
MAX_ERROR_CHARS = 2_000


def event_card_id(tenant_id: str, session_id: str, turn_id: str) -> UUID:
    """The id of a turn's event card: one per (tenant, session, turn), as its ingestion."""
    return derived_id("ingested turn", tenant_id, session_id, turn_id)


class IngestCommands(BaseApplication):
    """The ingest use cases, mixed into :class:`services.command.memory.Palimpsest`."""

    def ingest_turn(self, tenant_id: str, command: IngestTurn) -> IngestResult:
        """Store the turn as an event card with its ``Received``; a turn stored before is
        answered with its ids (``replayed``) and nothing is stored."""
        result = self._execute(tenant_id, command,
                               lambda now: self._decide_turn(tenant_id, command, now))
        assert result.aggregate_id is not None and result.card_id is not None
        return IngestResult(ingestion_id=result.aggregate_id, event_card_id=result.card_id,
                            position=result.position, replayed=result.replayed)

    def _decide_turn(self, tenant_id: str, command: IngestTurn, now: datetime):  # type: ignore[no-untyped-def]
        ingestion_id = Ingestion.create_id(tenant_id, command.session_id, command.turn_id)
        earlier = self.find(tenant_id, ingestion_id, Ingestion)
        if earlier is not None:
            return [], _received(earlier, replayed=True)
        role = parse_role(command.role)
        check_zone(command.timezone)
        said_at = check_not_future(command.said_at, now, self.policy, "said_at")
        text = check_content(command.text, self.policy, "text")
        speaker = (check_slot_part(check_content(command.speaker, self.policy, "speaker"), "speaker")
                   if command.speaker is not None else None)
        card = _event_card(
            event_card_id(tenant_id, command.session_id, command.turn_id),
            tenant_id=tenant_id, scope=Scope(ScopeKind.PERSONAL), description=text,
            occurred_at=said_at, tags=normalise_tags(("conversation", role.value), self.policy),
            provenance=Provenance(
                Source.USER_STATED if role is Role.USER else Source.IMPORTED,
                agent_id=command.agent_id, session_id=command.session_id,
                turn_id=command.turn_id),
            perspective=None, timestamp=now,
        )
        ingestion = Ingestion(
            tenant_id=tenant_id, event_card_id=card.id, session_id=command.session_id,
            turn_id=command.turn_id, role=role.value, agent_id=command.agent_id, text=text,
            said_at=said_at, timezone=command.timezone, timestamp=now, speaker=speaker,
        )
        return [card, ingestion], _received(ingestion, replayed=False)

    def ingest_rerun(self, tenant_id: str, ingestion_id: UUID, requested_by: str,
                     request_id: str | None = None) -> WriteResult:
        """Hand a dead-lettered turn to the worker again (only a dead-lettered one)."""
        command = RerunIngestion(ingestion_id=ingestion_id, requested_by=requested_by,
                                 request_id=request_id)

        def decide(now: datetime):  # type: ignore[no-untyped-def]
            ingestion = self._ingestion(tenant_id, ingestion_id)
            ingestion.request_rerun(command.requested_by, now)
            return [ingestion], _moved(ingestion)

        return self._execute(tenant_id, command, decide)

    # ---- the extraction worker's records --------------------------------------------------

    def record_extraction(self, tenant_id: str, ingestion_id: UUID,
                          candidates: Iterable[dict[str, Any]], model: str,
                          attempts: int, rejected: Iterable[dict[str, Any]] = ()) -> WriteResult:
        """The model's validated, resolved candidates (plain JSON-valued dicts), and those
        rejected with why, before any card is written: a worker that dies later applies these
        again without asking the model."""
        command = RecordExtraction(ingestion_id=ingestion_id,
                                   candidates=tuple(_printable(dict(c)) for c in candidates),
                                   rejected=tuple(_printable(dict(c)) for c in rejected),
                                   model=_printable(model), attempts=attempts)

        def decide(now: datetime):  # type: ignore[no-untyped-def]
            ingestion = self._ingestion(tenant_id, ingestion_id)
            ingestion.extract(command.candidates, command.model, command.attempts, now,
                              command.rejected)
            return [ingestion], _moved(ingestion)

        return self._execute(tenant_id, command, decide)

    def record_applied(self, tenant_id: str, ingestion_id: UUID,
                       card_ids: Sequence[UUID | str]) -> WriteResult:
        """The candidates' commands were accepted: the cards they wrote, in order."""
        command = RecordApplied(ingestion_id=ingestion_id,
                                card_ids=tuple(UUID(str(card_id)) for card_id in card_ids))

        def decide(now: datetime):  # type: ignore[no-untyped-def]
            ingestion = self._ingestion(tenant_id, ingestion_id)
            ingestion.apply(tuple(str(card_id) for card_id in command.card_ids), now)
            return [ingestion], _moved(ingestion)

        return self._execute(tenant_id, command, decide)

    def record_dead_letter(self, tenant_id: str, ingestion_id: UUID, error: str,
                           attempts: int) -> WriteResult:
        """The model failed after its last retry: the turn is parked with the error (made
        printable and cut to :data:`MAX_ERROR_CHARS`) until a re-run."""
        text = _printable(error.strip() or "extraction failed")
        if len(text) > MAX_ERROR_CHARS:
            text = text[:MAX_ERROR_CHARS - 1] + "…"
        command = RecordDeadLetter(ingestion_id=ingestion_id, error=text, attempts=attempts)

        def decide(now: datetime):  # type: ignore[no-untyped-def]
            ingestion = self._ingestion(tenant_id, ingestion_id)
            ingestion.dead_letter(command.error, command.attempts, now)
            return [ingestion], _moved(ingestion)

        return self._execute(tenant_id, command, decide)

    def _ingestion(self, tenant_id: str, ingestion_id: UUID) -> Ingestion:
        return self.load(tenant_id, ingestion_id, Ingestion, "ingested turn")


def _event_card(card_id: UUID, **recorded: Any) -> EventCard:
    """An event card under ``card_id`` (``EventCard`` draws a random id otherwise;
    eventsourcing's ``_create`` takes an explicit one, through the same ``Recorded`` event)."""
    return EventCard._create(EventCard.Recorded, id=card_id, **recorded)  # type: ignore[attr-defined]


def _received(ingestion: Ingestion, replayed: bool) -> WriteResult:
    return WriteResult(outcome="received", card_id=ingestion.event_card_id,
                       aggregate_id=ingestion.id, replayed=replayed)


def _moved(ingestion: Ingestion) -> WriteResult:
    return WriteResult(outcome=ingestion.status.value, card_id=ingestion.event_card_id,
                       aggregate_id=ingestion.id)


def _printable(value: Any) -> Any:
    """``value`` with U+FFFD for every character the command boundary refuses, in nested dicts,
    lists and tuples too (keys included)."""
    if isinstance(value, str):
        return _UNPRINTABLE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_printable(k): _printable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_printable(item) for item in value)
    return value
