"""The consolidation operations every edge offers: the proposals a scan made, and their review.

Consolidation is advisory (DESIGN rule 10): a proposal changes nothing until a reviewer accepts
it — then the ordinary command runs (a merge, a link, a revision) — or rejects it, which records
only the rejection."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from uuid import UUID

from pydantic import BaseModel, Field

from services.command.consolidation import Consolidator, ReviewResult
from services.entrypoints import schemas as s
from services.entrypoints.operation import Operation, fresh
from services.keys import Principal
from services.query.readmodels import ProposalRecord

if TYPE_CHECKING:
    from services.bootstrap import Services


class ProposalsInput(s.Read):
    review: str | None = Field(default="pending", pattern="^(pending|accepted|rejected)$",
                               description="pending (default), accepted or rejected; none: all")
    limit: int = Field(default=100, ge=1, le=1_000)


class ProposalsOutput(s.Answered):
    proposals: list[ProposalRecord]


class Review(BaseModel):
    model_config = s.Request.model_config
    proposal_id: UUID
    decision: str = Field(pattern="^(accept|reject)$")
    note: str = Field(default="", max_length=2_000)


class ReviewInput(s.Request):
    reviews: list[Review] = Field(min_length=1, max_length=100)
    reviewed_by: str | None = Field(default=None, min_length=1, max_length=200,
                                    description="Who decides (default: the key)")


class ReviewOutput(BaseModel):
    results: list[ReviewResult]


def proposals(services: Services, who: Principal, data: ProposalsInput) -> ProposalsOutput:
    freshness = fresh(services, who, data)
    found = services.queries.proposals(who.tenant_id, data.review, data.limit)
    return ProposalsOutput(proposals=found, freshness=freshness)


def review(services: Services, who: Principal, data: ReviewInput) -> ReviewOutput:
    consolidator = Consolidator(services.queries.read, services.app, services.settings)
    by = data.reviewed_by or f"key {who.key_id}"
    return ReviewOutput(results=[
        consolidator.review(who.tenant_id, r.proposal_id, r.decision, by, r.note)
        for r in data.reviews])


READ, ADMIN = "memory:read", "memory:admin"

REVIEW_OPERATIONS: tuple[Operation[Any, Any], ...] = (
    Operation("proposals", "Consolidation proposals (duplicates, contradictions) with their "
              "rationale and score; pending by default.", ProposalsInput, ProposalsOutput, READ,
              proposals, read_only=True, idempotent=True),
    Operation("review_proposals", "Accept (the ordinary merge, link or revision runs) or reject "
              "(only the rejection is recorded) consolidation proposals.", ReviewInput,
              ReviewOutput, ADMIN, review, destructive=True),
)
