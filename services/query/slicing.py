"""Slicing: filtered listings and counts of a tenant's cards along their six axes (DESIGN §3).

Kind and memory type; time (valid, recorded, occurred); scope, project, group; source (agent,
session); confidence (provenance, ``inference_confidence``); relation (an edge to a card or to a
concept's knowledge card); concept (tags). Filters on different axes all hold (AND); the values
of one list filter are alternatives (any of). Current cards by default, every card with
``include_superseded``, or each card's version seen ``as_of`` a moment on both timelines.

One call each: "knowledge cards created this month" (``kinds=["knowledge"],
recorded_during="this month"``, in ``time_zone``), "cards per agent" (``group_by="agent_id"``),
"agent-inferred facts under 0.6" (``memory_types=["fact"], sources=["agent_inferred"],
confidence_below=0.6``), "what contradicts JWT" (``related_concept="JWT", edge="contradicts"``).

An erased card is listed as a tombstone: ``erased`` true, ``erased_at`` set, no content, title or
tags (DESIGN §7); a filter on its text (tags, a concept) no longer finds it.
"""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import UTC, datetime
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict, Field

from domain.errors import InvalidCommandError, InvalidKindError, InvalidTimeError
from domain.rules.cardinality import normalise_label
from domain.rules.tags import normalise_tag
from domain.rules.validation import check_aware, check_fields
from domain.values import CardKind, Edge, MemoryType, ScopeKind, Source
from projections.slicing_sql import GROUP_KEYS, counting, listing
from services.query.readmodels import CardRecord, Freshness, ReadModels
from services.query.timeexpr import AmbiguousTimeError, TimeRange, resolve

MAX_LIMIT = 500


class AsOf(BaseModel):
    """A moment on both timelines; either alone: the other is now (``known_at``) or the same
    moment (``valid_at``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    valid_at: datetime | None = Field(None, description="The world time asked about.")
    known_at: datetime | None = Field(None, description="What was known at this time.")


class CardSlice(BaseModel):
    """Which cards, every filter optional; an empty list filters nothing."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kinds: list[str] | None = Field(None, description="state, event, knowledge")
    memory_types: list[str] | None = Field(None, description="fact, preference, decision, ...")
    valid_from: datetime | None = Field(None, description="Cards valid at some time from here ...")
    valid_to: datetime | None = Field(None, description="... to here (exclusive).")
    recorded_after: datetime | None = Field(None, description="Recorded at or after.")
    recorded_before: datetime | None = Field(None, description="Recorded before.")
    occurred_after: datetime | None = Field(None, description="Events that occurred at or after.")
    occurred_before: datetime | None = Field(None, description="Events that occurred before.")
    recorded_during: str | None = Field(
        None, description="Recorded within a time expression: this month, 上個月, last week, in April.")
    occurred_during: str | None = Field(None, description="Events that occurred within one.")
    time_zone: str = Field("UTC", description="The zone of time expressions and of month_recorded.")
    scopes: list[str] | None = Field(None, description="personal, project, group, global")
    project_ids: list[str] | None = None
    group_ids: list[str] | None = None
    subjects: list[str] | None = Field(None, description="Cards of any of these subjects (exact).")
    subject_prefix: str | None = Field(
        None, description="Cards of this subject or of any subject below it: the prefix, then ':' "
        "and more (a namespace's segments are separated by ':'; 'a' never matches 'ab').")
    labels: list[str] | None = Field(None, description="State cards of any of these slot labels "
                                     "(normalised: 'Job Title' is job_title).")
    agent_ids: list[str] | None = None
    session_ids: list[str] | None = None
    sources: list[str] | None = Field(None, description="user_stated, agent_inferred, imported")
    confidence_below: float | None = Field(None, description="inference_confidence below this.")
    confidence_above: float | None = Field(None, description="inference_confidence above this.")
    related_to: UUID | None = Field(None, description="Cards linked to this card, either way.")
    edge: str | None = Field(None, description="The edge type of the link (alone: cards with one).")
    related_concept: str | None = Field(
        None, description="Cards linked to a knowledge card with this title or tag.")
    tags: list[str] | None = Field(None, description="Cards with any of these tags (normalised).")
    as_of: AsOf | None = None
    include_superseded: bool = Field(
        False, description="Every card, not only current ones (as_of already shows what held then).")
    group_by: str | None = Field(None, description="For counts: " + ", ".join(GROUP_KEYS))
    limit: int = Field(50, description=f"Cards per page, at most {MAX_LIMIT}.")
    cursor: str | None = Field(None, description="The next_cursor of the page before.")


