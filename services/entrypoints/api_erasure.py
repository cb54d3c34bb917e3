"""The REST routes of forgetting (DESIGN §7): erase a card or any unit, list the erasures, export
the cards as JSON lines, streamed, and read or set the retention policy of raw conversation turns
(``PUT /v1/retention`` needs ``memory:erase``).

``GET /v1/export`` checks everything a call checks (shape, key, scope) and runs its query before
the first byte is sent, so a refusal or a failure is answered as an error; then it streams the
lines a batch at a time from a server-side cursor, and gives the connection back when the client
goes away."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Generator
from typing import Annotated, Any

import anyio
from fastapi import FastAPI, Query
from fastapi.responses import StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials

from services.bootstrap import Services
from services.command.commands import ErasureResult
from services.entrypoints.erasure_ops import ErasuresOutput, ForgetInput, export_stream
from services.entrypoints.operation import fresh
from services.entrypoints.operations import OPERATIONS
from services.entrypoints.params import CardId, IdempotencyKey, Key, MinPosition
from services.entrypoints.retention_ops import RetentionPolicy, RetentionSet, SetRetentionInput
from services.keys import Principal
from services.query.export import MEDIA_TYPE

Call = Callable[..., Any]
Authorized = Callable[[str, HTTPAuthorizationCredentials | None, Any], tuple[Principal, Any]]

_TAGS: list[Any] = ["erasure"]
_LINES = {200: {"description": "One card a line (JSON lines); an erased card as a tombstone.",
                "content": {MEDIA_TYPE: {"schema": {"type": "string"}}}}}


class JsonLines(StreamingResponse):
    media_type = MEDIA_TYPE


def erasure_routes(api: FastAPI, call: Call, write: Call, authorized: Authorized,
                   services: Services, v1: str) -> None:
    @api.delete(v1 + "/cards/{card_id}", response_model=ErasureResult, status_code=202,
                tags=_TAGS, summary="Forget one card: its keys are destroyed, it becomes a "
                "tombstone in every read model (memory:write).")
    def forget_card(card_id: CardId, key: Key, idempotency: IdempotencyKey = None,
                    basis: Annotated[str | None, Query(min_length=1, max_length=100)] = None,
                    reason: Annotated[str | None, Query(max_length=2_000)] = None) -> Any:
        given = {"unit": "card", "basis": basis, "reason": reason}
        body = ForgetInput.model_validate({k: v for k, v in given.items() if v is not None})
        return write("forget", key, body, idempotency, card_id=card_id)

    @api.post(v1 + "/erasures", response_model=ErasureResult, status_code=202, tags=_TAGS,
              summary=OPERATIONS["forget"].summary)
    def forget(body: ForgetInput, key: Key, idempotency: IdempotencyKey = None) -> Any:
        return write("forget", key, body, idempotency)

    @api.get(v1 + "/erasures", response_model=ErasuresOutput, tags=_TAGS,
             summary=OPERATIONS["erasures"].summary)
    def erasures(key: Key, limit: Annotated[int, Query(ge=1, le=1_000)] = 50,
                 min_position: MinPosition = None) -> Any:
        return call("erasures", key, {"limit": limit, "min_position": min_position})

    @api.get(v1 + "/export", response_class=JsonLines, tags=_TAGS, responses=_LINES,  # type: ignore[arg-type]
             summary="Every card of the tenant, or of a subject, as JSON lines with both "
             "timelines, edges and provenance; erased cards as tombstones (memory:read).")
    def export(key: Key, subject: Annotated[str | None, Query(min_length=1, max_length=400)] = None,
               min_position: MinPosition = None) -> JsonLines:
        who, data = authorized("export", key, {"subject": subject, "min_position": min_position})
        freshness = fresh(services, who, data)
        chunks = export_stream(services, who, data)
        first = next(chunks, b"")  # the query runs here: its failure is answered as an error
        headers = {} if freshness is None else {"Palimpsest-Stale-By": str(freshness.stale_by)}
        return JsonLines(_sent(first, chunks), headers=headers)

    @api.get(v1 + "/retention", response_model=RetentionPolicy, tags=_TAGS,
             summary=OPERATIONS["retention"].summary)
    def retention(key: Key) -> Any:
        return call("retention", key, {})

    @api.put(v1 + "/retention", response_model=RetentionSet, tags=_TAGS,
             summary=OPERATIONS["set_retention"].summary)
    def set_retention(body: SetRetentionInput, key: Key, idempotency: IdempotencyKey = None) -> Any:
        return write("set_retention", key, body, idempotency)


async def _sent(first: bytes, rest: Generator[bytes, None, None]) -> AsyncIterator[bytes]:
    """``first``, then ``rest`` read in a worker thread; ``rest`` is closed (its connection given
    back) when the stream ends, fails or the client goes away."""
    try:
        if first:
            yield first
        while chunk := await anyio.to_thread.run_sync(next, rest, b""):
            yield chunk
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(rest.close)
