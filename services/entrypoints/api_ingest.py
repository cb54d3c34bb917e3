"""The REST routes of ingest — hand over turns, list them (dead letters included), re-run one — and
of consolidation's proposals and their review."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any
from uuid import UUID

from fastapi import FastAPI, Path, Query

from services.command.commands import WriteResult
from services.entrypoints.ingest_ops import IngestInput, IngestionsOutput, IngestOutput, RerunFields
from services.entrypoints.operations import OPERATIONS
from services.entrypoints.params import Key, MinPosition
from services.entrypoints.review_ops import ProposalsOutput, ReviewInput, ReviewOutput

Call = Callable[..., Any]


def ingest_routes(api: FastAPI, call: Call, write: Call, v1: str) -> None:
    @api.post(v1 + "/ingest", response_model=IngestOutput, tags=["ingest"], status_code=202,
              summary=OPERATIONS["ingest"].summary)
    def ingest(body: IngestInput, key: Key) -> Any:
        return call("ingest", key, body)

    @api.get(v1 + "/ingest", response_model=IngestionsOutput, tags=["ingest"],
             summary=OPERATIONS["ingestions"].summary)
    def ingestions(key: Key, status: Annotated[str | None, Query(
                       pattern="^(received|extracted|applied|dead_letter|erased)$")] = None,
                   limit: Annotated[int, Query(ge=1, le=1_000)] = 100,
                   min_position: MinPosition = None) -> Any:
        return call("ingestions", key, {"status": status, "limit": limit,
                                        "min_position": min_position})

    @api.post(v1 + "/ingest/{ingestion_id}/rerun", response_model=WriteResult, tags=["ingest"],
              summary=OPERATIONS["rerun_ingestion"].summary)
    def rerun(ingestion_id: Annotated[UUID, Path(description="An ingested turn's id.")],
              body: RerunFields, key: Key) -> Any:
        return write("rerun_ingestion", key, body, None, ingestion_id=ingestion_id)


def review_routes(api: FastAPI, call: Call, v1: str) -> None:
    @api.get(v1 + "/proposals", response_model=ProposalsOutput, tags=["consolidation"],
             summary=OPERATIONS["proposals"].summary)
    def proposals(key: Key, review: Annotated[str | None, Query(
                      pattern="^(pending|accepted|rejected|all)$")] = "pending",
                  limit: Annotated[int, Query(ge=1, le=1_000)] = 100,
                  min_position: MinPosition = None) -> Any:
        return call("proposals", key, {"review": None if review == "all" else review,
                                       "limit": limit, "min_position": min_position})

    @api.post(v1 + "/proposals/review", response_model=ReviewOutput, tags=["consolidation"],
              summary=OPERATIONS["review_proposals"].summary)
    def review(body: ReviewInput, key: Key) -> Any:
        return call("review_proposals", key, body)
