"""A small typed client of a running Palimpsest (``palimpsest serve``), on ``httpx``.

``Client`` is synchronous, ``AsyncClient`` the same methods awaited; one method per REST
operation, each answering the server's JSON object as a ``dict``. A 4xx or 5xx raises an
:class:`APIError` subclass carrying the server's stable ``code``::

    from palimpsest_client import Client

    with Client("http://127.0.0.1:8765", key="pk_…") as memory:
        memory.remember(kind="state", memory_type="fact", subject="user", label="address",
                        content="Kyoto")
        found = memory.search("where does the user live?", valid_at="2026-09-21T00:00:00Z")

The URL and key default to ``PALIMPSEST_URL`` and ``PALIMPSEST_KEY``. Importing this module loads
``httpx`` and nothing of the server (no database, no broker, no model): the answers are plain
dicts shaped as the output models of the OpenAPI document at ``/docs``
(the server's ``services.entrypoints.schemas``).

Errors::

    APIError                 any answer >= 400: .status, .code, .message, .retryable
    ├── AuthenticationError  401: no key, an unknown or revoked one
    ├── PermissionDeniedError 403: the key lacks the scope (forgetting a subject, a session or
    │                        a tenant needs memory:erase), or names another tenant
    ├── NotFoundError        404: missing, or another tenant's
    ├── ConflictError        409: a stale revision, a race lost; .retryable says whether to retry
    ├── InvalidRequestError  400, 413, 422: refused input; nothing stored
    └── UnavailableError     503: the store or a dependency is down; retry later
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar
from uuid import UUID

import httpx

DEFAULT_URL = "http://127.0.0.1:8765"

#: A card, slot or case id.
Id = UUID | str
#: An answer: the server's JSON object.
JSON = dict[str, Any]


class APIError(Exception):
    """The server refused or failed a request."""

    def __init__(self, status: int, code: str, message: str, retryable: bool = False,
                 body: Any = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message, self.retryable, self.body = (
            status, code, message, retryable, body)


class AuthenticationError(APIError):
    pass


class PermissionDeniedError(APIError):
    pass


class NotFoundError(APIError):
    pass


class ConflictError(APIError):
    pass


class InvalidRequestError(APIError):
    pass


class UnavailableError(APIError):
    pass


_BY_STATUS: dict[int, type[APIError]] = {
    400: InvalidRequestError, 401: AuthenticationError, 403: PermissionDeniedError,
    404: NotFoundError, 409: ConflictError, 413: InvalidRequestError, 422: InvalidRequestError,
    503: UnavailableError,
}


def raise_for(response: httpx.Response) -> None:
    """Raise the :class:`APIError` an answer >= 400 stands for."""
    if response.status_code < 400:
        return
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        code, message = str(error.get("code", "error")), str(error.get("message", ""))
        retryable = bool(error.get("retryable", False))
    else:  # not ours (a proxy, a framework's own answer)
        code, message, retryable = "http_error", str(body)[:500], response.status_code >= 500
    kind = _BY_STATUS.get(response.status_code, APIError)
    raise kind(response.status_code, code, message, retryable, body)


@dataclass(frozen=True)
class Call:
    """One request: method, path under the server's URL, JSON body, query parameters."""

    method: str
    path: str
    json: dict[str, Any] | None = None
    params: dict[str, Any] = field(default_factory=dict)
    text: bool = False


def _clean(values: Mapping[str, Any]) -> JSON:
    """Fields that were given, as JSON values (None means "not given")."""
    return {k: _json(v) for k, v in values.items() if v is not None}


def _json(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, tuple | list):
        return [_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _json(v) for k, v in value.items()}
    return value


def _as_of(valid_at: datetime | str | None, known_at: datetime | str | None) -> dict[str, Any] | None:
    found = _clean({"valid_at": valid_at, "known_at": known_at})
    return found or None


