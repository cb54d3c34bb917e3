"""A round of the extraction worker: the next turn of each of several sessions, and what the
round learns of each — the pieces of :mod:`services.ingest.worker` that read nothing and store
nothing.

A round's turns are shown the tenant's slots as read once for the round (:func:`show`), their
candidates admitted with what grounding and slot resolution compare embedded in one batch
(:func:`admit`), and each ready turn becomes one :class:`TurnExtraction` of the round's save
(:func:`extraction_of`). Turns of one round are of different sessions: none is shown another's
earlier turns, and each is resolved against the slots as they stood before the round.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from uuid import UUID

from domain.ingestion import Ingestion
from services.ingest.admission import Admission, Admitted
from services.ingest.candidates import Candidate
from services.ingest.catalogue import CatalogueSlot, PriorTurn
from services.ingest.extraction import (
    Extraction,
    ExtractionFailed,
    Shown,
    TurnContext,
    TurnToExtract,
    as_speaker,
    speaker_view,
)
from services.ingest.records import TurnExtraction

log = logging.getLogger(__name__)


@dataclass
class RoundTurn:
    """One turn of a round, and what the round learned of it."""

    tenant_id: str
    ingestion_id: UUID
    ingestion: Ingestion
    turn: TurnToExtract
    slots: Sequence[CatalogueSlot] = ()
    context: TurnContext | None = None
    extraction: Extraction | None = None
    failed: ExtractionFailed | None = None
    admitted: Admitted | None = None
    #: A save of this turn failed: its answer is recorded alone first, then its cards.
    retried: bool = False
    status: str = ""


def show(item: RoundTurn, tenant_slots: Sequence[CatalogueSlot], previous: Sequence[PriorTurn],
         shown: Shown) -> None:
    """What the turn's extraction is shown: the slots of the people it is about, as its speaker
    sees the tenant's, and its session's earlier turns, bounded by ``shown``."""
    item.slots = speaker_view(tenant_slots, item.turn.speaker)
    texts = [item.turn.text, *(prior.text for prior in previous)]
    item.context = TurnContext(slots=tuple(shown.about(item.slots, texts)),
                               previous=tuple(previous), value_chars=shown.value_chars,
                               turn_chars=shown.turn_chars)


def admit(admission: Admission, items: Sequence[RoundTurn]) -> None:
    """Grounding and slot resolution of each turn's candidates (DESIGN rule 12), what they
    compare embedded in one batch first."""
    admission.prepare([(item.extraction.candidates, item.slots) for item in items
                       if item.extraction is not None])
    for item in items:
        assert item.extraction is not None and item.context is not None
        admitted = admission.admit(item.extraction.candidates, item.context.texts(item.turn),
                                   item.slots)
        admitted.candidates = [_spoken_by(c, item.turn.speaker) for c in admitted.candidates]
        if admitted.rejected:  # the values stay out of the log: it is not erasable text
            log.info("ingest: turn %s/%s: %d candidate(s) not grounded in the text shown, not "
                     "written", item.turn.session_id, item.turn.turn_id, len(admitted.rejected))
        item.admitted = admitted


def extraction_of(item: RoundTurn, roles: Sequence[str]) -> TurnExtraction | None:
    """What the turn's save records, when the turn is ready for one: extracted and admitted, or
    of a role that is context only (an extraction of nothing)."""
    ingestion = item.ingestion
    if ingestion.status != "received":
        return None
    if ingestion.role not in roles:
        return TurnExtraction(ingestion.id, (), f"none: {ingestion.role} turns are context, not "
                              "extracted", 0, loaded=ingestion)
    if item.admitted is None or item.extraction is None:
        return None
    return TurnExtraction(ingestion.id, tuple(c.stored() for c in item.admitted.candidates),
                          item.extraction.model, item.extraction.attempts,
                          tuple(item.admitted.rejected), loaded=ingestion)


def _spoken_by(candidate: Candidate, speaker: str) -> Candidate:
    """A candidate in the tenant's terms: what the extraction calls ``user`` is the speaker."""
    resolution = candidate.resolution
    if resolution is not None and "subject" in resolution:
        resolution = {**resolution, "subject": as_speaker(resolution["subject"], speaker)}
    return replace(candidate, subject=as_speaker(candidate.subject, speaker), resolution=resolution)
