"""REST under ``/v1``: one route per operation of :mod:`services.entrypoints.operations`.

A handler decodes (path, query, body, the ``Idempotency-Key`` header), calls the operation and
returns its output; errors are answered by :mod:`services.entrypoints.errors`. The order of work
is fixed: the body's size (:class:`BodyLimit`, before it is read), its shape and the size limits of
its text (no database work), then the key (``Authorization: Bearer <key>``), then the scope and
the tenant, then the use case. ``/health`` says the process is up, ``/ready`` checks what serving
needs (to anyone, in fixed words), ``/metrics`` speaks Prometheus (to a key with ``memory:admin``
or the metrics token); OpenAPI is at ``/docs``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Annotated, Any
from uuid import UUID

import psycopg
from fastapi import Body, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, create_model

from domain.errors import InvalidCommandError, PalimpsestError, PayloadTooLargeError
from infra.redact import traced
from services.bootstrap import Services
from services.command.commands import WriteResult
from services.console import mount_console
from services.entrypoints import schemas as s
from services.entrypoints.api_erasure import erasure_routes
from services.entrypoints.api_ingest import ingest_routes, review_routes
from services.entrypoints.api_mem0 import mem0_routes
from services.entrypoints.errors import answer
from services.entrypoints.metrics import ApiMetrics, Timing, authorize_scrape
from services.entrypoints.operations import OPERATIONS
from services.entrypoints.params import CardId, IdempotencyKey, Key, KnownAt, MinPosition, ValidAt
from services.entrypoints.readiness import readiness
from services.entrypoints.review_ops import failure_routes
from services.keys import Principal
from services.query.slicing import CardCounts, CardPage, CardSlice

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

class BodyLimit:
    """Refuse (413) a request body over ``limit`` bytes before the application reads it: at once by
    its Content-Length, or once the bytes received pass the limit."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or ()).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            await self._refuse(send)
            return
        if length is not None or scope["method"] in ("GET", "HEAD", "DELETE", "OPTIONS"):
            await self.app(scope, self._counted(receive, send), send)
            return
        messages, size = [], 0
        while True:  # no length given: read it all (up to the limit), then hand it on
            message = await receive()
            messages.append(message)
            size += len(message.get("body", b""))
            if size > self.limit:
                await self._refuse(send)
                return
            if message["type"] != "http.request" or not message.get("more_body"):
                break

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)

    def _counted(self, receive: Receive, send: Send) -> Receive:
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:  # more than the Content-Length said: the server cuts it off
                raise PayloadTooLargeError(f"the request body is over {self.limit} bytes")
            return message
        return counted

    async def _refuse(self, send: Send) -> None:
        found = answer(PayloadTooLargeError(f"the request body is over {self.limit} bytes"))
        response = JSONResponse(found.body(), status_code=found.status)
        await response({"type": "http"}, _nothing, send)


