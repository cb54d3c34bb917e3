"""mem0's platform API read as Palimpsest's inputs, and our answers written in mem0's shapes
(docs/mem0.md). Pure functions on plain data; :mod:`services.entrypoints.api_mem0` decodes a
request, calls the operations every edge calls, and encodes with these.

The mapping: a memory is a card and its id the card's id; ``user_id`` is the card's subject (as
given: a ``/`` is refused, it separates subject and label); ``agent_id`` the writer's agent and
``run_id`` its session (provenance). A memory stored as given (``infer=False``) is a state card,
a ``fact`` alone in a slot of its own (label ``mem0_…``): the subject is the user, or
``agent:<agent_id>`` / ``run:<run_id>`` for a memory of no user. What a mem0 request asks that we
cannot honour is refused (:class:`Mem0Refusal`), never dropped in silence; what changes nothing
in the answer's truth (``rerank``, ``threshold`` …) is accepted and named under
``palimpsest.ignored``. Our own fields travel under the key ``palimpsest``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from services.ingest.resolution import USER

#: The subject extraction gives the person speaking when a turn names no ``user_id``.
SPEAKER = USER
AGENT, RUN = "agent:", "run:"
ENTITY_KEYS = ("user_id", "agent_id", "run_id")
#: The label of a memory stored as given: this prefix and a token of its own.
LABEL_PREFIX = "mem0_"
#: Request fields mem0 clients send that change nothing here: accepted, not applied.
HARMLESS = frozenset({"version", "output_format", "async_mode", "org_id", "project_id",
                      "org_name", "project_name"})
#: Card kinds and types whose text a revision replaces (a slot's value).
REVISED_TYPES = frozenset({"fact", "preference", "decision"})


class Mem0Refusal(Exception):
    """A mem0 request this surface refuses before any work: its HTTP status, a stable code, why."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def refuse(message: str) -> Mem0Refusal:
    return Mem0Refusal(400, "invalid_request", message)


def unsupported(message: str) -> Mem0Refusal:
    return Mem0Refusal(501, "not_supported", message)


# --- entities and filters -------------------------------------------------------------------


@dataclass(frozen=True)
class Entities:
    """Whose memories: users (subjects), agents and runs (sessions), and a recorded-time range."""

    user_ids: tuple[str, ...] = ()
    agent_ids: tuple[str, ...] = ()
    run_ids: tuple[str, ...] = ()
    created_after: datetime | None = None
    created_before: datetime | None = None

    @property
    def named(self) -> bool:
        return bool(self.user_ids or self.agent_ids or self.run_ids)

    def narrowing(self) -> dict[str, list[str]]:
        """Our filters: subjects, agent_ids, session_ids (each left out when not asked)."""
        pairs = (("subjects", self.user_ids), ("agent_ids", self.agent_ids),
                 ("session_ids", self.run_ids))
        return {name: list(values) for name, values in pairs if values}

    def single(self, name: str) -> str | None:
        values = getattr(self, name + "s")
        return values[0] if len(values) == 1 else None


