"""What applying one event does to the read models, as plain data.

The projector turns each domain event into a short list of these operations (a pure function);
a sink carries them out — :class:`projections.sinks.PostgresSink` statement by statement inside the
projector's transaction, :class:`projections.sinks.MemorySink` in dictionaries for a rebuild that
is then copied in bulk. The same operations, so the two must build the same rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID


@dataclass(frozen=True)
class PutNode:
    tenant_id: str
    node_id: UUID
    node_kind: str


@dataclass(frozen=True)
class PutSlot:
    row: dict[str, Any]


@dataclass(frozen=True)
class PutCard:
    """A new card: its current row and its first version (known from ``recorded_at``).

    A state card names its ``slot_id``; the sink fills the slot's scope, subject, label and
    cardinality from ``slots``."""

    row: dict[str, Any]
    slot_id: UUID | None = None


@dataclass(frozen=True)
class ChangeCard:
    """A card changed at system time ``at``: its open version closes, a new one opens."""

    tenant_id: str
    card_id: UUID
    at: datetime
    changes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PutEdge:
    tenant_id: str
    src_id: UUID
    dst_id: UUID
    edge: str
    recorded_at: datetime


@dataclass(frozen=True)
class PutCase:
    row: dict[str, Any]


@dataclass(frozen=True)
class AddProposal:
    """A later write joined a pending case: the case's row shows the latest proposal."""

    tenant_id: str
    case_id: UUID
    proposed_value: str
    proposed_card_id: UUID
    proposed_valid_from: datetime
    reason: str
    #: The proposal's provenance: ``PROPOSED_PROVENANCE`` → value.
    provenance: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DecideCase:
    tenant_id: str
    case_id: UUID
    decision: str
    decided_by: str
    decided_at: datetime


@dataclass(frozen=True)
class PutRecord:
    """A new row of a record table (:data:`RECORDS`: one row per aggregate, no versions)."""

    table: str
    row: dict[str, Any]


@dataclass(frozen=True)
class ChangeRecord:
    """Columns of a record table's row changed; a row that is not there changes nothing."""

    table: str
    tenant_id: str
    record_id: UUID
    changes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PutErasure:
    """An erasure's row in ``erasures`` (:data:`ERASURE_COLUMNS`): who forgot which unit, when;
    the sink adds ``position``, the notification it is applying."""

    row: dict[str, Any]


@dataclass(frozen=True)
class Forget:
    """What an erasure forgets in the read models (DESIGN §7): its ``card_ids`` become tombstones
    (row and every version); its ``slot_ids`` lose subject, label and words (so do their cards'
    copies and their arbitration cases); the texts of its ``aggregate_ids`` (proposals, ingested
    turns) are nulled; with ``whole_tenant``, every cached embedding of the tenant goes. Every
    column it touches is set to a constant, so the rows it leaves are the same whether they held
    the text (projected before the erasure) or already read as erased (a replay after it)."""

    tenant_id: str
    at: datetime
    card_ids: tuple[UUID, ...] = ()
    slot_ids: tuple[UUID, ...] = ()
    aggregate_ids: tuple[UUID, ...] = ()
    whole_tenant: bool = False


Op = (PutNode | PutSlot | PutCard | ChangeCard | PutEdge | PutCase | AddProposal | DecideCase
      | PutRecord | ChangeRecord | PutErasure | Forget)

#: Record tables: name → (key column after ``tenant_id``, every column a row has). One row per
#: aggregate, written by :class:`PutRecord` and :class:`ChangeRecord`.
RECORDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "ingestions": ("ingestion_id", (
        "tenant_id", "ingestion_id", "event_card_id", "session_id", "turn_id", "role", "agent_id",
        "said_at", "timezone", "received_at", "status", "attempts", "error", "candidates",
        "card_ids", "rejected", "updated_at")),
    "proposals": ("proposal_id", (
        "tenant_id", "proposal_id", "kind", "src_id", "dst_id", "edge", "rationale", "score",
        "proposed_at", "review", "reviewed_at", "reviewed_by", "note")),
}

SLOT_COLUMNS = ("tenant_id", "slot_id", "scope", "project_id", "group_id", "subject", "label",
                "cardinality", "slot_words", "erased_at")
#: What a state card takes from its slot.
FROM_SLOT = ("scope", "project_id", "group_id", "subject", "label", "cardinality", "slot_words")
#: Columns of ``cards`` a PutCard row fills (the rest take their defaults).
CARD_COLUMNS = (
    "tenant_id", "card_id", "aggregate_id", "kind", "memory_type", "scope", "project_id",
    "group_id", "perspective", "subject", "label", "cardinality", "item_key", "content", "title",
    "valid_from", "valid_to", "occurred_at", "recorded_at", "updated_at", "retracted_at",
    "verified_at", "status", "owner", "due_at", "merged_into", "source", "inference_confidence",
    "agent_id", "session_id", "turn_id", "tags", "terms", "bigrams", "fuzzy_text", "slot_words",
    "erased_at",
)
#: Columns a ChangeCard may change.
CHANGEABLE = frozenset({
    "content", "title", "valid_to", "retracted_at", "verified_at", "status", "merged_into",
    "tags", "terms", "bigrams", "fuzzy_text", "erased_at",
})
CASE_COLUMNS = (
    "tenant_id", "case_id", "slot_id", "subject", "label", "current_values", "current_card_ids",
    "proposed_value", "proposed_card_id", "proposed_valid_from", "reason", "opened_at",
    "proposed_source", "proposed_agent_id", "proposed_session_id", "proposed_confidence",
)
#: The columns of a case that say who proposed its value (a later proposal replaces them).
PROPOSED_PROVENANCE = ("proposed_source", "proposed_agent_id", "proposed_session_id",
                       "proposed_confidence")
#: Columns of ``card_versions``, as a version copies them from its card's row.
VERSION_COLUMNS = ("tenant_id", "card_id", "version", "content", "title", "status", "valid",
                   "known", "retracted", "verified_at", "erased_at")
#: Columns of ``erasures``: an erasure as carried out, without its (sealed) reason.
ERASURE_COLUMNS = ("tenant_id", "erasure_id", "unit", "target", "basis", "requested_by",
                   "erased_at", "keys_destroyed", "cards", "position")

#: What a tombstone's row holds in place of its text (``Forget``): the columns of ``cards`` that
#: carry personal text or what is made from it, and the constant each becomes.
TOMBSTONE: dict[str, Any] = {
    "content": None, "title": None, "tags": [], "terms": [], "bigrams": [], "fuzzy_text": "",
    "slot_words": None, "item_key": None, "perspective": None, "owner": None,
}