class Calls:
    """The requests of every operation, shared by :class:`Client` and :class:`AsyncClient`."""

    @staticmethod
    def remember(fields: dict[str, Any]) -> Call:
        return Call("POST", "/v1/memories", _clean(fields))

    @staticmethod
    def search(query: str, valid_at: Any, known_at: Any, options: dict[str, Any]) -> Call:
        return Call("POST", "/v1/search", _clean({"query": query, "as_of": _as_of(valid_at, known_at),
                                                  **options}))

    @staticmethod
    def facts(subject: str, valid_at: Any, known_at: Any, options: dict[str, Any]) -> Call:
        return Call("GET", f"/v1/facts/{_segment(subject)}",
                    params=_clean({"valid_at": valid_at, "known_at": known_at, **options}))

    @staticmethod
    def card(card_id: Id, options: dict[str, Any]) -> Call:
        return Call("GET", f"/v1/cards/{_segment(str(card_id))}", params=_clean(options))

    @staticmethod
    def history(ref: Id, options: dict[str, Any]) -> Call:
        return Call("GET", "/v1/history", params=_clean({"ref": ref, **options}))

    @staticmethod
    def on_card(card_id: Id, action: str, fields: dict[str, Any]) -> Call:
        return Call("POST", f"/v1/cards/{_segment(str(card_id))}/{action}", _clean(fields))

    @staticmethod
    def cards(path: str, options: dict[str, Any]) -> Call:
        return Call("GET", path, params=_clean(options))

    @staticmethod
    def lookup(card_ids: list[Id]) -> Call:
        return Call("POST", "/v1/cards/lookup", {"card_ids": _json(list(card_ids))})

    @staticmethod
    def briefing(options: dict[str, Any]) -> Call:
        return Call("GET", "/v1/briefing", params=_clean(options))

    @staticmethod
    def arbitrations(options: dict[str, Any]) -> Call:
        return Call("GET", "/v1/arbitrations", params=_clean(options))

    @staticmethod
    def decide(case_id: Id, fields: dict[str, Any]) -> Call:
        return Call("POST", f"/v1/arbitrations/{_segment(str(case_id))}/decision", _clean(fields))

    @staticmethod
    def context(query: str, valid_at: Any, known_at: Any, text: bool, options: dict[str, Any]) -> Call:
        return Call("POST", "/v1/context", _clean({"query": query, "as_of": _as_of(valid_at, known_at),
                                                   **options}),
                    params={"format": "text" if text else "object"}, text=text)

    @staticmethod
    def get(path: str, text: bool = False) -> Call:
        return Call("GET", path, text=text)

    @staticmethod
    def ingest(turns: Sequence[Mapping[str, Any]]) -> Call:
        return Call("POST", "/v1/ingest", {"turns": [_clean(t) for t in turns]})

    @staticmethod
    def ingestions(options: dict[str, Any]) -> Call:
        return Call("GET", "/v1/ingest", params=_clean(options))

    @staticmethod
    def proposals(options: dict[str, Any]) -> Call:
        return Call("GET", "/v1/proposals", params=_clean(options))

    @staticmethod
    def review(reviews: Sequence[Mapping[str, Any]], reviewed_by: str | None) -> Call:
        return Call("POST", "/v1/proposals/review",
                    _clean({"reviews": [_clean(r) for r in reviews], "reviewed_by": reviewed_by}))

    @staticmethod
    def forget(unit: str, fields: dict[str, Any]) -> Call:
        return Call("POST", "/v1/erasures", _clean({"unit": unit, **fields}))

    @staticmethod
    def erasures(options: dict[str, Any]) -> Call:
        return Call("GET", "/v1/erasures", params=_clean(options))

    @staticmethod
    def export(subject: str | None, options: dict[str, Any]) -> Call:
        return Call("GET", "/v1/export", params=_clean({"subject": subject, **options}))

    @staticmethod
    def set_retention(turn_days: int | None, extracted: bool, options: dict[str, Any]) -> Call:
        return Call("PUT", "/v1/retention",
                    {"turn_days": turn_days, "extracted": extracted, **_clean(options)})

    @staticmethod
    def rerun(ingestion_id: Id) -> Call:
        return Call("POST", f"/v1/ingest/{_segment(str(ingestion_id))}/rerun", {})


def _segment(value: str) -> str:
    """One path segment, escaped (a subject may hold any character but ``/``)."""
    from urllib.parse import quote

    return quote(value, safe="")