def check_id(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > 200:
        raise refuse(f"{name} must be a non-empty string of at most 200 characters")
    if "/" in value or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise refuse(f"{name} {value!r} holds a '/' or a control character: Palimpsest keeps a "
                     "user as a subject, where '/' separates subject and label; use another id")
    if name == "user_id" and value.startswith((AGENT, RUN)):
        raise refuse(f"user_id {value!r} begins with {AGENT!r} or {RUN!r}: those name the memories "
                     "of an agent or a run without a user")
    return value


def entities(filters: Any = None, **given: Any) -> Entities:
    """The entities of mem0 ``filters`` (``{"user_id": …}``, ``{"AND": [...]}``, an ``OR`` over
    one key, ``{"in": [...]}``, ``created_at`` ranges) and of top-level ``user_id`` …, all holding
    at once. Anything else is refused, naming it."""
    found: dict[str, set[str]] = {}
    times: dict[str, datetime] = {}
    for key, value in given.items():
        if value is not None:
            _take(found, key, [value])
    if filters is not None:
        _walk(filters, found, times)
    return Entities(**{key + "s": tuple(sorted(found[key])) for key in found},
                    created_after=times.get("after"), created_before=times.get("before"))


def _walk(filters: Any, found: dict[str, set[str]], times: dict[str, datetime]) -> None:
    if not isinstance(filters, Mapping):
        raise refuse("filters must be an object, e.g. {\"user_id\": \"alice\"}")
    for key, value in filters.items():
        if key == "AND":
            for part in _parts(value, key):
                _walk(part, found, times)
        elif key == "OR":
            _take(found, *_either(_parts(value, key)))
        elif key in ENTITY_KEYS:
            _take(found, key, _values(key, value))
        elif key in ("created_at", "updated_at"):
            _range(key, value, times)
        elif key == "app_id":
            raise unsupported("app_id has no equivalent in Palimpsest (a key's tenant is its app): "
                              "leave it out")
        else:
            raise refuse(f"filter {key!r} is not supported: filter by user_id, agent_id, run_id or "
                         "created_at (docs/mem0.md)")


def _parts(value: Any, key: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise refuse(f"{key} takes a non-empty list of filters")
    return value


def _either(parts: list[Any]) -> tuple[str, list[str]]:
    """An OR of one key's values (``user_id`` a or b): any other OR has no equivalent."""
    keys = {k for part in parts if isinstance(part, Mapping) for k in part}
    if len(keys) != 1 or not all(isinstance(p, Mapping) and len(p) == 1 for p in parts):
        raise refuse("OR is supported between values of one entity (user_id a OR user_id b); "
                     "our filters on different entities all hold at once")
    (key,) = keys
    if key not in ENTITY_KEYS:
        raise refuse(f"OR over {key!r} is not supported")
    return key, [v for part in parts for v in _values(key, part[key])]


def _values(key: str, value: Any) -> list[str]:
    if isinstance(value, Mapping) and len(value) == 1 and ("in" in value or "eq" in value):
        inner = value.get("in", value.get("eq"))
        return [check_id(key, v) for v in (inner if isinstance(inner, list) else [inner])]
    if value == "*":
        raise refuse(f"{key} '*' (any) is not supported: name the {key} or leave it out")
    return [check_id(key, value)]


def _take(found: dict[str, set[str]], key: str, values: Iterable[Any]) -> None:
    wanted = {check_id(key, v) for v in values}
    before = found.get(key)
    found[key] = wanted if before is None else before & wanted
    if not found[key]:
        raise refuse(f"the filters ask for {key} values that cannot all hold at once")


def _range(key: str, value: Any, times: dict[str, datetime]) -> None:
    if key == "updated_at":
        raise refuse("updated_at is not a filter here: a memory is never edited in place; "
                     "filter by created_at")
    if not isinstance(value, Mapping) or not value or set(value) - {"gte", "gt", "lte", "lt"}:
        raise refuse("created_at takes {\"gte\"|\"gt\"|\"lte\"|\"lt\": date}")
    for op, raw in value.items():
        moment, whole_day = moment_of(raw, "created_at")
        if op in ("gte", "gt"):
            times["after"] = moment + (_step(whole_day) if op == "gt" else timedelta(0))
        else:
            times["before"] = moment + (_step(whole_day) if op == "lte" else timedelta(0))


def _step(whole_day: bool) -> timedelta:
    return timedelta(days=1) if whole_day else timedelta(microseconds=1)


def moment_of(value: Any, name: str) -> tuple[datetime, bool]:
    """A mem0 time (a Unix timestamp, ``YYYY-MM-DD`` or ISO 8601; naive is UTC) and whether it
    named a whole day."""
    if isinstance(value, bool):
        raise refuse(f"{name}: {value!r} is not a time")
    if isinstance(value, int | float):
        try:
            return datetime.fromtimestamp(value, UTC), False
        except (ValueError, OverflowError, OSError):
            raise refuse(f"{name}: {value!r} is no Unix time") from None
    if isinstance(value, str):
        try:
            if len(value) == 10:
                return datetime.combine(date.fromisoformat(value), time(), UTC), True
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise refuse(f"{name}: {value!r} is not a date (YYYY-MM-DD) or an ISO 8601 time") from None
        return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)), False
    raise refuse(f"{name}: {value!r} is not a time")


