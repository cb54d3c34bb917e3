"""What a retrieval asks, and the one SQL predicate every route applies: tenant (row-level
security), scope, and the bi-temporal window (``projections.predicates``: current, or seen as of
``valid_at`` / ``known_at``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any, Protocol
from uuid import UUID

import psycopg
from psycopg import sql

from domain.errors import InvalidCommandError
from domain.rules.validation import check_fields
from infra.settings import RetrievalSettings
from projections import predicates
from services.query.retrieval.scoring import Ranking
from services.query.timeexpr import TimeRange, find_ranges, without_times

MAX_QUERY_CHARS = 2_000


@dataclass(frozen=True)
class RetrievalQuery:
    """``now`` is the clock of the question; relative time words resolve against it (against
    ``valid_at`` when the query is as-of)."""

    text: str
    now: datetime
    project_id: str | None = None
    group_ids: tuple[str, ...] = ()
    include_global: bool = False
    valid_at: datetime | None = None
    known_at: datetime | None = None
    explain: bool = False
    top_n: int | None = None
    #: Narrowing: only cards of these subjects, of this subject or below it (``a:…``), written by
    #: these agents, in these sessions (each empty: no narrowing on it).
    subjects: tuple[str, ...] = ()
    subject_prefix: str | None = None
    agent_ids: tuple[str, ...] = ()
    session_ids: tuple[str, ...] = ()
    #: The caller's own write position (a read's ``min_position``): what the read path keeps per
    #: tenant from before the read models held it is read again.
    fresh_from: int | None = None

    def __post_init__(self) -> None:
        # the command boundary's text hygiene (InvalidTextError naming the field): a NUL byte or a
        # lone surrogate would otherwise fail inside a route's SQL, as a database error
        check_fields({"text": self.text, "project_id": self.project_id, "group_ids": self.group_ids,
                      "subjects": self.subjects, "subject_prefix": self.subject_prefix,
                      "agent_ids": self.agent_ids, "session_ids": self.session_ids})
        if not self.text.strip():
            raise InvalidCommandError("the query is empty")
        if len(self.text) > MAX_QUERY_CHARS:
            raise InvalidCommandError(f"the query is longer than {MAX_QUERY_CHARS} characters")
        for name in ("now", "valid_at", "known_at"):
            value = getattr(self, name)
            if value is not None and value.utcoffset() is None:
                raise InvalidCommandError(f"{name} must carry a time zone")
        if self.known_at is not None and self.known_at > self.now:
            raise InvalidCommandError("known_at lies after now: nothing is known about the future yet")
        if self.top_n is not None and self.top_n < 1:
            raise InvalidCommandError("top_n must be at least 1")

    @property
    def narrowing(self) -> tuple[str, ...]:
        """The narrowing filters the query sets, by name (``projections.predicates.NARROWING``)."""
        return tuple(name for name in predicates.NARROWING if getattr(self, name))

    def keeps(self, subject: str | None, agent_id: str | None, session_id: str | None) -> bool:
        """Whether a card with this subject and provenance passes the narrowing (in Python, for
        writes the read models do not hold yet)."""
        prefix = self.subject_prefix
        return ((not self.subjects or subject in self.subjects)
                and (prefix is None or subject == prefix
                     or (subject or "").startswith(prefix + ":"))
                and (not self.agent_ids or agent_id in self.agent_ids)
                and (not self.session_ids or session_id in self.session_ids))

    @property
    def as_of(self) -> bool:
        return self.valid_at is not None or self.known_at is not None

    @property
    def window(self) -> tuple[datetime, datetime]:
        """(valid_at, known_at). Current: (now, now). As-of with only ``known_at``: valid then too;
        with only ``valid_at``: as we know it now."""
        if not self.as_of:
            return self.now, self.now
        valid = self.valid_at or self.known_at
        assert valid is not None
        return valid, self.known_at or self.now

    @cached_property
    def time_ranges(self) -> list[TimeRange]:
        """The ranges the text names, against the reference time (raises AmbiguousTimeError);
        found once per query, whichever route or step asks."""
        return find_ranges(self.text, self.reference_time)

    @cached_property
    def words(self) -> str:
        """The text with its time expressions cut out: what the word-matching routes match."""
        return without_times(self.text, self.reference_time)

    @property
    def reference_time(self) -> datetime:
        """What "yesterday" and the decay count from: the as-of moment, else now."""
        return self.window[0] if self.as_of else self.now


def visible(query: RetrievalQuery, schema: str) -> sql.Composable:
    """A condition on the card ``c`` (a row of ``cards``): may the query see it? Its parameters
    come from :func:`parameters`. Checked row by row, so a route that has found 20 cards checks 20.
    The predicates are the read models' own (``projections.predicates``), and the query's
    narrowing."""
    seen = predicates.visible(schema, query.as_of)
    return seen + predicates.narrowed("c", query.narrowing) if query.narrowing else seen


def scope_of(alias: str) -> sql.SQL:
    """The scope half of :func:`visible`, on any row with the card's scope columns."""
    return predicates.scope_of(alias)


