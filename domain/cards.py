"""The state card: one value of a slot, with both of its timelines."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from uuid import UUID

from domain.erased import is_erased
from domain.values import Provenance


def same_value(a: str, b: str) -> bool:
    """Whether two values are one, read as words without case; an erased value equals none."""
    if is_erased(a) or is_erased(b):
        return False
    return " ".join(a.split()).casefold() == " ".join(b.split()).casefold()


@dataclass(frozen=True)
class StateCard:
    card_id: UUID
    value: str
    memory_type: str
    #: World time: when the value held. ``valid_to`` None = still holds.
    valid_from: datetime
    valid_to: datetime | None
    #: System time: when Palimpsest learned it, and when a later decision withdrew it.
    recorded_at: datetime
    provenance: Provenance
    item_key: str | None = None
    #: What the caller declared, kept when the cardinality table overruled it.
    declared_cardinality: str | None = None
    perspective: str | None = None
    retracted_at: datetime | None = None
    verified_at: datetime | None = None
    #: The typed edge from this card to the card it revises or continues, if any.
    edge: str | None = None
    edge_target: UUID | None = None
    #: When the value was stated, where that is earlier than it was recorded (an ingested turn's
    #: ``said_at``: a backfill of old conversations): rule 4's span and trailing window are
    #: measured from it, as if the statement had been written when it was made.
    stated_at: datetime | None = None

    @property
    def live(self) -> bool:
        return self.retracted_at is None

    @property
    def current(self) -> bool:
        return self.live and self.valid_to is None

    def closed_at(self, moment: datetime) -> StateCard:
        return replace(self, valid_to=moment)

    def retracted(self, moment: datetime) -> StateCard:
        return replace(self, retracted_at=moment)

    def verified(self, moment: datetime) -> StateCard:
        return replace(self, verified_at=moment)

    def revalued(self, value: str, provenance: Provenance) -> StateCard:
        return replace(self, value=value, provenance=provenance)
