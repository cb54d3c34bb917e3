"""The extraction worker's commands: what it records of a turn, and the turn's cards.

Its usual one, :meth:`ExtractionRecords.apply_extractions`, saves for each turn of a round its
extraction (``Extracted``: what was admitted, where it goes, what was rejected and why), the cards
its candidates make (:mod:`services.ingest.applying`) and ``Applied`` — the turns of a round
together, in one transaction of the event store. The turn's version in the store is what makes a
turn handed over twice apply once: a second save of it loses the race, decides again and finds it
applied. :meth:`~ExtractionRecords.record_extraction` alone keeps the model's answer when that
save cannot be made (the store is failing), and :meth:`~ExtractionRecords.apply_extracted` later
writes its cards; :meth:`~ExtractionRecords.record_applied` and
:meth:`~ExtractionRecords.record_dead_letter` record a step each. Every one goes through
``_execute``: text hygiene, idempotency by request id, turns on a contended aggregate, retries.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from domain.ingestion import Ingestion, IngestStatus
from domain.rules.validation import check_fields
from services.command.application import BaseApplication
from services.command.commands import (
    Command,
    RecordApplied,
    RecordDeadLetter,
    RecordExtraction,
    WriteResult,
)
from services.ingest.applying import Record, decide_turns

#: What the command boundary refuses in text (``domain.rules.validation``): the worker's records
#: of model output and error messages get U+FFFD in its place instead, so recording never fails.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]|\r(?!\n)")
#: The longest error message a dead letter keeps.
MAX_ERROR_CHARS = 2_000


class ApplyExtraction(RecordExtraction):
    """A turn's extraction recorded and the cards of its candidates written."""


class ApplyExtractions(Command):
    """Turns' extractions recorded and the cards of their candidates written, in one save."""

    turns: tuple[ApplyExtraction, ...]


class ApplyExtracted(Command):
    """The cards of a turn's recorded candidates written, in one save."""

    ingestion_id: UUID


@dataclass(frozen=True)
class TurnExtraction:
    """What the worker made of one turn: the admitted candidates (plain JSON-valued dicts, each
    with its time decision and its resolution), the model, its attempts, and those rejected."""

    ingestion_id: UUID
    candidates: tuple[dict[str, Any], ...]
    model: str
    attempts: int
    rejected: tuple[dict[str, Any], ...] = ()
    #: The turn as the worker loaded it: the save's first decision takes it instead of loading
    #: it again (one that changed meanwhile loses the race on its version, and is loaded again).
    loaded: Ingestion | None = field(default=None, compare=False, repr=False)


class ExtractionRecords(BaseApplication):
    """The worker's commands, a mixin of :class:`services.ingest.commands.IngestCommands`."""

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
            return [ingestion], where_it_stands(ingestion)

        return self._execute(tenant_id, command, decide)

    def apply_extraction(self, tenant_id: str, ingestion_id: UUID,
                         candidates: Iterable[dict[str, Any]], model: str, attempts: int,
                         rejected: Iterable[dict[str, Any]] = ()) -> WriteResult:
        """:meth:`record_extraction`, the cards of its candidates and ``Applied``, in one save."""
        return self.apply_extractions(tenant_id, [TurnExtraction(
            ingestion_id, tuple(candidates), model, attempts, tuple(rejected))])[0]

    def apply_extractions(self, tenant_id: str,
                          extractions: Sequence[TurnExtraction]) -> list[WriteResult]:
        """For each turn in order, its extraction (``Extracted``), the cards of its candidates
        and ``Applied`` — all of them in one save (:mod:`services.ingest.applying`); a later
        turn's candidates see what an earlier one's wrote. A turn no longer ``received`` (another
        worker took it) is answered with where it stands and changes nothing."""
        commands = [ApplyExtraction(
            ingestion_id=e.ingestion_id, candidates=tuple(_printable(dict(c)) for c in e.candidates),
            rejected=tuple(_printable(dict(c)) for c in e.rejected), model=_printable(e.model),
            attempts=e.attempts) for e in extractions]
        for command in commands:
            check_fields(dict(command))  # as ``_execute`` checks a command of its own

        def record(command: ApplyExtraction) -> Record:
            def extract(ingestion: Ingestion, now: datetime) -> bool:
                if ingestion.status is not IngestStatus.RECEIVED:
                    return False
                ingestion.extract(command.candidates, command.model, command.attempts, now,
                                  command.rejected)
                return True
            return extract

        loaded = {e.ingestion_id: e.loaded for e in extractions if e.loaded is not None}
        return self._apply(tenant_id, ApplyExtractions(turns=tuple(commands)),
                           [(command.ingestion_id, record(command)) for command in commands],
                           loaded=loaded)

    def apply_extracted(self, tenant_id: str, ingestion_id: UUID) -> WriteResult:
        """The cards of a recorded extraction and ``Applied``, in one save; a candidate whose
        command was saved alone before is answered from its receipt."""
        return self._apply(tenant_id, ApplyExtracted(ingestion_id=ingestion_id),
                           [(ingestion_id, None)], receipts=True)[0]

    def _apply(self, tenant_id: str, command: Command, turns: list[tuple[UUID, Record]],
               receipts: bool = False, loaded: dict[UUID, Ingestion] | None = None,
               ) -> list[WriteResult]:
        """Each turn's answer: where it stands, with the save's position if this save applied it."""
        answers: list[tuple[WriteResult, bool]] = []

        def decide(now: datetime):  # type: ignore[no-untyped-def]
            aggregates, decided = decide_turns(self, tenant_id, turns, now, receipts,  # type: ignore[arg-type]
                                               loaded)
            answers[:] = [(where_it_stands(ingestion), applied) for ingestion, applied in decided]
            return aggregates, WriteResult(outcome="applied")

        saved = self._execute(tenant_id, command, decide)
        return [answer.model_copy(update={"position": saved.position}) if applied else answer
                for answer, applied in answers]

    def record_applied(self, tenant_id: str, ingestion_id: UUID,
                       card_ids: Sequence[UUID | str]) -> WriteResult:
        """The candidates' commands were accepted: the cards they wrote, in order."""
        command = RecordApplied(ingestion_id=ingestion_id,
                                card_ids=tuple(UUID(str(card_id)) for card_id in card_ids))

        def decide(now: datetime):  # type: ignore[no-untyped-def]
            ingestion = self._ingestion(tenant_id, ingestion_id)
            ingestion.apply(tuple(str(card_id) for card_id in command.card_ids), now)
            return [ingestion], where_it_stands(ingestion)

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
            return [ingestion], where_it_stands(ingestion)

        return self._execute(tenant_id, command, decide)

    def _ingestion(self, tenant_id: str, ingestion_id: UUID) -> Ingestion:
        return self.load(tenant_id, ingestion_id, Ingestion, "ingested turn")


def where_it_stands(ingestion: Ingestion) -> WriteResult:
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