class SlicedCard(CardRecord):
    """A card as a listing shows it: the read model's row, with its scope and provenance."""

    project_id: str | None
    group_id: str | None
    perspective: str | None
    inference_confidence: float | None
    agent_id: str | None
    session_id: str | None
    turn_id: str | None
    tags: list[str]


class CardPage(BaseModel):
    cards: list[SlicedCard]
    #: Pass it as ``cursor`` for the next page; None on the last.
    next_cursor: str | None
    #: Set when the listing passed ``min_position``: whether the read models included it.
    freshness: Freshness | None = None


class GroupCount(BaseModel):
    key: str | None
    count: int


class CardCounts(BaseModel):
    group_by: str | None
    counts: list[GroupCount]
    #: The cards the slice keeps (under ``group_by="tag"`` a card counts once per tag).
    total: int
    #: Set when the count passed ``min_position``: whether the read models included it.
    freshness: Freshness | None = None


def list_cards(read: ReadModels, tenant_id: str, slice: CardSlice,
               now: datetime | None = None) -> CardPage:
    """One page of the slice's cards, the latest recorded first."""
    filters, params = plan(slice, now or datetime.now(UTC))
    params["limit"] = slice.limit + 1
    query = listing(read.schema, filters, slice.as_of is not None, slice.include_superseded)
    with read.tenant(tenant_id) as conn:
        rows = conn.execute(query, params).fetchall()
    cards = [SlicedCard(**row) for row in rows[:slice.limit]]
    more = len(rows) > slice.limit
    return CardPage(cards=cards, next_cursor=encode_cursor(slice, cards[-1]) if more else None)


def count_cards(read: ReadModels, tenant_id: str, slice: CardSlice,
                now: datetime | None = None) -> CardCounts:
    """How many cards the slice keeps, per value of ``group_by`` (the cursor is ignored)."""
    filters, params = plan(slice.model_copy(update={"cursor": None}), now or datetime.now(UTC))
    query = counting(read.schema, filters, slice.as_of is not None, slice.include_superseded,
                     slice.group_by)
    with read.tenant(tenant_id) as conn:
        rows = conn.execute(query, params).fetchall()
    total = sum(row["n"] for row in rows if row["whole"])
    counts = [GroupCount(key=row["key"], count=row["n"]) for row in rows if not row["whole"]]
    return CardCounts(group_by=slice.group_by, counts=counts, total=total)


# ---- checking a slice and turning it into filters ----------------------------------------------

_CHOICES: dict[str, Any] = {"kinds": CardKind, "memory_types": MemoryType, "scopes": ScopeKind,
                            "sources": Source}
_LISTS = ("kinds", "memory_types", "scopes", "project_ids", "group_ids", "subjects", "labels",
          "agent_ids", "session_ids", "sources", "tags")
_RANGES = (("valid_from", "valid_to"), ("recorded_after", "recorded_before"),
           ("occurred_after", "occurred_before"))
_SCALARS = ("recorded_after", "recorded_before", "occurred_after", "occurred_before",
            "confidence_below", "confidence_above", "related_to", "related_concept", "subject_prefix")


def plan(slice: CardSlice, now: datetime) -> tuple[list[str], dict[str, Any]]:
    """The filters (names in :data:`projections.slicing_sql.FILTERS`) and parameters of a slice,
    checked: an unknown kind, type, scope, source, edge or grouping, a naive time, an empty range,
    a confidence outside 0–1, a limit outside 1–500 or a cursor of another slice is refused with
    an error naming the field."""
    check(slice)
    filters: list[str] = []
    params: dict[str, Any] = {"edge": slice.edge, "known_at": None, "time_zone": slice.time_zone}
    for name in _LISTS:
        values = getattr(slice, name)
        if values:
            filters.append(name)
            params[name] = ([normalise_tag(v) for v in values] if name == "tags" else
                            [normalise_label(v) for v in values] if name == "labels" else list(values))
    for name in _SCALARS:
        if getattr(slice, name) is not None:
            filters.append(name)
            params[name] = getattr(slice, name)
    _plan_times(slice, now, filters, params)
    if slice.related_concept is not None:
        params["concept_tag"] = normalise_tag(slice.related_concept)
    if slice.edge and slice.related_to is None and slice.related_concept is None:
        filters.append("edge")
    if slice.cursor is not None:
        filters.append("after")
        params["after_recorded_at"], params["after_card_id"] = decode_cursor(slice)
    return filters, params