class McpPath:
    """``/mcp`` reaches the app mounted at ``/mcp/`` as it is, not by a redirect: an MCP client
    posts to the URL it was given."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/mcp":
            scope = {**scope, "path": "/mcp/", "raw_path": b"/mcp/"}
        await self.app(scope, receive, send)


async def _nothing() -> Message:
    return {"type": "http.disconnect"}


def create_api(services: Services, *, mcp_app: Any = None) -> FastAPI:
    """The HTTP application on ``services``; with ``mcp_app`` (an ASGI app), MCP at ``/mcp``."""
    api = FastAPI(title="Palimpsest", version="1", summary="Bi-temporal, event-sourced long-term "
                  "memory for AI assistants.", docs_url="/docs", redoc_url=None)
    metrics = ApiMetrics(services)

    def call(name: str, key: HTTPAuthorizationCredentials | None, payload: Any) -> Any:
        operation = OPERATIONS[name]
        data = operation.parse(services, payload)  # shape and size first: no database work
        principal = services.keys.authenticate(key.credentials if key else None)
        output = operation.run(services, principal, data)
        metrics.observe_operation(name, output)
        return output

    def authorized(name: str, key: HTTPAuthorizationCredentials | None,
                   payload: Any) -> tuple[Principal, Any]:
        """What ``call`` checks, in its order, without running the use case (a stream runs it)."""
        operation = OPERATIONS[name]
        data = operation.parse(services, payload)
        principal = services.keys.authenticate(key.credentials if key else None)
        return principal, operation.authorize(services, principal, data)

    def write(name: str, key: HTTPAuthorizationCredentials | None, body: BaseModel,
              idempotency: str | None, **path: Any) -> Any:
        fields = body.model_dump(exclude_unset=True)
        if idempotency is not None:
            if fields.get("request_id") not in (None, idempotency):
                raise InvalidCommandError("the Idempotency-Key header and the body's request_id "
                                          "differ")
            fields["request_id"] = idempotency
        return call(name, key, {**fields, **path})

    _handle_errors(api)
    _routes(api, call, write)
    erasure_routes(api, call, write, authorized, services, "/v1")
    mem0_routes(api, call, services)
    _probes(api, services, metrics)
    mount_console(api, services)
    api.add_middleware(Timing, metrics=metrics)
    if mcp_app is not None:
        api.mount("/mcp", mcp_app)
        api.add_middleware(McpPath)
    api.add_middleware(BodyLimit, limit=services.settings.api_max_body_bytes)  # outermost
    return api


def _handle_errors(api: FastAPI) -> None:
    def respond(error: BaseException) -> JSONResponse:
        found = answer(error)
        if found.status >= 500 and not isinstance(error, PalimpsestError):
            log.error("unexpected error answering a request: %s", traced(error))
        headers = {"WWW-Authenticate": "Bearer"} if found.status == 401 else None
        return JSONResponse(found.body(), status_code=found.status, headers=headers)

    async def known(request: Request, error: Exception) -> JSONResponse:
        return respond(error)

    async def invalid(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, RequestValidationError)
        problems = "; ".join(f"{'.'.join(str(p) for p in item['loc'])}: {item['msg']}"
                             for item in error.errors()[:5])
        return JSONResponse({"error": {"code": "invalid_request", "message": problems,
                                       "retryable": False}}, status_code=422)

    api.add_exception_handler(PalimpsestError, known)
    api.add_exception_handler(ValidationError, known)  # an input assembled from path and body
    api.add_exception_handler(psycopg.OperationalError, known)
    api.add_exception_handler(RequestValidationError, invalid)
    api.add_exception_handler(Exception, known)  # answered 500, then raised to the server's log


Call = Callable[[str, HTTPAuthorizationCredentials | None, Any], Any]
Write = Callable[..., Any]


def _routes(api: FastAPI, call: Call, write: Write) -> None:  # noqa: C901 - one line per route
    v1 = "/v1"

    @api.post(v1 + "/memories", response_model=WriteResult, tags=["writes"],
              summary=OPERATIONS["remember"].summary)
    def remember(body: s.RememberInput, key: Key, idempotency: IdempotencyKey = None) -> Any:
        return write("remember", key, body, idempotency)

    @api.post(v1 + "/cards/{card_id}/revise", response_model=WriteResult, tags=["writes"],
              summary=OPERATIONS["revise"].summary)
    def revise(card_id: CardId, body: s.ReviseFields, key: Key,
               idempotency: IdempotencyKey = None) -> Any:
        return write("revise", key, body, idempotency, card_id=card_id)

    @api.post(v1 + "/cards/{card_id}/correct", response_model=WriteResult, tags=["writes"],
              summary=OPERATIONS["correct"].summary)
    def correct(card_id: CardId, body: s.CorrectFields, key: Key,
                idempotency: IdempotencyKey = None) -> Any:
        return write("correct", key, body, idempotency, card_id=card_id)

    @api.post(v1 + "/cards/{card_id}/verify", response_model=WriteResult, tags=["writes"],
              summary=OPERATIONS["verify"].summary)
    def verify(card_id: CardId, key: Key, idempotency: IdempotencyKey = None,
               body: Annotated[s.VerifyFields | None, Body()] = None) -> Any:
        return write("verify", key, body or s.VerifyFields(), idempotency, card_id=card_id)

    @api.post(v1 + "/cards/{card_id}/links", response_model=WriteResult, tags=["writes"],
              summary=OPERATIONS["link"].summary)
    def link(card_id: CardId, body: s.LinkFields, key: Key,
             idempotency: IdempotencyKey = None) -> Any:
        return write("link", key, body, idempotency, card_id=card_id)

    @api.post(v1 + "/cards/{card_id}/moves", response_model=WriteResult, tags=["writes"],
              summary=OPERATIONS["move"].summary)
    def move(card_id: CardId, body: s.MoveFields, key: Key,
             idempotency: IdempotencyKey = None) -> Any:
        return write("move", key, body, idempotency, card_id=card_id)

    @api.post(v1 + "/arbitrations/{case_id}/decision", response_model=WriteResult,
              tags=["writes"], summary=OPERATIONS["arbitrate"].summary)
    def arbitrate(case_id: Annotated[UUID, Path()], body: s.ArbitrateFields, key: Key,
                  idempotency: IdempotencyKey = None) -> Any:
        return write("arbitrate", key, body, idempotency, case_id=case_id)

    @api.get(v1 + "/cards", response_model=CardPage, tags=["reads"],
             summary=OPERATIONS["list_cards"].summary)
    def list_cards(query: Annotated[CardsQuery, Query()], key: Key) -> Any:
        return call("list_cards", key, _sliced(query))

    @api.get(v1 + "/cards/count", response_model=CardCounts, tags=["reads"],
             summary=OPERATIONS["count_cards"].summary)
    def count_cards(query: Annotated[CardsQuery, Query()], key: Key) -> Any:
        return call("count_cards", key, _sliced(query))

    @api.get(v1 + "/cards/{card_id}", response_model=s.CardOutput, tags=["reads"],
             summary=OPERATIONS["get_card"].summary)
    def get_card(card_id: CardId, key: Key, min_position: MinPosition = None) -> Any:
        return call("get_card", key, {"card_id": card_id, "min_position": min_position})

    @api.post(v1 + "/cards/lookup", response_model=s.MemoriesOutput, tags=["reads"],
              summary=OPERATIONS["get_memories"].summary)
    def get_memories(body: s.GetMemoriesInput, key: Key) -> Any:
        return call("get_memories", key, body)

    @api.get(v1 + "/cards/{card_id}/history", response_model=s.HistoryOutput, tags=["reads"],
             summary=OPERATIONS["history"].summary)
    def card_history(card_id: CardId, key: Key, min_position: MinPosition = None) -> Any:
        return call("history", key, {"ref": str(card_id), "min_position": min_position})

    @api.get(v1 + "/history", response_model=s.HistoryOutput, tags=["reads"],
             summary="Every version of a slot's cards (subject/label), or of a card or slot by id.")
    def history(ref: Annotated[str, Query(min_length=1, max_length=400)], key: Key,
                min_position: MinPosition = None) -> Any:
        return call("history", key, {"ref": ref, "min_position": min_position})

    @api.post(v1 + "/search", response_model=s.SearchOutput, tags=["reads"],
              summary=OPERATIONS["search"].summary)
    def search(body: s.SearchInput, key: Key) -> Any:
        return call("search", key, body)

    @api.post(v1 + "/context", tags=["reads"], summary=OPERATIONS["context"].summary,
              response_model=s.ContextOutput,
              responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}})
    def context(body: s.ContextInput, key: Key,
                format: Annotated[str, Query(pattern="^(object|text)$")] = "object") -> Any:
        output = call("context", key, body)
        return PlainTextResponse(output.text) if format == "text" else output

    @api.get(v1 + "/facts/{subject}", response_model=s.FactsOutput, tags=["reads"],
             summary=OPERATIONS["facts"].summary)
    def facts(subject: Annotated[str, Path(max_length=400)], key: Key, valid_at: ValidAt = None,
              known_at: KnownAt = None, min_position: MinPosition = None) -> Any:
        return call("facts", key, {"subject": subject, "min_position": min_position,
                                   "as_of": {"valid_at": valid_at, "known_at": known_at}})

    @api.get(v1 + "/briefing", response_model=s.BriefingOutput, tags=["reads"],
             summary=OPERATIONS["briefing"].summary)
    def briefing(key: Key, project_id: Annotated[str | None, Query(max_length=200)] = None,
                 min_position: MinPosition = None) -> Any:
        return call("briefing", key, {"project_id": project_id, "min_position": min_position})

    @api.get(v1 + "/arbitrations", response_model=s.ArbitrationsOutput, tags=["reads"],
             summary=OPERATIONS["arbitrations"].summary)
    def arbitrations(key: Key, decided: bool = False, slot_id: UUID | None = None,
                     min_position: MinPosition = None) -> Any:
        return call("arbitrations", key, {"decided": decided, "slot_id": slot_id,
                                          "min_position": min_position})

    @api.get(v1 + "/status", response_model=s.StatusOutput, tags=["reads"],
             summary=OPERATIONS["status"].summary)
    def status(key: Key) -> Any:
        return call("status", key, {})

    ingest_routes(api, call, write, v1)
    review_routes(api, call, v1)
    failure_routes(api, call, v1)


if TYPE_CHECKING:
    CardsQuery = CardSlice
else:
    #: A slice as query parameters: ``as_of`` flattened to ``valid_at`` and ``known_at``.
    CardsQuery = create_model(
        "CardsQuery", __config__=ConfigDict(extra="forbid"),
        valid_at=(AwareDatetime | None, None), known_at=(AwareDatetime | None, None),
        min_position=(int | None, Field(None, ge=0)),
        **{name: (f.annotation, f) for name, f in CardSlice.model_fields.items() if name != "as_of"})


def _sliced(query: BaseModel) -> dict[str, Any]:
    fields = query.model_dump(exclude_unset=True)
    valid_at, known_at = fields.pop("valid_at", None), fields.pop("known_at", None)
    if valid_at is not None or known_at is not None:
        fields["as_of"] = {"valid_at": valid_at, "known_at": known_at}
    return fields


def _probes(api: FastAPI, services: Services, metrics: ApiMetrics) -> None:
    @api.get("/health", tags=["probes"], summary="The process is up.")
    def health() -> dict[str, str]:
        return {"status": "up"}

    @api.get("/ready", tags=["probes"], summary="The database, the broker, row-level security and "
             "the locale are as serving needs (503 otherwise).")
    def ready() -> JSONResponse:
        report = readiness(services)
        return JSONResponse(report.to_dict(), status_code=200 if report.ready else 503)

    @api.get("/metrics", tags=["probes"], summary="Prometheus metrics (a key with memory:admin, "
             "or the metrics token).", response_class=PlainTextResponse)
    def prometheus(key: Key) -> Response:
        authorize_scrape(services, key.credentials if key else None)
        return Response(metrics.exposition(), media_type=metrics.content_type)

