"""The ``ingestions`` read model: one row per ingested turn, where it stands in extraction.

Registered on :func:`projections.cards.project` (that module imports this one at its end), so the
incremental projector and a rebuild apply the same operations: one ``PutRecord`` when the turn is
received, a ``ChangeRecord`` for each later step. ``updated_at`` is the step's event time,
``received_at`` the ``Received`` event's; ``candidates`` counts what the model proposed and was
admitted, ``rejected`` what was not (its value has no support in the turn);
``card_ids`` are the cards the candidates became. An erasure of the turn sets its status to
``erased`` and nulls its ``error``, ``candidates`` and ``rejected`` (a replay after it cannot count
what the model proposed); an extraction in flight then writes nothing under it.
"""

from __future__ import annotations

from typing import Any

from domain.ingestion import Ingestion, IngestStatus
from projections.cards import plain, project
from projections.ops import ChangeRecord, Op, PutRecord

TABLE = "ingestions"


def _change(event: Any, **changes: Any) -> list[Op]:
    return [ChangeRecord(TABLE, event.tenant_id, event.originator_id,
                         {**changes, "updated_at": event.timestamp})]


@project.register(Ingestion.Received)  # type: ignore[attr-defined]
def _(event: Any) -> list[Op]:
    return [PutRecord(TABLE, {
        "tenant_id": event.tenant_id, "ingestion_id": event.originator_id,
        "event_card_id": event.event_card_id, "session_id": event.session_id,
        "turn_id": event.turn_id, "role": event.role, "agent_id": event.agent_id,
        "said_at": event.said_at, "timezone": event.timezone, "received_at": event.timestamp,
        "status": IngestStatus.RECEIVED.value, "attempts": 0, "error": None, "candidates": None,
        "card_ids": None, "rejected": None, "updated_at": event.timestamp,
    })]


@project.register(Ingestion.Extracted)  # type: ignore[attr-defined]
def _(event: Any) -> list[Op]:
    return _change(event, status=IngestStatus.EXTRACTED.value, attempts=event.attempts,
                   candidates=len(event.candidates), rejected=len(event.rejected), error=None)


@project.register(Ingestion.Applied)  # type: ignore[attr-defined]
def _(event: Any) -> list[Op]:
    return _change(event, status=IngestStatus.APPLIED.value,
                   card_ids=[str(card_id) for card_id in event.card_ids])


@project.register(Ingestion.DeadLettered)  # type: ignore[attr-defined]
def _(event: Any) -> list[Op]:
    return _change(event, status=IngestStatus.DEAD_LETTER.value, attempts=event.attempts,
                   error=plain(event.error))


@project.register(Ingestion.RerunRequested)  # type: ignore[attr-defined]
def _(event: Any) -> list[Op]:
    return _change(event, status=IngestStatus.RECEIVED.value, attempts=0, error=None)