def _headers(key: str | None) -> dict[str, str]:
    key = key if key is not None else os.environ.get("PALIMPSEST_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


def _url(url: str | None) -> str:
    return (url or os.environ.get("PALIMPSEST_URL") or DEFAULT_URL).rstrip("/")


def _answer(call: Call, response: httpx.Response) -> Any:
    raise_for(response)
    return response.text if call.text else response.json()


R = TypeVar("R")
T = TypeVar("T")


class Operations(ABC, Generic[R, T]):
    """One method per REST operation, shared by both clients: each answers what the client's
    ``send`` does with its request — the JSON object (``R``) or text (``T``) for :class:`Client`,
    an awaitable of it for :class:`AsyncClient`."""

    @abstractmethod
    def _send(self, call: Call) -> Any:
        """Send ``call``: its answer (for :class:`AsyncClient`, a coroutine of it)."""

    def remember(self, **fields: Any) -> R:
        """Write one card (``kind``, ``memory_type``, ``content``, ``subject``, ``label`` …);
        the outcome, the card's id and ``position``."""
        return self._send(Calls.remember(fields))

    def revise(self, card_id: Id, content: str, **fields: Any) -> R:
        """A new version of a state card, linked by ``edge`` (``supersedes`` by default)."""
        return self._send(Calls.on_card(card_id, "revise", {"content": content, **fields}))

    def correct(self, card_id: Id, description: str, reason: str, **fields: Any) -> R:
        """Correct an event card's description (audited; its time stays)."""
        return self._send(Calls.on_card(card_id, "correct", {
            "description": description, "reason": reason, **fields}))

    def verify(self, card_id: Id, **fields: Any) -> R:
        """Mark the card still accurate: its aging clock starts again."""
        return self._send(Calls.on_card(card_id, "verify", fields))

    def link(self, card_id: Id, edge: str, target_id: Id, **fields: Any) -> R:
        return self._send(Calls.on_card(card_id, "links", {"edge": edge, "target_id": target_id,
                                                         **fields}))

    def move(self, card_id: Id, to: str, **fields: Any) -> R:
        """A commitment or blocker transition: ``wait``, ``resolve``, ``expire``, ``archive``."""
        return self._send(Calls.on_card(card_id, "moves", {"to": to, **fields}))

    def decide(self, case_id: Id, decision: str, decided_by: str, **fields: Any) -> R:
        """Settle an arbitration case: ``keep_old``, ``accept_new`` or ``both_valid``."""
        return self._send(Calls.decide(case_id, {"decision": decision, "decided_by": decided_by,
                                                **fields}))

    def search(self, query: str, *, valid_at: datetime | str | None = None,
               known_at: datetime | str | None = None, **options: Any) -> R:
        """The fused retrieval, as of ``valid_at`` (world time) and ``known_at`` (system time)."""
        return self._send(Calls.search(query, valid_at, known_at, options))

    def context(self, query: str, *, valid_at: datetime | str | None = None,
                known_at: datetime | str | None = None, **options: Any) -> R:
        """The prompt blocks of a search, as an object (``text`` holds them rendered)."""
        return self._send(Calls.context(query, valid_at, known_at, False, options))

    def context_text(self, query: str, *, valid_at: datetime | str | None = None,
                     known_at: datetime | str | None = None, **options: Any) -> T:
        """The prompt blocks of a search, as the text an LLM reads."""
        return self._send(Calls.context(query, valid_at, known_at, True, options))

    def facts(self, subject: str, *, valid_at: datetime | str | None = None,
              known_at: datetime | str | None = None, **options: Any) -> R:
        """Every state of ``subject`` valid at ``valid_at`` as known at ``known_at`` (now)."""
        return self._send(Calls.facts(subject, valid_at, known_at, options))

    def card(self, card_id: Id, **options: Any) -> R:
        return self._send(Calls.card(card_id, options))

    def cards_by_id(self, card_ids: list[Id]) -> R:
        """Several cards at once; the ids with no card the key's tenant can see are ``missing``."""
        return self._send(Calls.lookup(card_ids))

    def history(self, ref: Id, **options: Any) -> R:
        """Every version of a card, or of every card of a slot (its id, or ``subject/label``)."""
        return self._send(Calls.history(ref, options))

    def cards(self, **options: Any) -> R:
        """Cards sliced along the six axes (kind, time, scope, source, confidence, relation,
        concept), a page at a time."""
        return self._send(Calls.cards("/v1/cards", options))

    def count_cards(self, **options: Any) -> R:
        return self._send(Calls.cards("/v1/cards/count", options))

    def briefing(self, **options: Any) -> R:
        """What is open, overdue or going stale."""
        return self._send(Calls.briefing(options))

    def arbitrations(self, **options: Any) -> R:
        """The tenant's pending arbitration cases."""
        return self._send(Calls.arbitrations(options))

    def ingest(self, turns: Sequence[Mapping[str, Any]]) -> R:
        """Hand over conversation turns (each: ``session_id``, ``turn_id``, ``role``, ``text``,
        ``said_at``, ``timezone``, optional ``agent_id``); each turn's ingestion and event-card
        ids, at once, and whether extraction is on."""
        return self._send(Calls.ingest(turns))

    def ingestions(self, **options: Any) -> R:
        """Ingested turns (``status="dead_letter"``: the ones to re-run), counts per status."""
        return self._send(Calls.ingestions(options))

    def rerun_ingestion(self, ingestion_id: Id) -> R:
        """Re-run a dead-lettered turn's extraction."""
        return self._send(Calls.rerun(ingestion_id))

    def proposals(self, **options: Any) -> R:
        """Consolidation proposals (``review``: pending (default), accepted, rejected or all)."""
        return self._send(Calls.proposals(options))

    def review_proposals(self, reviews: Sequence[Mapping[str, Any]],
                         reviewed_by: str | None = None) -> R:
        """Accept or reject proposals: each ``{"proposal_id", "decision": accept|reject, "note"}``."""
        return self._send(Calls.review(reviews, reviewed_by))

    def forget(self, unit: str, **fields: Any) -> R:
        """Forget one unit: ``"card"`` (``card_id``) or ``"slot"`` (``slot_id``, or ``subject``
        and ``label``) with a key holding ``memory:write``; ``"subject"`` (``subject``),
        ``"session"`` (``session_id``) or ``"tenant"`` with a key holding ``memory:erase``;
        ``basis``, ``reason`` and ``request_id`` optional. The erasure's id, the keys destroyed,
        the cards forgotten and its ``position``. A key without the scope raises
        :class:`PermissionDeniedError` (``code`` ``permission_denied``) and nothing is forgotten."""
        return self._send(Calls.forget(unit, fields))

    def erasures(self, **options: Any) -> R:
        """The erasures carried out, newest first (``limit``, ``min_position``)."""
        return self._send(Calls.erasures(options))

    def retention(self) -> R:
        """The tenant's retention policy for raw conversation turns: ``turn_days`` (None: every
        turn is kept) and ``extracted``."""
        return self._send(Calls.get("/v1/retention"))

    def set_retention(self, turn_days: int | None, extracted: bool = False, **options: Any) -> R:
        """Keep raw conversation turns ``turn_days`` days (None: every turn), and with
        ``extracted`` erase the cards made of an expired turn too (a key with ``memory:erase``;
        ``request_id`` optional). The policy and its ``position``."""
        return self._send(Calls.set_retention(turn_days, extracted, options))

    def status(self) -> R:
        """The key's tenant and scopes, its projected position and the pipeline's liveness."""
        return self._send(Calls.get("/v1/status"))

    def health(self) -> R:
        return self._send(Calls.get("/health"))

    def ready(self) -> R:
        """The readiness report (an :class:`UnavailableError` while not ready)."""
        return self._send(Calls.get("/ready"))

    def metrics(self) -> T:
        """The Prometheus text of ``/metrics``: a key with ``memory:admin`` (or the server's
        metrics token as the key); :class:`PermissionDeniedError` otherwise."""
        return self._send(Calls.get("/metrics", text=True))


class Client(Operations[JSON, str]):
    """A synchronous client (see the module docstring); use it as a context manager, or
    :meth:`close` it."""

    def __init__(self, url: str | None = None, key: str | None = None, *, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self._http = httpx.Client(base_url=_url(url), headers=_headers(key), timeout=timeout,
                                  transport=transport)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def send(self, call: Call) -> Any:
        """One request; its answer, or the :class:`APIError` it stands for."""
        response = self._http.request(call.method, call.path, json=call.json, params=call.params)
        return _answer(call, response)

    _send = send

    def export(self, subject: str | None = None, **options: Any) -> Iterator[JSON]:
        """Every card of the key's tenant, or of ``subject``, one dict a line as the server
        streams them (both timelines, edges, provenance; an erased card as a tombstone,
        ``"erased": True``). The request is sent when the iteration starts."""
        call = Calls.export(subject, options)
        with self._http.stream(call.method, call.path, params=call.params) as response:
            if response.status_code >= 400:
                response.read()
                raise_for(response)
            for line in response.iter_lines():
                if line.strip():
                    yield json.loads(line)


class AsyncClient(Operations[Awaitable[JSON], Awaitable[str]]):
    """The same operations as :class:`Client`, awaited; ``async with`` it, or :meth:`aclose` it."""

    def __init__(self, url: str | None = None, key: str | None = None, *, timeout: float = 30.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._http = httpx.AsyncClient(base_url=_url(url), headers=_headers(key), timeout=timeout,
                                       transport=transport)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def send(self, call: Call) -> Any:
        """One request; its answer, or the :class:`APIError` it stands for."""
        response = await self._http.request(call.method, call.path, json=call.json, params=call.params)
        return _answer(call, response)

    _send = send

    async def export(self, subject: str | None = None, **options: Any) -> AsyncIterator[JSON]:
        """:meth:`Client.export`, awaited line by line (``async for card in memory.export()``)."""
        call = Calls.export(subject, options)
        async with self._http.stream(call.method, call.path, params=call.params) as response:
            if response.status_code >= 400:
                await response.aread()
                raise_for(response)
            async for line in response.aiter_lines():
                if line.strip():
                    yield json.loads(line)
