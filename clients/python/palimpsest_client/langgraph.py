"""A LangGraph ``BaseStore`` over a running Palimpsest: ``PalimpsestStore`` (the ``[langgraph]`` extra).

Every item is a state card of the key's tenant, so what a graph stores is also what Palimpsest's
search, briefing and history see, with both timelines kept::

    from palimpsest_client.langgraph import PalimpsestStore

    store = PalimpsestStore()  # PALIMPSEST_URL, PALIMPSEST_KEY
    store.put(("users", "u1"), "food", {"likes": "ramen"})
    store.get(("users", "u1"), "food").value  # {'likes': 'ramen'}

The mapping (exact and reversible):

- a **namespace** is a card's ``subject``, in ``personal`` scope (``scope=``, ``project_id=``,
  ``group_id=`` pick another): its segments joined with ``:``, and inside a segment ``%`` written
  ``%25``, ``:`` ``%3A``, ``/`` ``%2F``, a control character or a whitespace character at either end
  of the segment ``%XX`` (its UTF-8 bytes): the server strips a subject and refuses ``/`` and
  control characters in it. A subject not written by this store is read as the segments its ``:``
  make, each ``%XX``-decoded: nothing tells the store's subjects from others.
- a **key** is the slot's ``label``. The server normalises labels (``normalise_label`` of
  ``domain/rules/cardinality.py``: strip, lowercase, runs of whitespace and ``-`` become ``_``), so
  a key already in that form, without ``%`` or ``/``, is the label itself (``address``,
  ``job_title``, ``喜歡的食物``); any other key has each character that normalising would change (a
  capital letter, whitespace, ``-``), each ``%`` and ``/`` and control character written ``%xx``
  (lowercase hex: a form normalising keeps): ``Color`` is ``%43olor``, ``co-lor`` is ``co%2dlor``.
  ``Color``, ``color`` and ``co-lor`` stay three keys.
- a **value** is the card's ``content``: its JSON (``sort_keys``, non-ASCII kept), ``kind="state"``,
  ``memory_type="fact"``, ``cardinality="single_value"``. A card whose content is no JSON object
  (one written by another client) reads as ``{"content": <its text>}``.

The operations:

- ``put`` remembers the card: a changed value supersedes the old one (history kept). The server
  reads two values as one when they differ only by case or spacing (a re-statement: verified,
  not stored); the store then writes the value's JSON with its letters and spaces ``\\uXXXX``-escaped, so
  ``{"t": "Dark"}`` after ``{"t": "dark"}`` is a change. Rule 4 of the design: the third change of
  a slot within 30 days is queued for a person to arbitrate and ``get`` keeps the value in force.
  With ``accept_queued=True`` the store settles such a put at once (``accept_new``, decided by the
  store's ``name``; a key with ``memory:admin``).
- ``put(value=None)`` and ``delete`` erase the item (``POST /v1/erasures``, the slot; a key with
  ``memory:write``): every card of its slot is crypto-shredded, each version of it. A later put
  of the key opens the slot afresh, with none of the old one's history.
- ``get`` is the slot's current card: ``created_at`` when the slot's first card (since its last
  erasure) was recorded, ``updated_at`` when the current one was. ``get_as_of(namespace, key,
  valid_at=…, known_at=…)`` asks as of any point of both timelines.
- ``search`` without a query lists the current cards under the prefix, the latest recorded first;
  with one, the fused retrieval ranks them (at most its 50 best; ``score`` is its score). A prefix
  matches whole segments: ``("a",)`` never sees ``("ab",)``. ``filter`` is applied here, as
  ``InMemoryStore`` applies it (``$eq $ne $gt $gte $lt $lte``, plain equality).
- ``list_namespaces`` groups the current cards by subject.

Reads wait for the store's own last write (``min_position``): a put is seen by the next get.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Generator, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar, cast
from urllib.parse import unquote

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from palimpsest_client.client import (
    JSON,
    APIError,
    AsyncClient,
    Call,
    Calls,
    Client,
    NotFoundError,
    PermissionDeniedError,
)

__all__ = ["PalimpsestStore", "decode_label", "decode_subject", "encode_key", "encode_namespace"]

T = TypeVar("T")
#: One operation as the requests it makes: each ``yield`` sends a call and receives its answer.
Plan = Generator[Call, Any, T]

#: A search ranks at most this many cards (the server's ``top_n`` ceiling); a page of a listing.
RANKED, PAGE = 50, 500

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
#: The server's label rule (``domain/rules/cardinality.py``: ``normalise_label``), re-stated here.
_SEPARATORS = re.compile(r"[\s\-]+")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


# ---- namespaces and keys ------------------------------------------------------------------------

def _escaped(char: str, lower: bool = False) -> str:
    text = "".join(f"%{byte:02X}" for byte in char.encode())
    return text.lower() if lower else text


def _segment(text: str) -> str:
    last = len(text) - 1
    return "".join(_escaped(c) if c in "%:/" or _CONTROL.match(c) or (c.isspace() and i in (0, last))
                   else c for i, c in enumerate(text))


def encode_namespace(namespace: Sequence[str]) -> str:
    """A namespace's subject: ``("users", "a:b")`` is ``users:a%3Ab``."""
    return ":".join(_segment(part) for part in namespace)


