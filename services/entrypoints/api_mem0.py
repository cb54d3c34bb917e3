"""mem0's platform API under ``/mem0``, for ``MemoryClient(api_key=<key>, host=<url>/mem0)``
(mem0ai 2.2): each route decodes mem0's request (:mod:`services.entrypoints.mem0_ops`), runs the
operations every edge runs (``call``: shape, key, scope, tenant, then the use case) and answers in
mem0's shapes. The key comes as mem0 sends it, ``Authorization: Token <key>`` (``Bearer`` works
too). An error answers ``{"detail": …, "error": {code, message, retryable}}``: mem0's client reads
``detail``, the code is ours. Forgetting is an erasure (DESIGN §7) with REST's scopes: ``delete``
of one memory (a card, and with ``delete_linked`` those it replaced) needs ``memory:write``;
``delete_all`` and an entity's deletion (a subject, a session, or every card an agent wrote) need
``memory:erase``. A route mem0 has and we do not answers 501.

The routes stay out of the OpenAPI document: their contract is mem0's (docs/mem0.md).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from datetime import timedelta
from typing import Annotated, Any
from uuid import UUID, uuid4

import psycopg
from fastapi import Body, Depends, FastAPI, Header, Query, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import ValidationError

from domain.errors import CardNotFoundError, PalimpsestError
from services.bootstrap import Services
from services.entrypoints import mem0_ops as m
from services.entrypoints.errors import answer
from services.keys import require

Call = Callable[..., Any]
Key = HTTPAuthorizationCredentials | None
Json = Annotated[Any, Body()]
Idempotency = Annotated[str | None, Header(alias="Idempotency-Key", max_length=200)]
ADD_FIELDS = {"messages", "infer", "filters", "timestamp", "expiration_date", "timezone",
              "metadata", *m.ENTITY_KEYS}


def token_key(authorization: Annotated[str | None, Header()] = None) -> Key:
    """The key of ``Authorization: Token <key>`` (mem0's form) or ``Bearer <key>``."""
    scheme, _, secret = (authorization or "").strip().partition(" ")
    if scheme.lower() not in ("token", "bearer") or not secret.strip():
        return None
    return HTTPAuthorizationCredentials(scheme=scheme, credentials=secret.strip())


Mem0Key = Annotated[Key, Depends(token_key)]


def refused(status: int, code: str, message: str, retryable: bool = False) -> JSONResponse:
    headers = {"WWW-Authenticate": "Token"} if status == 401 else None
    return JSONResponse({"detail": message, "error": {"code": code, "message": message,
                                                      "retryable": retryable}},
                        status_code=status, headers=headers)


def answered(handler: Callable[..., Any]) -> Callable[..., Any]:
    """Errors in mem0's shape; anything unforeseen is left to the app's handler (a logged 500)."""

    @functools.wraps(handler)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return handler(*args, **kwargs)
        except m.Mem0Refusal as refusal:
            return refused(refusal.status, refusal.code, refusal.message)
        except (PalimpsestError, ValidationError, psycopg.OperationalError) as error:
            found = answer(error)
            return refused(found.status, found.code, found.message, found.retryable)
    return run


def mem0_routes(api: FastAPI, call: Call, services: Services, prefix: str = "/mem0") -> None:
    """Register the mem0 routes on ``api`` (``call``: the REST edge's run of an operation)."""
    mem0 = Surface(call, services)

    def route(*methods: str, path: str) -> Callable[[Callable[..., Any]], Any]:
        def register(handler: Callable[..., Any]) -> Any:
            return api.api_route(prefix + path, methods=list(methods), include_in_schema=False)(
                answered(handler))
        return register

    @route("GET", path="/v1/ping/")
    def ping(key: Mem0Key) -> dict[str, Any]:
        status = call("status", key, {})
        ingest = status.ingest
        # mem0's client needs both: the key's tenant is its organisation and its project
        return {"status": "ok", "message": "Palimpsest, mem0-compatible",
                "org_id": status.tenant_id, "project_id": status.tenant_id, "user_email": None,
                "palimpsest": {"tenant_id": status.tenant_id, "key_id": status.key_id,
                               "scopes": status.scopes,
                               "extraction": ingest.extraction if ingest else False}}

    @route("POST", path="/v3/memories/add/")
    def add(key: Mem0Key, idempotency: Idempotency = None, body: Json = None) -> dict[str, Any]:
        return mem0.add(key, _object(body), idempotency)

    @route("POST", path="/v3/memories/search/")
    def search(key: Mem0Key, body: Json = None) -> dict[str, Any]:
        return mem0.search(key, _object(body))

    @route("POST", path="/v3/memories/")
    def get_all(request: Request, key: Mem0Key, body: Json = None,
                page: Annotated[int | None, Query()] = None,
                page_size: Annotated[int | None, Query()] = None) -> dict[str, Any]:
        return mem0.get_all(key, _object(body), page, page_size, str(request.url))

    @route("GET", path="/v1/memories/{memory_id}/")
    def get(memory_id: str, key: Mem0Key) -> dict[str, Any]:
        return m.memory(call("get_card", key, {"card_id": card_id(memory_id)}).model_dump())

    @route("PUT", path="/v1/memories/{memory_id}/")
    def update(memory_id: str, key: Mem0Key, idempotency: Idempotency = None,
               body: Json = None) -> dict[str, Any]:
        return mem0.update(key, card_id(memory_id), _object(body), idempotency)

    @route("GET", path="/v1/memories/{memory_id}/history/")
    def history(memory_id: str, key: Mem0Key) -> list[dict[str, Any]]:
        return mem0.history(key, card_id(memory_id))

    @route("DELETE", path="/v1/memories/{memory_id}/")
    def delete(memory_id: str, key: Mem0Key, idempotency: Idempotency = None,
               delete_linked: bool = False) -> dict[str, Any]:
        return mem0.forget(key, card_id(memory_id), delete_linked, idempotency)

    @route("DELETE", path="/v1/memories/")
    def delete_all(key: Mem0Key, user_id: str | None = None, agent_id: str | None = None,
                   run_id: str | None = None, app_id: str | None = None,
                   filters: str | None = None) -> dict[str, Any]:
        if app_id:
            raise m.unsupported("app_id has no equivalent in Palimpsest: leave it out")
        ids = m.entities(_json(filters), user_id=user_id, agent_id=agent_id, run_id=run_id)
        return mem0.matching(key, ids)

    @route("GET", path="/v1/entities/")
    def entities(key: Mem0Key) -> dict[str, Any]:
        return mem0.entities(key)

    @route("DELETE", path="/v2/entities/{kind}/{name}/")
    def delete_entity(kind: str, name: str, key: Mem0Key) -> dict[str, Any]:
        if kind not in ("user", "agent", "run"):
            raise m.unsupported(f"entities of type {kind!r} have no equivalent in Palimpsest")
        ids = m.entities(**{f"{kind}_id": name})
        return mem0.matching(key, ids)

    @route("GET", "POST", "PUT", "PATCH", "DELETE", path="/{rest:path}")
    def other(rest: str, request: Request, key: Mem0Key) -> None:
        services.keys.authenticate(key.credentials if key else None)
        raise m.unsupported(f"{request.method} /{rest} is a mem0 route Palimpsest does not offer "
                            "(projects, organisations, webhooks, feedback, exports, summaries, "
                            "profiles, events and batches have no equivalent here); docs/mem0.md "
                            "lists the routes that are served")


def _object(body: Any) -> dict[str, Any]:
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise m.refuse("the request body must be a JSON object")
    return body


def _json(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        raise m.refuse("filters must be a JSON object") from None


def card_id(memory_id: str) -> UUID:
    try:
        return UUID(memory_id)
    except ValueError:
        raise CardNotFoundError(f"no memory {memory_id!r}") from None


SEARCH_FIELDS = {"query", "filters", "top_k", "fields", "reference_date", "valid_at", "known_at",
                 "latest_only", *m.ENTITY_KEYS}
GET_ALL_FIELDS = {"filters", "page", "page_size", "start_date", "end_date", "show_expired",
                  "latest_only", "include_superseded", "valid_at", "known_at", *m.ENTITY_KEYS}
#: What a search accepts and does not apply: our ranking is fused, its scores no similarities.
SEARCH_NOTED = ("threshold", "rerank", "keyword_search", "show_expired")
REVISION_EDGES = ("supersedes", "updates")
#: The most cards one lineage (history, delete_linked) follows, and one get_all reads.
MAX_LINEAGE, MAX_LISTED = 50, 10_000


class Surface:
    """The work of each mem0 route: decode mem0's request, run the operations through ``call``
    (the REST edge's: shape, key, scope, tenant, use case), answer mem0's shape."""

    def __init__(self, call: Call, services: Services) -> None:
        self.call, self.clock, self.keys = call, services.app.clock, services.keys
        self.most = services.settings.max_content_chars

    def _erasing(self, key: Key) -> None:
        """Forgetting many memories at once (``delete_all``, an entity's deletion) is a bulk
        erasure: the key must hold ``memory:erase``, whatever unit it comes down to."""
        require(self.keys.authenticate(key.credentials if key else None), "memory:erase")

    # --- writes ---------------------------------------------------------------------------

    def add(self, key: Key, given: dict[str, Any], idempotency: str | None) -> dict[str, Any]:
        m.check_fields(given, ADD_FIELDS)
        ids = m.entities(given.get("filters"), **{k: given.get(k) for k in m.ENTITY_KEYS})
        for name in m.ENTITY_KEYS:
            if len(getattr(ids, name + "s")) > 1:
                raise m.refuse(f"a memory is added for one {name}")
        if ids.created_after or ids.created_before:
            raise m.refuse("created_at narrows a listing, not an add: give timestamp instead")
        infer = given.get("infer", True)
        if not isinstance(infer, bool):
            raise m.refuse("infer must be true or false")
        messages = m.messages_of(given)
        for index, message in enumerate(messages):  # all checked before the first is stored
            if not message["content"].strip() or len(message["content"]) > self.most:
                raise m.refuse(f"messages[{index}]: a content of 1 to {self.most} characters")
        stamp = given.get("timestamp")
        when = m.moment_of(stamp, "timestamp")[0] if stamp is not None else None
        token = hashlib.sha256((idempotency or uuid4().hex).encode()).hexdigest()[:24]
        if infer:
            return self._ingested(key, ids, messages, when or self.clock(),
                                  given.get("timezone") or "UTC", token)
        return self._stored(key, ids, messages, when, m.expiry(given.get("expiration_date")),
                            token, idempotency is not None)

    def _stored(self, key: Key, ids: m.Entities, messages: list[dict[str, str]], when: Any,
                until: Any, token: str, retried: bool) -> dict[str, Any]:
        """Each message but the system's, as given: a card alone in a slot of its own."""
        subject = m.owner(ids)
        results = []
        for index, message in enumerate(messages):
            if message["role"] == "system":
                continue
            payload = {"kind": "state", "memory_type": "fact", "subject": subject,
                       "label": m.LABEL_PREFIX + f"{token[:12]}{index}", "cardinality": "single_value",
                       "content": message["content"], "agent_id": ids.single("agent_id"),
                       "source": "user_stated" if message["role"] == "user" else "imported",
                       "session_id": ids.single("run_id"), "valid_from": when, "valid_to": until,
                       "request_id": f"mem0:{token}:{index}" if retried else None}
            result = self.call("remember", key, _set(payload))
            results.append(m.written(result.model_dump(), message["content"], ids, subject,
                                     message["role"]))
        if not results:
            raise m.refuse("no message to store: a system message is not a memory")
        return {"results": results, "status": "SUCCEEDED", "event_id": None,
                "message": f"{len(results)} memory(ies) stored as given"}

    def _ingested(self, key: Key, ids: m.Entities, messages: list[dict[str, str]], said_at: Any,
                  zone: str, token: str) -> dict[str, Any]:
        """The turns handed to ingest: extraction writes the speaker's facts in the background."""
        if len(ids.user_ids) > 1:
            raise m.refuse("infer=True speaks for one user: give one user_id")
        session = ids.single("run_id") or f"mem0-{token}"
        turns = [{"session_id": session, "turn_id": f"{token}-{index}",
                  "role": message["role"], "text": message["content"], "said_at": said_at,
                  "timezone": zone, "agent_id": ids.single("agent_id"),
                  "speaker": ids.user_ids[0] if ids.user_ids else None}
                 for index, message in enumerate(messages)]
        out = self.call("ingest", key, {"turns": turns})
        on = out.extraction.on
        said = ("the turns are queued: the speaker's memories are extracted in the background"
                if on else "extraction is off, no memory was extracted (the turns are kept as "
                f"conversation records, found by run_id): {out.extraction.note}")
        return {"results": [], "status": "PENDING" if on else "SUCCEEDED", "event_id": None,
                "message": said,
                "palimpsest": {"extraction": out.extraction.model_dump(), "session_id": session,
                               "turns": [t.model_dump(mode="json") for t in out.turns]}}

    def update(self, key: Key, memory_id: UUID, given: dict[str, Any],
               idempotency: str | None) -> dict[str, Any]:
        """A state's new value supersedes the old (which stays in history); an event's text is
        corrected (audited, its time kept); other cards are not rewritten."""
        m.check_fields(given, {"text", "timestamp", "expiration_date"})
        text, stamp, until = given.get("text"), given.get("timestamp"), given.get("expiration_date")
        if not isinstance(text, str) or not text.strip():
            raise m.unsupported("an update gives a memory a new text (and, if you like, a "
                                "timestamp or an expiration_date): send text")
        card = self._card(key, memory_id)
        if card is None or card.kind == "state" and card.memory_type in m.REVISED_TYPES:
            when = m.moment_of(stamp, "timestamp")[0] if stamp is not None else None
            result = self.call("revise", key, _set({
                "card_id": memory_id, "content": text, "request_id": idempotency,
                "valid_from": when, "valid_to": m.expiry(until)}))
        elif card.kind == "event" and stamp is None and until is None:
            result = self.call("correct", key, _set({
                "card_id": memory_id, "description": text, "reason": "mem0 update",
                "request_id": idempotency}))
        else:
            raise m.Mem0Refusal(409, "not_revisable", (
                f"a {card.kind} card ({card.memory_type}) is not revised here: an event's text "
                "may be corrected (its time stays), a knowledge, commitment or blocker card is "
                "not rewritten; add the new text as a memory of its own"))
        writer = m.Entities(agent_ids=(card.agent_id,) if card and card.agent_id else ())
        done = m.written(result.model_dump(), text, writer, card.subject if card else None)
        done["palimpsest"]["replaces"] = str(memory_id)
        return done

    def _card(self, key: Key, memory_id: UUID) -> Any:
        """The card as projected; None when the read models do not hold it yet (a revision then
        finds its slot among this server's unprojected writes, or answers 404)."""
        try:
            return self.call("get_card", key, {"card_id": memory_id})
        except CardNotFoundError:
            return None

    # --- reads ----------------------------------------------------------------------------

    def search(self, key: Key, given: dict[str, Any]) -> dict[str, Any]:
        ignored = m.check_fields(given, SEARCH_FIELDS, noted=SEARCH_NOTED)
        if given.get("latest_only") is False:
            ignored.append("latest_only")
        query = given.get("query")
        if not isinstance(query, str) or not query.strip():
            raise m.refuse("query must be a non-empty string")
        ids = m.entities(given.get("filters"), **{k: given.get(k) for k in m.ENTITY_KEYS})
        if ids.created_after or ids.created_before:
            raise m.refuse("created_at narrows get_all, not a search: ask as of a moment with "
                           "valid_at / known_at instead")
        top = given.get("top_k", 10)
        if not isinstance(top, int) or not 1 <= top <= 50:
            raise m.refuse("top_k: 1 to 50")
        now = given.get("reference_date")
        out = self.call("search", key, _set({
            "query": query.strip(), "top_n": top, **ids.narrowing(), "as_of": _as_of(given),
            "now": m.moment_of(now, "reference_date")[0] if now is not None else None}))
        results = [m.memory(c.model_dump(), run_id=ids.single("run_id"), score=c.score)
                   for c in out.results]
        fields = given.get("fields")
        if isinstance(fields, list) and fields:
            results = [{k: found[k] for k in ("id", *fields) if k in found} for found in results]
        return {"results": results, "palimpsest": {
            "alerts": out.alerts.model_dump(mode="json"), "ignored": ignored,
            "valid_at": m.iso(out.valid_at), "known_at": m.iso(out.known_at)}}

    def get_all(self, key: Key, given: dict[str, Any], page: int | None, size: int | None,
                url: str) -> dict[str, Any]:
        m.check_fields(given, GET_ALL_FIELDS)
        page = given.get("page", 1) if page is None else page
        size = given.get("page_size", 100) if size is None else size
        if not isinstance(page, int) or not isinstance(size, int) or page < 1 \
                or not 1 <= size <= 1_000:
            raise m.refuse("page from 1, page_size 1 to 1000")
        ids = m.entities(given.get("filters"), **{k: given.get(k) for k in m.ENTITY_KEYS})
        after, before = ids.created_after, ids.created_before
        if given.get("start_date") is not None:
            after = m.moment_of(given["start_date"], "start_date")[0]
        if given.get("end_date") is not None:
            moment, day = m.moment_of(given["end_date"], "end_date")
            before = moment + (timedelta(days=1) if day else timedelta(0))
        everything = bool(given.get("show_expired") or given.get("include_superseded")
                          or given.get("latest_only") is False)
        cards, more = self.listed(key, _set({
            **ids.narrowing(), "recorded_after": after, "recorded_before": before,
            "include_superseded": everything or None, "as_of": _as_of(given)}))
        shown = cards[(page - 1) * size:page * size]
        base = url.split("?", 1)[0]
        return {"count": len(cards),
                "next": f"{base}?page={page + 1}&page_size={size}" if page * size < len(cards)
                else None,
                "previous": f"{base}?page={page - 1}&page_size={size}" if page > 1 else None,
                "results": [m.memory(c, run_id=ids.single("run_id")) for c in shown],
                "palimpsest": {"truncated": more}}

    def listed(self, key: Key, slice: dict[str, Any]) -> tuple[list[dict[str, Any]], bool]:
        """The slice's cards, tombstones left out (erased memories are gone), newest first: at
        most MAX_LISTED, and whether more were left."""
        cards: list[dict[str, Any]] = []
        cursor = None
        while len(cards) < MAX_LISTED:
            page = self.call("list_cards", key, _set({**slice, "limit": 500, "cursor": cursor}))
            cards.extend(c.model_dump() for c in page.cards if not c.erased)
            cursor = page.next_cursor
            if cursor is None:
                return cards, False
        return cards[:MAX_LISTED], True

    def history(self, key: Key, memory_id: UUID) -> list[dict[str, Any]]:
        cards = sorted(self.lineage(key, memory_id), key=_first_known)
        texts = {c.card_id: (c.versions[-1].value if c.versions else None) for c in cards}
        timeline = m.Timeline()
        for card in cards:
            replaced = [e["dst_id"] for e in card.edges if e["edge"] in REVISION_EDGES
                        and e["src_id"] == card.card_id and e["dst_id"] in texts]
            timeline.add(card.model_dump(), bool(replaced),
                         texts[replaced[0]] if replaced else None)
        return timeline.ordered()

    def lineage(self, key: Key, start: UUID, older: bool = False) -> list[Any]:
        """The card and those its revisions link it to (``older``: only those it replaced)."""
        found: dict[UUID, Any] = {}
        queue = [start]
        while queue and len(found) < MAX_LINEAGE:
            current = queue.pop(0)
            if current in found:
                continue
            out = self.call("history", key, {"ref": str(current)})
            card = next((c for c in out.cards if c.card_id == current), None)
            if card is None:
                raise CardNotFoundError(f"no memory {current}")
            found[current] = card
            for edge in card.edges:
                if edge["edge"] in REVISION_EDGES and edge["src_id"] == current:
                    queue.append(edge["dst_id"])
                elif edge["edge"] in REVISION_EDGES and not older and edge["dst_id"] == current:
                    queue.append(edge["src_id"])
        return list(found.values())

    def entities(self, key: Key) -> dict[str, Any]:
        """Users (subjects), agents and runs (sessions) that hold cards, with how many."""
        results = []
        for kind, axis in (("user", "subject"), ("agent", "agent_id"), ("run", "session_id")):
            for row in self.call("count_cards", key, {"group_by": axis}).counts:
                if row.key is None or (kind == "user" and m.user_of(row.key) is None):
                    continue
                results.append({"id": row.key, "name": row.key, "type": kind,
                                "total_memories": row.count, "owner": None, "organization": None,
                                "metadata": None, "created_at": None, "updated_at": None})
        return {"count": len(results), "next": None, "previous": None, "results": results}

    # --- forgetting -----------------------------------------------------------------------

    def forget(self, key: Key, memory_id: UUID, linked: bool,
               idempotency: str | None) -> dict[str, Any]:
        """One memory erased (``delete_linked``: with those it replaced, transitively): card
        erasures, so ``memory:write`` as over REST (``forget`` checks it)."""
        targets = [memory_id]
        if linked:
            targets += [c.card_id for c in self.lineage(key, memory_id, older=True)
                        if c.card_id != memory_id and not c.erased]
        done = [self.call("forget", key, _set({
            "unit": "card", "card_id": target, "basis": "mem0 delete",
            "request_id": f"{idempotency}:{i}" if idempotency else None}))
            for i, target in enumerate(targets)]
        return {"message": "Memory deleted successfully!", "palimpsest": _erased(done)}

    def matching(self, key: Key, ids: m.Entities) -> dict[str, Any]:
        """Every memory the entities name erased: a user's subject, a run's session, or the cards
        listed for any other combination; never the whole tenant."""
        if not ids.named:
            raise m.refuse("delete_all names no user_id, agent_id or run_id: Palimpsest does not "
                           "erase a whole tenant from here (POST /v1/erasures with unit tenant and "
                           "a key with memory:erase does)")
        if ids.created_after or ids.created_before:
            raise m.refuse("delete_all is narrowed by user_id, agent_id and run_id only")
        self._erasing(key)
        unit = _unit(ids)
        if unit is not None:
            done = [self.call("forget", key, {**unit, "basis": "mem0 delete_all"})]
        else:
            cards, _ = self.listed(key, {**ids.narrowing(), "include_superseded": True})
            done = [self.call("forget", key, {"unit": "card", "card_id": c["card_id"],
                                              "basis": "mem0 delete_all"}) for c in cards]
        erased = _erased(done)
        said = "Memories deleted successfully!" if erased["cards"] else "No memory matched"
        return {"message": said, "palimpsest": erased}


def _unit(ids: m.Entities) -> dict[str, Any] | None:
    """A user alone is a subject, a run alone a session: each one erasure unit."""
    if ids.user_ids and not ids.agent_ids and not ids.run_ids and len(ids.user_ids) == 1:
        return {"unit": "subject", "subject": ids.user_ids[0]}
    if ids.run_ids and not ids.agent_ids and not ids.user_ids and len(ids.run_ids) == 1:
        return {"unit": "session", "session_id": ids.run_ids[0]}
    return None


def _erased(done: list[Any]) -> dict[str, Any]:
    return {"erasures": [d.model_dump(mode="json") for d in done],
            "cards": len({c for d in done for c in d.card_ids})}


def _set(payload: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in payload.items() if v is not None}


def _as_of(given: dict[str, Any]) -> dict[str, Any] | None:
    """Our extension: ``valid_at`` / ``known_at`` ask as of a moment of either timeline."""
    moments = {k: m.moment_of(given[k], k)[0] for k in ("valid_at", "known_at")
               if given.get(k) is not None}
    return moments or None


def _first_known(card: Any) -> Any:
    return card.versions[0].known_from if card.versions else card.erased_at