def parameters(query: RetrievalQuery) -> dict[str, Any]:
    valid_at, known_at = query.window
    return {"project_id": query.project_id, "group_ids": list(query.group_ids),
            "include_global": query.include_global, "valid_at": valid_at, "known_at": known_at,
            "subjects": list(query.subjects), "subject_prefix": query.subject_prefix,
            "agent_ids": list(query.agent_ids), "session_ids": list(query.session_ids)}


@dataclass(frozen=True)
class RouteContext:
    """What every route is handed besides the query: the read schema and the settings."""

    schema: str
    settings: RetrievalSettings

    def visible(self, query: RetrievalQuery) -> sql.Composable:
        return visible(query, self.schema)

    @property
    def s(self) -> sql.Identifier:
        return sql.Identifier(self.schema)


@dataclass(frozen=True)
class Hits:
    """A route's answer: card ids best first, how strongly each was found (in (0, 1]; None: all
    alike), and what the route wants the diagnostics to say."""

    ids: list[UUID]
    note: str | None = None
    strengths: list[float] | None = None

    def ranking(self) -> Ranking:
        return Ranking(self.ids, self.strengths)


#: For statements whose best plan does not depend on the values they are given (a walk from a few
#: ids, a load by id): psycopg prepares a statement a connection runs often, and the server then
#: keeps one plan for it instead of planning every call, which for a list of ids costs more than
#: running it. The routes that search (words, ranges, a vector) keep a plan per call.
GENERIC_PLANS = {"plan_cache_mode": "force_generic_plan"}


class Route(Protocol):
    name: str

    def settings(self, ctx: RouteContext) -> Mapping[str, str]:
        """Server settings for the route's transaction (``SET LOCAL``), set with the tenant in
        one statement."""

    def idle(self, query: RetrievalQuery, **extra: Any) -> str | None:
        """Why the route has nothing to look up for ``query`` (it then takes no connection and
        runs no statement), or None."""

    def __call__(self, conn: psycopg.Connection[Any], query: RetrievalQuery,
                 ctx: RouteContext, **extra: Any) -> Hits: ...


class PlainRoute:
    """A route's defaults: no server settings of its own, and always something to look up."""

    def settings(self, ctx: RouteContext) -> Mapping[str, str]:
        return {}

    def idle(self, query: RetrievalQuery, **extra: Any) -> str | None:
        return None


def shared_count(column: str, prefix: str, values: list[str]) -> tuple[sql.Composable, dict[str, str]]:
    """How many of ``values`` the card's text[] ``column`` holds, as one sum of ``@>`` checks:
    array containment runs in C, where ``INTERSECT`` would run a subquery per row."""
    names = {f"{prefix}{i}": value for i, value in enumerate(values)}
    if not names:
        return sql.SQL("0"), {}
    checks = [sql.SQL("({} @> ARRAY[{}]::text[])::int").format(sql.SQL(column), sql.Placeholder(name))
              for name in names]
    return sql.SQL("(") + sql.SQL(" + ").join(checks) + sql.SQL(")"), names
