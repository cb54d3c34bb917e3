"""What a retrieval returns: plain pydantic data, ready for ``--json``, REST and the prompt."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel


class StoredCard(BaseModel):
    """A card as the read models hold it (the fields every answer about a card carries)."""

    card_id: UUID
    aggregate_id: UUID
    kind: str
    memory_type: str
    scope: str
    project_id: str | None
    group_id: str | None
    subject: str | None
    label: str | None
    cardinality: str | None
    value: str
    title: str | None
    status: str | None
    valid_from: datetime | None
    valid_to: datetime | None
    occurred_at: datetime | None
    recorded_at: datetime
    verified_at: datetime | None
    superseded: bool
    source: str
    agent_id: str | None
    inference_confidence: float | None
    #: A commitment's owner and due date (it reads ``overdue`` once past it, still open).
    owner: str | None = None
    due_at: datetime | None = None


class RetrievedCard(StoredCard):
    score: float
    explain: dict[str, Any] | None = None


class ContradictionAlert(BaseModel):
    card_ids: tuple[UUID, UUID]
    reason: str


class ArbitrationAlert(BaseModel):
    """A pending arbitration on the slot of a returned card: the current value stays current
    until a person decides."""

    case_id: UUID
    slot_id: UUID
    subject: str
    label: str
    current_values: list[str]
    proposed_value: str
    reason: str
    opened_at: datetime


class Alerts(BaseModel):
    contradictions: list[ContradictionAlert] = []
    arbitrations: list[ArbitrationAlert] = []
    #: Single-value facts unverified and unreplaced for ``aging_days``: ask whether still true.
    aging_facts: list[UUID] = []
    #: Knowledge unverified for ``knowledge_stale_days``: possibly outdated.
    stale_knowledge: list[UUID] = []


class RouteReport(BaseModel):
    #: skipped: the route refused the question (an ambiguous time word), which says nothing of
    #: its health; error, timeout: counted by its breaker.
    status: Literal["ok", "skipped", "error", "timeout", "quarantined", "unavailable"]
    hits: int = 0
    ms: float = 0.0
    detail: str | None = None


class Diagnostics(BaseModel):
    routes: dict[str, RouteReport]
    #: The slot stage: which slots the question names and which lead the answer.
    slots: RouteReport | None = None
    #: Notification id the tenant's read models include; pending writes past it were overlaid.
    projected_position: int | None = None
    overlaid_writes: int = 0
    #: Cards the routes found, and how many of them were loaded to rank them (the others could
    #: no longer reach the top; ``explain`` loads them all).
    candidates_found: int = 0
    candidates_loaded: int = 0
    total_ms: float = 0.0


#: How well an answer matched its question (:attr:`RetrievalResult.match`).
Match = Literal["strong", "weak", "none"]


class RetrievalResult(BaseModel):
    query: str
    now: datetime
    valid_at: datetime | None
    known_at: datetime | None
    results: list[RetrievedCard]
    #: ``strong``: the routes found what the question asks about; ``weak``: nothing did, and the
    #: results are the tenant's nearest cards in scope (below the semantic floor); ``none``: the
    #: question may see no card at all.
    match: Match = "strong"
    alerts: Alerts
    diagnostics: Diagnostics

    @property
    def as_of(self) -> bool:
        return self.valid_at is not None or self.known_at is not None
