"""Plain-data views of the write side, for the demo and for tests: a slot with its full history.

The query side proper (issue: read models, retrieval) reads projections; these views read one
aggregate and its events straight from the store.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import BaseModel

from domain.arbitration import ArbitrationCase
from domain.cards import StateCard
from domain.slot import Slot
from services.command.application import BaseApplication


class CardView(BaseModel):
    card_id: UUID
    value: str
    valid_from: datetime
    valid_to: datetime | None
    recorded_at: datetime
    retracted_at: datetime | None
    verified_at: datetime | None
    edge: str | None
    edge_target: UUID | None
    source: str
    current: bool

    @classmethod
    def of(cls, card: StateCard) -> CardView:
        return cls(
            card_id=card.card_id, value=card.value, valid_from=card.valid_from,
            valid_to=card.valid_to, recorded_at=card.recorded_at, retracted_at=card.retracted_at,
            verified_at=card.verified_at, edge=card.edge, edge_target=card.edge_target,
            source=card.provenance.source.value, current=card.current,
        )


class AuditEntry(BaseModel):
    version: int
    event: str
    recorded_at: datetime
    detail: str


class PendingView(BaseModel):
    """One proposal of a pending arbitration case (a case may hold several)."""

    case_id: UUID
    card_id: UUID
    value: str
    valid_from: datetime
    reason: str


class SlotView(BaseModel):
    slot_id: UUID
    scope: str
    subject: str
    label: str
    cardinality: str
    current: list[CardView]
    history: list[CardView]
    pending: list[PendingView]
    audit: list[AuditEntry]


def slot_view(app: BaseApplication, tenant_id: str, slot_id: UUID) -> SlotView:
    slot = app.load(tenant_id, slot_id, Slot, "slot")
    history = sorted(slot.cards.values(), key=lambda c: (c.valid_from, c.recorded_at))
    return SlotView(
        slot_id=slot.id, scope=slot.scope.key, subject=slot.subject, label=slot.label,
        cardinality=slot.cardinality.value,
        current=[CardView.of(c) for c in history if c.current],
        history=[CardView.of(c) for c in history],
        pending=[
            PendingView(case_id=case_id, card_id=p.card.card_id, value=p.card.value,
                        valid_from=p.card.valid_from, reason=p.reason)
            for case_id, proposals in slot.pending.items() for p in proposals
        ],
        audit=[_audit(event) for event in app.events.get(slot_id)],
    )


def _audit(event: object) -> AuditEntry:
    name = type(event).__name__
    card: Any = getattr(event, "card", None)
    details = {
        "Opened": lambda: f"cardinality {getattr(event, 'cardinality', '')}",
        "ItemRevised": lambda: (
            f"{getattr(event, 'previous_value', '')!r} → {getattr(event, 'value', '')!r} "
            f"({getattr(event, 'layer', '')})"
        ),
        "Settled": lambda: f"decision {getattr(event, 'decision', '')}",
        "Verified": lambda: f"card {getattr(event, 'card_id', '')}",
        "Contested": lambda: f"{card.value!r} queued: {getattr(event, 'reason', '')}",
        "ProposalAdded": lambda: f"{card.value!r} joins the pending case: {getattr(event, 'reason', '')}",
    }
    layer = getattr(event, "layer", "")
    detail = details.get(
        name, lambda: (f"{card.value!r}" + (f" ({layer})" if layer else "")) if card else ""
    )()
    return AuditEntry(
        version=event.originator_version, event=name,  # type: ignore[attr-defined]
        recorded_at=event.timestamp, detail=detail,  # type: ignore[attr-defined]
    )


def pending_cases(app: BaseApplication, tenant_id: str, case_ids: list[UUID]) -> list[str]:
    lines = []
    for case_id in dict.fromkeys(case_ids):  # writes that joined one case name it again
        case = app.load(tenant_id, case_id, ArbitrationCase, "arbitration")
        current = ", ".join(c.value for c in case.current)
        status = case.decision.value if case.decision else "pending"
        proposed = ", ".join(repr(c.value) for c in case.proposals)
        lines.append(f"{case.label}: current {current!r} vs proposed {proposed} — {case.reason} [{status}]")
    return lines
