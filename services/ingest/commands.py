"""The ingest commands: a turn stored as its event card, and where it goes from there.

:meth:`IngestCommands.ingest_turn` stores, in one save, the turn's episodic record (an
``EventCard`` of the conversation, searchable once projected) and ``Ingestion.Received``, which
the ingest relay hands to the extraction worker; :meth:`~IngestCommands.ingest_turns` stores the
turns of one call so, all in one save. Both ids derive from (tenant, session, turn): the same turn
sent again finds its ``Ingestion`` and is answered with the first call's ids, storing nothing; two
copies sent at once meet on the store's version check, and the loser decides again and finds the
winner's. The worker's commands (:mod:`services.ingest.records`) and a person's
:meth:`~IngestCommands.ingest_rerun` move the turn along its states (:mod:`domain.ingestion`).
Every one goes through ``_execute``: text hygiene, idempotency by request id, turns on a
contended aggregate, retries.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from domain.base import derived_id
from domain.erased import is_erased
from domain.event_card import EventCard
from domain.ingestion import Ingestion, Role, check_zone, parse_role
from domain.rules.tags import normalise_tags
from domain.rules.validation import check_content, check_fields, check_not_future, check_slot_part
from domain.values import Provenance, Scope, ScopeKind, Source
from infra.keyring import UnitErasedError
from services.command.commands import (
    Command,
    IngestResult,
    IngestTurn,
    RerunIngestion,
    WriteResult,
)
from services.ingest.records import MAX_ERROR_CHARS, ExtractionRecords, where_it_stands

__all__ = ["MAX_ERROR_CHARS", "IngestCommands", "IngestTurns", "event_card_id"]


class IngestTurns(Command):
    """The turns of one call, stored in one save."""

    turns: tuple[IngestTurn, ...]


def event_card_id(tenant_id: str, session_id: str, turn_id: str) -> UUID:
    """The id of a turn's event card: one per (tenant, session, turn), as its ingestion."""
    return derived_id("ingested turn", tenant_id, session_id, turn_id)


class IngestCommands(ExtractionRecords):
    """The ingest use cases, mixed into :class:`services.command.memory.Palimpsest`."""

    def ingest_turn(self, tenant_id: str, command: IngestTurn) -> IngestResult:
        """Store the turn as an event card with its ``Received``; a turn stored before is
        answered with its ids (``replayed``) and nothing is stored."""
        result = self._execute(tenant_id, command,
                               lambda now: self._decide_turn(tenant_id, command, now))
        assert result.aggregate_id is not None and result.card_id is not None
        return IngestResult(ingestion_id=result.aggregate_id, event_card_id=result.card_id,
                            position=result.position, replayed=result.replayed)

    def ingest_turns(self, tenant_id: str, commands: Sequence[IngestTurn]) -> list[IngestResult]:
        """Store the turns of one call in one save, each as :meth:`ingest_turn` does (a turn sent
        before, or twice in the call, is answered ``replayed``); one refused turn refuses the
        call, and nothing is stored. Each new turn's position is the call's last event. A turn
        with its own request id keeps a save and a receipt of its own."""
        if len(commands) == 1 or any(command.request_id for command in commands):
            return [self.ingest_turn(tenant_id, command) for command in commands]
        for command in commands:
            check_fields(dict(command))  # as ``_execute`` checks a turn of its own
        answers: list[WriteResult] = []

        def decide(now: datetime):  # type: ignore[no-untyped-def]
            answers.clear()
            aggregates: list[Any] = []
            decided: dict[UUID, WriteResult] = {}
            for command in commands:
                key = Ingestion.create_id(tenant_id, command.session_id, command.turn_id)
                if key in decided:
                    answers.append(decided[key].model_copy(update={"replayed": True}))
                    continue
                made, decided[key] = self._decide_turn(tenant_id, command, now)
                aggregates.extend(made)
                answers.append(decided[key])
            return aggregates, WriteResult(outcome="received")

        saved = self._execute(tenant_id, IngestTurns(turns=tuple(commands)), decide)
        return [_turn_result(answer, saved.position) for answer in answers]

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
        """Hand a dead-lettered turn to the worker again (only a dead-lettered one, and not one
        an erasure took: ``UnitErasedError``)."""
        command = RerunIngestion(ingestion_id=ingestion_id, requested_by=requested_by,
                                 request_id=request_id)

        def decide(now: datetime):  # type: ignore[no-untyped-def]
            ingestion = self._ingestion(tenant_id, ingestion_id)
            if is_erased(ingestion.text):  # an erasure took it: nothing is extracted from it again
                raise UnitErasedError(tenant_id, "turn", ingestion_id)
            ingestion.request_rerun(command.requested_by, now)
            return [ingestion], where_it_stands(ingestion)

        return self._execute(tenant_id, command, decide)

    # ---- the extraction worker's records --------------------------------------------------

def _event_card(card_id: UUID, **recorded: Any) -> EventCard:
    """An event card under ``card_id`` (``EventCard`` draws a random id otherwise;
    eventsourcing's ``_create`` takes an explicit one, through the same ``Recorded`` event)."""
    return EventCard._create(EventCard.Recorded, id=card_id, **recorded)  # type: ignore[attr-defined]


def _received(ingestion: Ingestion, replayed: bool) -> WriteResult:
    return WriteResult(outcome="received", card_id=ingestion.event_card_id,
                       aggregate_id=ingestion.id, replayed=replayed)


def _turn_result(answer: WriteResult, position: int | None) -> IngestResult:
    assert answer.aggregate_id is not None and answer.card_id is not None
    return IngestResult(ingestion_id=answer.aggregate_id, event_card_id=answer.card_id,
                        position=None if answer.replayed else position, replayed=answer.replayed)