def owner(ids: Entities) -> str:
    """The subject of a memory stored as given: its user, else its agent's or its run's."""
    if ids.user_ids:
        return _one(ids.user_ids, "user_id")
    if ids.agent_ids:
        return AGENT + _one(ids.agent_ids, "agent_id")
    if ids.run_ids:
        return RUN + _one(ids.run_ids, "run_id")
    raise refuse("name whose memory it is: user_id, agent_id or run_id")


def _one(values: tuple[str, ...], name: str) -> str:
    if len(values) != 1:
        raise refuse(f"a memory belongs to one {name}; got {len(values)}")
    return values[0]


def user_of(subject: str | None) -> str | None:
    return None if subject is None or subject.startswith((AGENT, RUN)) else subject


# --- request fields -------------------------------------------------------------------------


def check_fields(body: Mapping[str, Any], known: Iterable[str], *, noted: Iterable[str] = ()
                 ) -> list[str]:
    """Refuse a field this route cannot honour (a set value of a field not ``known``); answer the
    ``noted`` fields that were set (accepted, not applied)."""
    allowed = set(known) | set(noted) | HARMLESS
    for name, value in body.items():
        if name == "metadata" and value:
            raise unsupported("metadata is not stored by Palimpsest (a card holds its text, "
                              "provenance and times): leave it out, or say it in the text")
        if name not in allowed and value not in (None, False, [], {}, ""):
            raise unsupported(f"{name!r} is not supported by Palimpsest's mem0 surface "
                              "(docs/mem0.md lists what is)")
    return [name for name in noted if body.get(name) not in (None, False)]