def _plan_times(slice: CardSlice, now: datetime, filters: list[str], params: dict[str, Any]
                ) -> None:
    """The validity window, the time expressions (in the slice's zone) and the as-of moment."""
    if slice.valid_from or slice.valid_to:
        filters.append("valid")
        params.update(valid_from=slice.valid_from, valid_to=slice.valid_to)
    local = now.astimezone(_zone(slice.time_zone))
    for name in ("recorded_during", "occurred_during"):
        expression = getattr(slice, name)
        if expression is not None:
            span = _during(expression, local, name)
            filters.append(name)
            params[name.replace("during", "from")] = span.start
            params[name.replace("during", "until")] = span.end
    if slice.as_of is not None:
        known_at = slice.as_of.known_at or now
        params.update(valid_at=slice.as_of.valid_at or known_at, known_at=known_at)


def check(slice: CardSlice) -> None:
    check_fields(slice.model_dump(include={*_LISTS, "edge", "related_concept", "cursor", "subject_prefix",
                                           "group_by", "recorded_during", "occurred_during",
                                           "time_zone"}))
    for name, choices in _CHOICES.items():
        for i, value in enumerate(getattr(slice, name) or ()):
            _choose(choices, value, f"{name}[{i}]")
    if slice.edge is not None:
        _choose(Edge, slice.edge, "edge")
    if slice.group_by is not None and slice.group_by not in GROUP_KEYS:
        raise InvalidCommandError(f"group_by: unknown grouping {slice.group_by!r}; expected one of "
                                  + ", ".join(GROUP_KEYS))
    _check_times(slice)
    for name in ("confidence_below", "confidence_above"):
        value = getattr(slice, name)
        if value is not None and not 0 <= value <= 1:
            raise InvalidCommandError(f"{name}: {value} is no confidence; expected 0 to 1")
    if not 1 <= slice.limit <= MAX_LIMIT:
        raise InvalidCommandError(f"limit: {slice.limit}; expected 1 to {MAX_LIMIT}")
    if slice.subject_prefix is not None and not slice.subject_prefix.strip():
        raise InvalidCommandError("subject_prefix: blank; give a subject, or leave it out")
    if slice.related_concept is not None and not normalise_tag(slice.related_concept):
        raise InvalidCommandError("related_concept: names no concept")


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ValueError, KeyError):
        raise InvalidCommandError(f"time_zone: no time zone {name!r} (e.g. Asia/Taipei)") from None


def _during(expression: str, now: datetime, field: str) -> TimeRange:
    """A time expression's range against ``now``; refused (never guessed) naming the field."""
    try:
        return resolve(expression, now)
    except AmbiguousTimeError as error:
        error.args = (f"{field}: {error}",)
        raise
    except InvalidCommandError as error:
        raise InvalidCommandError(f"{field}: {error}") from None


def _choose(choices: Any, value: str, field: str) -> None:
    if value not in {member.value for member in choices}:
        expected = ", ".join(member.value for member in choices)
        raise InvalidKindError(f"{field}: unknown value {value!r}; expected one of {expected}")


def _check_times(slice: CardSlice) -> None:
    moments = {name: getattr(slice, name) for pair in _RANGES for name in pair}
    if slice.as_of is not None:
        moments.update({f"as_of.{k}": v for k, v in slice.as_of.model_dump().items()})
    for name, moment in moments.items():
        if moment is not None:
            check_aware(moment, name)
    for start, end in _RANGES:
        if moments[start] and moments[end] and moments[start] >= moments[end]:
            raise InvalidTimeError(f"{end}: {moments[end].isoformat()} is not after {start} "
                                   f"{moments[start].isoformat()}; the range holds nothing")
    if slice.as_of is not None and slice.as_of.valid_at is None and slice.as_of.known_at is None:
        raise InvalidTimeError("as_of: give valid_at, known_at or both")


# ---- the cursor: opaque, bound to its slice ----------------------------------------------------

def _fingerprint(slice: CardSlice) -> str:
    shape = slice.model_dump_json(exclude={"cursor", "limit", "group_by"})
    return hashlib.sha256(shape.encode()).hexdigest()[:16]


def encode_cursor(slice: CardSlice, last: CardRecord) -> str:
    """Where the page ending with ``last`` stops: keyset on (recorded_at, card_id)."""
    payload = [last.recorded_at.isoformat(), str(last.card_id), _fingerprint(slice)]
    return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")


def decode_cursor(slice: CardSlice) -> tuple[datetime, UUID]:
    text = slice.cursor or ""
    try:
        recorded_at, card_id, fingerprint = json.loads(
            base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        after = (check_aware(datetime.fromisoformat(recorded_at), "cursor"), UUID(card_id))
    except (ValueError, TypeError, AttributeError, InvalidTimeError):
        raise InvalidCommandError("cursor: not a cursor this query gave") from None
    if fingerprint != _fingerprint(slice):
        raise InvalidCommandError("cursor: it belongs to another slice (other filters)")
    return after