def decode_subject(subject: str) -> tuple[str, ...]:
    return tuple(unquote(part) for part in subject.split(":"))


def _normal(label: str) -> str:
    return _SEPARATORS.sub("_", label.strip().lower())


def _plain(char: str) -> bool:
    return not (char in "%/-" or char.isspace() or _CONTROL.match(char) or char.lower() != char)


def encode_key(key: str) -> str:
    """A key's label, already in the server's normal form: ``Color`` is ``%43olor``."""
    if not key:
        raise ValueError("a key names a slot label: it cannot be empty")
    if all(_plain(c) for c in key) and _normal(key) == key:
        return key
    return "".join(c if _plain(c) else _escaped(c, lower=True) for c in key)


def decode_label(label: str) -> str:
    return unquote(label) if "%" in label else label


# ---- values and filters -------------------------------------------------------------------------

def _dumps(value: Mapping[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _distinct(content: str) -> str:
    """The same JSON with every letter that has a case and every space inside its strings written
    ``\\uXXXX``: a text the server's value comparison (case and spacing ignored) tells apart from
    any plain one."""
    def escape(char: str) -> str:
        units = char.encode("utf-16-be")
        return "".join(f"\\u{units[i]:02x}{units[i + 1]:02x}" for i in range(0, len(units), 2))

    def string(found: re.Match[str]) -> str:
        return "".join(escape(c) if c.isspace() or c.lower() != c.upper() or c.casefold() != c
                       else c for c in found.group())

    return _STRING.sub(string, content)


def _value(text: str | None) -> dict[str, Any]:
    try:
        found = json.loads(text or "")
    except ValueError:
        found = None
    return found if isinstance(found, dict) else {"content": text}


def matches(value: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    """``InMemoryStore``'s filter: every field equal, or passing its ``$`` operators."""
    return all(_compare(value.get(key), wanted) for key, wanted in (filter or {}).items())


def _compare(found: Any, wanted: Any) -> bool:
    if isinstance(wanted, dict):
        if any(k.startswith("$") for k in wanted):
            return all(_apply(found, op, operand) for op, operand in wanted.items())
        return isinstance(found, dict) and all(_compare(found.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (isinstance(found, list | tuple) and len(found) == len(wanted)
                and all(_compare(f, w) for f, w in zip(found, wanted, strict=True)))
    return bool(found == wanted)


_ORDER = {"$gt": float.__gt__, "$gte": float.__ge__, "$lt": float.__lt__, "$lte": float.__le__}


def _apply(found: Any, operator: str, operand: Any) -> bool:
    if operator == "$eq":
        return bool(found == operand)
    if operator == "$ne":
        return bool(found != operand)
    if operator not in _ORDER:
        raise ValueError(f"unsupported filter operator {operator!r}")
    try:  # a missing or non-numeric field matches no range (InMemoryStore raises)
        return bool(_ORDER[operator](float(found), float(operand)))
    except (TypeError, ValueError):
        return False


def _does_match(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    start = 0 if condition.match_type == "prefix" else len(namespace) - len(path)
    part = namespace[start:start + len(path)]
    return all(p in ("*", n) for n, p in zip(part, path, strict=True))


# ---- cards as items -----------------------------------------------------------------------------

def _text(card: JSON) -> str | None:
    return cast(str | None, card["content"] if "content" in card else card.get("value"))


def _holds(card: JSON) -> bool:
    return not card.get("erased") and _text(card) is not None


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _first_recorded(cards: Iterable[JSON], known_at: datetime | None = None) -> dict[str, str]:
    """Each slot's first card that still holds its text (known by ``known_at``): its recording."""
    first: dict[str, str] = {}
    for card in cards:
        if _holds(card) and (known_at is None or _time(card["recorded_at"]) <= known_at):
            slot = card["aggregate_id"]
            if slot not in first or _time(card["recorded_at"]) < _time(first[slot]):
                first[slot] = card["recorded_at"]
    return first


def _item(card: JSON, created: Mapping[str, str], score: float | None = None,
          searched: bool = False) -> Item:
    fields: dict[str, Any] = {
        "namespace": decode_subject(card["subject"]), "key": decode_label(card["label"]),
              "value": _value(_text(card)), "updated_at": _time(card["recorded_at"]),
              "created_at": _time(created.get(card["aggregate_id"], card["recorded_at"]))}
    return SearchItem(**fields, score=score) if searched else Item(**fields)


class PalimpsestStore(BaseStore):
    """A LangGraph store whose items are Palimpsest state cards (see the module docstring).

    ``url`` and ``key`` default to ``PALIMPSEST_URL`` and ``PALIMPSEST_KEY``; ``scope``,
    ``project_id`` and ``group_id`` place the cards; ``accept_queued`` settles a put the server
    queued for arbitration at once (decided by ``name``); ``agent_id`` and ``session_id`` are the
    cards' provenance (one session's changes within the server's turn window are
    self-corrections: overwritten, never queued). ``client`` / ``async_client`` replace the
    clients the store makes (a transport of your own)."""

    supports_ttl = False

    def __init__(self, url: str | None = None, key: str | None = None, *, scope: str = "personal",
                 project_id: str | None = None, group_id: str | None = None,
                 accept_queued: bool = False, name: str = "langgraph store",
                 agent_id: str | None = None, session_id: str | None = None, timeout: float = 30.0,
                 client: Client | None = None, async_client: AsyncClient | None = None) -> None:
        self.url, self.key, self.timeout = url, key, timeout
        self.scope, self.project_id, self.group_id = scope, project_id, group_id
        self.accept_queued, self.name = accept_queued, name
        self.agent_id, self.session_id = agent_id, session_id
        self._client = client or Client(url, key, timeout=timeout)
        self._given_async = async_client
        self._async: tuple[AsyncClient, asyncio.AbstractEventLoop] | None = None
        #: The last write this store made that its reads have not been seen to include.
        self._position: int | None = None

    def __enter__(self) -> PalimpsestStore:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    async def aclose(self) -> None:
        if self._async is not None:
            await self._async[0].aclose()
            self._async = None

    # ---- BaseStore ------------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Reads first, in order, then the puts (the last put of a key wins), as InMemoryStore."""
        reads, puts, results = _split(ops)
        for i, op in reads:
            results[i] = self._drive(self._read(op))
        for put in puts:
            self._drive(self._put(put))
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        reads, puts, results = _split(ops)
        found = await asyncio.gather(*(self._adrive(self._read(op)) for _, op in reads))
        for (i, _), result in zip(reads, found, strict=True):
            results[i] = result
        await asyncio.gather(*(self._adrive(self._put(put)) for put in puts))
        return results

    def get_as_of(self, namespace: tuple[str, ...], key: str, *, valid_at: datetime | None = None,
                  known_at: datetime | None = None) -> Item | None:
        """The item valid at ``valid_at`` (world time) as known at ``known_at`` (system time);
        either alone: the other is now (``known_at``) or the same moment (``valid_at``)."""
        return self._drive(self._get(namespace, key, valid_at, known_at))

    async def aget_as_of(self, namespace: tuple[str, ...], key: str, *,
                         valid_at: datetime | None = None, known_at: datetime | None = None
                         ) -> Item | None:
        return await self._adrive(self._get(namespace, key, valid_at, known_at))

    # ---- driving a plan -------------------------------------------------------------------------

    def _drive(self, plan: Plan[T]) -> T:
        answer: Any = None
        error: APIError | None = None
        while True:
            try:
                call = plan.throw(error) if error is not None else plan.send(answer)
            except StopIteration as done:
                return cast(T, done.value)
            try:
                answer, error = self._client.send(call), None
            except APIError as failed:
                answer, error = None, failed

    async def _adrive(self, plan: Plan[T]) -> T:
        client = self._async_client()
        answer: Any = None
        error: APIError | None = None
        while True:
            try:
                call = plan.throw(error) if error is not None else plan.send(answer)
            except StopIteration as done:
                return cast(T, done.value)
            try:
                answer, error = await client.send(call), None
            except APIError as failed:
                answer, error = None, failed

    def _async_client(self) -> AsyncClient:
        """The given async client, or one of this event loop (a client's connections are bound
        to the loop that opened them)."""
        if self._given_async is not None:
            return self._given_async
        loop = asyncio.get_running_loop()
        if self._async is None or self._async[1] is not loop:
            self._async = AsyncClient(self.url, self.key, timeout=self.timeout), loop
        return self._async[0]

    # ---- the plans ------------------------------------------------------------------------------

    def _read(self, op: Op) -> Plan[Result]:
        if isinstance(op, GetOp):
            return (yield from self._get(op.namespace, op.key))
        if isinstance(op, SearchOp):
            if op.query:
                return (yield from self._ranked(op))
            return (yield from self._listed(op))
        if isinstance(op, ListNamespacesOp):
            return (yield from self._namespaces(op))
        raise ValueError(f"unknown operation {type(op).__name__}")

    def _get(self, namespace: tuple[str, ...], key: str, valid_at: datetime | None = None,
             known_at: datetime | None = None) -> Plan[Item | None]:
        subject, label = encode_namespace(namespace), encode_key(key)
        slot = yield from self._cards(subjects=[subject], labels=[label], include_superseded=True)
        seen = [c for c in slot if not c["superseded"]]
        if valid_at is not None or known_at is not None:
            page = yield from self._listing(subjects=[subject], labels=[label], valid_at=valid_at,
                                            known_at=known_at, limit=PAGE)
            seen = page["cards"]
        current = next((c for c in seen if _holds(c)), None)
        return None if current is None else _item(current, _first_recorded(slot, known_at))

    def _listed(self, op: SearchOp) -> Plan[list[SearchItem]]:
        """The current cards under the prefix, the latest recorded first, a page at a time until
        ``offset + limit`` pass the filter."""
        wanted, cursor = op.offset + op.limit, None
        kept: list[JSON] = []
        while True:
            page = yield from self._listing(
                subject_prefix=encode_namespace(op.namespace_prefix) or None,
                limit=min(PAGE, max(wanted, 50)), cursor=cursor)
            kept = self._kept([*kept, *page["cards"]], op)
            cursor = page["next_cursor"]
            if len(kept) >= wanted or cursor is None:
                break
        return (yield from self._items(kept[op.offset:wanted]))

    def _ranked(self, op: SearchOp) -> Plan[list[SearchItem]]:
        position = self._position
        found = yield Calls.search(cast(str, op.query), None, None, {
            "subject_prefix": encode_namespace(op.namespace_prefix) or None, "top_n": RANKED,
            "min_position": position, "project_id": self.project_id,
            "group_ids": [self.group_id] if self.group_id else None,
            "include_global": self.scope == "global" or None})
        self._caught_up(position, found.get("freshness"))
        kept = self._kept(found["results"], op)
        return (yield from self._items(kept[op.offset:op.offset + op.limit]))

    def _kept(self, cards: Iterable[JSON], op: SearchOp) -> list[JSON]:
        """The store's cards under the prefix, one per slot, whose value passes the filter."""
        kept: dict[str, JSON] = {}
        depth = len(op.namespace_prefix)
        for card in cards:
            if (card["aggregate_id"] not in kept and card["kind"] == "state" and card["subject"]
                    and card["label"] and not card["superseded"] and _holds(card)
                    and self._placed(card)
                    and decode_subject(card["subject"])[:depth] == tuple(op.namespace_prefix)
                    and matches(_value(_text(card)), op.filter)):
                kept[card["aggregate_id"]] = card
        return list(kept.values())

    def _placed(self, card: JSON) -> bool:
        return (card["scope"], card.get("project_id"), card.get("group_id")) == (
            self.scope, self.project_id, self.group_id)

    def _items(self, cards: list[JSON]) -> Plan[list[SearchItem]]:
        """The cards as search items, each with its slot's first recording."""
        slots: list[JSON] = []
        if cards:
            slots = yield from self._cards(subjects=sorted({c["subject"] for c in cards}),
                                           labels=sorted({c["label"] for c in cards}),
                                           include_superseded=True)
        created = _first_recorded(slots)
        return [cast(SearchItem, _item(c, created, c.get("score"), searched=True)) for c in cards]

    def _namespaces(self, op: ListNamespacesOp) -> Plan[list[tuple[str, ...]]]:
        conditions = op.match_conditions or ()
        fixed: list[str] = []
        for condition in conditions:
            if condition.match_type == "prefix":
                fixed = list(_until_wildcard(condition.path))
        counts = yield from self._listing("/v1/cards/count", group_by="subject",
                                          subject_prefix=encode_namespace(fixed) or None)
        found = {decode_subject(c["key"]) for c in counts["counts"] if c["key"]}
        kept = [ns for ns in found if all(_does_match(c, ns) for c in conditions)]
        if op.max_depth is not None:
            kept = list({ns[:op.max_depth] for ns in kept})
        return sorted(kept)[op.offset:op.offset + op.limit]

    def _put(self, op: PutOp) -> Plan[None]:
        subject, label = encode_namespace(op.namespace), encode_key(op.key)
        if op.value is None:
            return (yield from self._erase(subject, label))
        content = _dumps(op.value)
        written = yield from self._remember(subject, label, content)
        if written["outcome"] == "verified":  # the server reads it as the value it holds
            held = yield Calls.card(written["card_id"], {"min_position": self._position})
            if _value(held["value"]) != json.loads(content):  # only by case or spacing
                written = yield from self._remember(subject, label, _distinct(content))
        if written["outcome"] == "queued" and self.accept_queued:
            yield from self._accept(written)

    def _remember(self, subject: str, label: str, content: str) -> Plan[JSON]:
        written = yield Calls.remember({
            "kind": "state", "memory_type": "fact", "cardinality": "single_value",
            "subject": subject, "label": label, "content": content,
            # a label the server holds multi-value (skills, tools …): one item, revised in place
            "item_key": "value", "agent_id": self.agent_id, "session_id": self.session_id,
            **self._place()})
        self._wrote(written)
        return cast(JSON, written)

    def _accept(self, queued: JSON) -> Plan[None]:
        try:
            decided = yield Calls.decide(queued["case_id"], {
                "decision": "accept_new", "decided_by": self.name, "card_id": queued["card_id"]})
        except PermissionDeniedError as error:
            raise _needs(error, "accept_queued=True settles a queued put (POST /v1/arbitrations/"
                                "{case_id}/decision): the key needs memory:admin") from error
        self._wrote(decided)

    def _erase(self, subject: str, label: str) -> Plan[None]:
        """Forget the item's slot (every card of it, each version); a key never written is no
        error. A later put of the key opens the slot afresh."""
        try:
            erased = yield Calls.forget("slot", {"subject": subject, "label": label, **self._place()})
        except NotFoundError:
            return
        except PermissionDeniedError as error:
            raise _needs(error, "delete erases the item (POST /v1/erasures): the key needs "
                                "memory:write") from error
        self._wrote(erased)

    # ---- requests -------------------------------------------------------------------------------

    def _place(self) -> JSON:
        return {"scope": self.scope, "project_id": self.project_id, "group_id": self.group_id}

    def _slice(self) -> JSON:
        return {"kinds": ["state"], "scopes": [self.scope],
                "project_ids": [self.project_id] if self.project_id else None,
                "group_ids": [self.group_id] if self.group_id else None}

    def _listing(self, path: str = "/v1/cards", **options: Any) -> Plan[JSON]:
        """One listing (or count) of the slice, once the read models hold this store's last
        write."""
        position = self._position
        answer = yield Calls.cards(path, {**self._slice(), "min_position": position, **options})
        self._caught_up(position, answer.get("freshness"))
        return cast(JSON, answer)

    def _cards(self, **options: Any) -> Plan[list[JSON]]:
        """Every card of a slice, page after page."""
        found: list[JSON] = []
        cursor = None
        while True:
            page = yield from self._listing(**options, limit=PAGE, cursor=cursor)
            found += page["cards"]
            cursor = page["next_cursor"]
            if cursor is None:
                return found

    def _caught_up(self, position: int | None, freshness: JSON | None) -> None:
        if freshness and freshness["stale_by"] == 0 and self._position == position:
            self._position = None

    def _wrote(self, answer: JSON) -> None:
        position = answer.get("position")
        if position:
            self._position = max(self._position or 0, position)


def _split(ops: Iterable[Op]) -> tuple[list[tuple[int, Op]], list[PutOp], list[Result]]:
    reads: list[tuple[int, Op]] = []
    puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
    count = 0
    for count, op in enumerate(ops, 1):
        if isinstance(op, PutOp):
            puts.pop((op.namespace, op.key), None)
            puts[(op.namespace, op.key)] = op
        else:
            reads.append((count - 1, op))
    return reads, list(puts.values()), [None] * count


def _until_wildcard(path: Sequence[str]) -> Iterable[str]:
    for part in path:
        if part == "*":
            return
        yield part


def _needs(error: APIError, what: str) -> PermissionDeniedError:
    return PermissionDeniedError(error.status, error.code, f"{what}; {error.message}",
                                 error.retryable, error.body)