def messages_of(body: Mapping[str, Any]) -> list[dict[str, str]]:
    raw = body.get("messages")
    if isinstance(raw, str):
        raw = [{"role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise refuse("messages must be a non-empty list of {role, content}")
    found = []
    for index, message in enumerate(raw):
        if not isinstance(message, Mapping) or not isinstance(message.get("content"), str) \
                or not isinstance(message.get("role"), str):
            raise refuse(f"messages[{index}] must be an object with a role and a text content")
        found.append({"role": message["role"], "content": message["content"]})
    return found


def expiry(value: Any) -> datetime | None:
    """``expiration_date`` (``YYYY-MM-DD``) as the end of the card's world time."""
    return None if value is None else moment_of(value, "expiration_date")[0]


# --- answers --------------------------------------------------------------------------------


def iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def memory(card: Mapping[str, Any], *, run_id: str | None = None,
           score: float | None = None) -> dict[str, Any]:
    """A card as mem0's memory object; our fields under ``palimpsest``."""
    text = card.get("value", card.get("content"))
    recorded, verified = card["recorded_at"], card.get("verified_at")
    valid_to = card.get("valid_to")
    found: dict[str, Any] = {
        "id": str(card["card_id"]), "memory": text, "user_id": user_of(card.get("subject")),
        "agent_id": card.get("agent_id"), "run_id": card.get("session_id") or run_id,
        "app_id": None, "metadata": None, "categories": _categories(card),
        "hash": hashlib.md5(text.encode()).hexdigest() if text else None,
        "created_at": iso(recorded), "updated_at": iso(max(recorded, verified or recorded)),
        "expiration_date": iso(valid_to) if valid_to and not card.get("superseded") else None,
        "palimpsest": extras(card),
    }
    if score is not None:
        found["score"] = score
    return found


def _categories(card: Mapping[str, Any]) -> list[str]:
    label = card.get("label")
    named = [label] if label and not label.startswith(LABEL_PREFIX) else []
    return [card["memory_type"], *named]


_EXTRAS = ("kind", "memory_type", "subject", "label", "scope", "project_id", "group_id", "source",
           "inference_confidence", "status", "superseded", "erased")
_TIMES = ("valid_from", "valid_to", "occurred_at", "recorded_at", "verified_at")


def extras(card: Mapping[str, Any]) -> dict[str, Any]:
    found = {name: card.get(name) for name in _EXTRAS if name in card}
    found.update({name: iso(card.get(name)) for name in _TIMES})
    if card.get("kind") == "state":
        found["slot_id"] = str(card["aggregate_id"])
    return found


def written(result: Mapping[str, Any], text: str, ids: Entities, subject: str | None,
            role: str | None = None) -> dict[str, Any]:
    """What a write did, as a mem0 add or update result."""
    outcome = result["outcome"]
    event = {"remembered": "ADD", "verified": "NOOP", "queued": "PENDING"}.get(outcome, "UPDATE")
    found = {"id": str(result["card_id"]), "memory": text, "event": event,
             "user_id": user_of(subject), "agent_id": ids.single("agent_id"),
             "run_id": ids.single("run_id"),
             "palimpsest": {k: _plain(result.get(k)) for k in (
                 "outcome", "aggregate_id", "case_id", "reason", "position", "replayed")}}
    if role is not None:
        found["role"] = role
    return found


def _plain(value: Any) -> Any:
    return value if value is None or isinstance(value, str | int | bool) else str(value)


@dataclass
class Timeline:
    """A memory's lineage as mem0 history entries: every version of every card it went through
    (mem0's ADD, UPDATE and DELETE, and NONE for a version that changed no text: a validity
    closed, a verification), each with both timelines under ``palimpsest``."""

    entries: list[tuple[datetime, int, dict[str, Any]]] = field(default_factory=list)

    def add(self, card: Mapping[str, Any], replaced: bool, before: str | None) -> None:
        """``card``: one card's history (``services.query.queries.CardHistory`` as data); ``replaced``:
        it took the place of another card, whose text was ``before``."""
        previous, user = before, user_of(card.get("subject"))
        for index, version in enumerate(card["versions"]):
            if index == 0:
                event = "UPDATE" if replaced else "ADD"
            else:
                event = "UPDATE" if "content revised" in version["change"] else "NONE"
            self._add(card, version, previous, version["value"], event, user)
            previous = version["value"]
        if card.get("erased_at") is not None and card["versions"]:
            erased = {**card["versions"][-1], "known_from": card["erased_at"], "known_to": None,
                      "change": "erased"}
            self._add(card, erased, None, None, "DELETE", user)

    def _add(self, card: Mapping[str, Any], version: Mapping[str, Any], old: str | None,
             new: str | None, event: str, user: str | None) -> None:
        card_id, at = str(card["card_id"]), version["known_from"]
        entry = {
            "id": f"{card_id}:{version['version']}" + (":erased" if event == "DELETE" else ""),
            "memory_id": card_id, "old_memory": old, "new_memory": new, "event": event,
            "user_id": user, "created_at": iso(at), "updated_at": iso(at),
            "is_deleted": event == "DELETE",
            "palimpsest": {"card_id": card_id, "version": version["version"],
                           "change": version["change"], "kind": card["kind"],
                           "valid_from": iso(version["valid_from"]),
                           "valid_to": iso(version["valid_to"]), "known_from": iso(at),
                           "known_to": iso(version.get("known_to")),
                           "retracted": version.get("retracted", False)}}
        self.entries.append((at, _RANK[event], entry))

    def ordered(self) -> list[dict[str, Any]]:
        return [entry for _, _, entry in sorted(self.entries, key=lambda e: (e[0], e[1]))]


_RANK = {"ADD": 0, "UPDATE": 1, "NONE": 2, "DELETE": 3}
