"""The review operations every edge offers: the proposals a scan made and their review, and the
tenant's parked events with the requests to retry or skip one (and their REST routes).

Consolidation is advisory (DESIGN rule 10): a proposal changes nothing until a reviewer accepts
it — then the ordinary command runs (a merge, a link, a revision) — or rejects it, which records
only the rejection. A parked event (decision 0007) is retried or skipped by ``serve``'s own
process on a request an HTTP process records (:mod:`services.command.failures`): REST answers
202 with the request, followed at ``GET /v1/failures/requests/{request_id}`` or in the parked
event's status (``GET /v1/failures?resolved=true``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any
from uuid import UUID

from fastapi import Body, FastAPI, Path, Query
from pydantic import BaseModel, Field

from services.command import failures
from services.command.consolidation import Consolidator, ReviewResult
from services.command.failures import ParkedEvent, ParkedRequest
from services.entrypoints import schemas as s
from services.entrypoints.operation import Operation, fresh
from services.entrypoints.params import Key
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


class ParkedInput(s.Request):
    resolved: bool = Field(default=False, description="The retried and skipped events too")


class ParkedOutput(BaseModel):
    #: The tenant's parked events, oldest first (with ``resolved``, the retried and skipped too).
    events: list[ParkedEvent]
    #: The tenant's latest requests to retry or skip, newest first.
    requests: list[ParkedRequest]


class ParkedRequestInput(s.Request):
    request_id: UUID


class RetryFields(s.Request):
    """A retry's body: nothing but, optionally, the key's own tenant."""


class RetryInput(s.Request):
    notification_id: int = Field(ge=0, description="The parked event's notification id")


class SkipFields(s.Request):
    reason: str = Field(min_length=1, max_length=2_000, description="Why it is skipped (kept in "
                        "the log: write no personal text in it)")
    decided_by: str | None = Field(default=None, min_length=1, max_length=200,
                                   description="Who decides (default: the key)")


class SkipInput(RetryInput, SkipFields):
    pass


def parked(services: Services, who: Principal, data: ParkedInput) -> ParkedOutput:
    read = services.queries.read
    return ParkedOutput(events=failures.parked_events(read, who, data.resolved),
                        requests=failures.parked_requests(read, who))


def parked_request(services: Services, who: Principal, data: ParkedRequestInput) -> ParkedRequest:
    return failures.parked_requests(services.queries.read, who, data.request_id)[0]


def retry_parked(services: Services, who: Principal, data: RetryInput) -> ParkedRequest:
    return failures.request_retry(services.queries.read, who, data.notification_id,
                                  f"key {who.key_id}")


def skip_parked(services: Services, who: Principal, data: SkipInput) -> ParkedRequest:
    return failures.request_skip(services.queries.read, who, data.notification_id, data.reason,
                                 data.decided_by or f"key {who.key_id}")


READ, ADMIN = "memory:read", "memory:admin"

REVIEW_OPERATIONS: tuple[Operation[Any, Any], ...] = (
    Operation("proposals", "Consolidation proposals (duplicates, contradictions) with their "
              "rationale and score; pending by default.", ProposalsInput, ProposalsOutput, READ,
              proposals, read_only=True, idempotent=True),
    Operation("review_proposals", "Accept (the ordinary merge, link or revision runs) or reject "
              "(only the rejection is recorded) consolidation proposals.", ReviewInput,
              ReviewOutput, ADMIN, review, destructive=True),
)

PARKED_OPERATIONS: tuple[Operation[Any, Any], ...] = (
    Operation("parked_events", "This tenant's parked events (the read models could not apply "
              "them) and its latest requests to retry or skip one.", ParkedInput, ParkedOutput,
              READ, parked, read_only=True, idempotent=True),
    Operation("parked_request", "One request to retry or skip a parked event: requested, then "
              "done, refused or failed, with its outcome.", ParkedRequestInput, ParkedRequest,
              READ, parked_request, read_only=True, idempotent=True),
    Operation("retry_parked", "Request that a parked event's aggregate be applied again from the "
              "log after a fix (what still fails is parked again).", RetryInput, ParkedRequest,
              ADMIN, retry_parked),
    Operation("skip_parked", "Request that a parked event be skipped, with a decision recorded "
              "in the log (who, why); the rest of its aggregate is applied.", SkipInput,
              ParkedRequest, ADMIN, skip_parked, destructive=True),
)


#: A parked event's handle in a route's path.
Notification = Annotated[int, Path(ge=0, description="The parked event's notification id.")]


def failure_routes(api: FastAPI, call: Callable[..., Any], v1: str) -> None:
    """``/v1/failures``: the list, a request followed, a retry or a skip requested (202)."""
    summary = {op.name: op.summary for op in PARKED_OPERATIONS}
    @api.get(v1 + "/failures", response_model=ParkedOutput, tags=["operations"],
             summary=summary["parked_events"])
    def listed(key: Key, resolved: Annotated[bool, Query()] = False) -> Any:
        return call("parked_events", key, {"resolved": resolved})

    @api.get(v1 + "/failures/requests/{request_id}", response_model=ParkedRequest,
             tags=["operations"], summary=summary["parked_request"])
    def followed(request_id: Annotated[UUID, Path()], key: Key) -> Any:
        return call("parked_request", key, {"request_id": request_id})

    @api.post(v1 + "/failures/{notification_id}/retry", response_model=ParkedRequest,
              status_code=202, tags=["operations"], summary=summary["retry_parked"])
    def retried(notification_id: Notification, key: Key,
                body: Annotated[RetryFields | None, Body()] = None) -> Any:
        given = body.model_dump(exclude_none=True) if body else {}
        return call("retry_parked", key, {**given, "notification_id": notification_id})

    @api.post(v1 + "/failures/{notification_id}/skip", response_model=ParkedRequest,
              status_code=202, tags=["operations"], summary=summary["skip_parked"])
    def skipped(notification_id: Notification, body: SkipFields, key: Key) -> Any:
        return call("skip_parked", key, {**body.model_dump(exclude_none=True),
                                         "notification_id": notification_id})
