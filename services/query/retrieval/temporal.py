"""Temporal route: the query's time expressions (上週三, 三天前, "last week", "since last month" …),
resolved against the query's reference time in its zone, become absolute ranges. Events that
occurred inside a range match, and so do states and knowledge whose validity began or ended inside
it: a fact that merely held throughout ("lives in Taipei" during last week) is no evidence about
that week. Events first, then the latest first; all of them up to ``temporal_limit``.

An ambiguous expression (最近, "recently") raises ``AmbiguousTimeError``: the route is skipped and
the reason lands in the diagnostics, so the caller can ask instead of guessing.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql

from services.query.retrieval.query import Hits, PlainRoute, RetrievalQuery, RouteContext, parameters

#: Events newest first straight from the occurred_at index, so a busy month costs no more than
#: the rows returned; states and knowledge only when the events leave room.
_EVENTS = """SELECT c.card_id FROM {s}.cards c
WHERE c.kind = 'event' AND ({ranges}) AND {visible}
ORDER BY c.occurred_at DESC, c.card_id LIMIT %(limit)s"""
_OCCURRED = "(c.occurred_at >= %(lo{i})s AND c.occurred_at < %(hi{i})s)"

#: How strongly a state whose validity began or ended in the range answers a question about that
#: time, next to an event that happened in it.
CHANGE_STRENGTH = 0.6

_CHANGES = """SELECT c.card_id FROM {s}.cards c
WHERE c.kind <> 'event' AND ({ranges}) AND {visible}
ORDER BY coalesce(c.occurred_at, c.valid_from) DESC, c.card_id LIMIT %(limit)s"""
_CHANGED = ("(c.valid_from >= %(lo{i})s AND c.valid_from < %(hi{i})s) "
            "OR (c.valid_to >= %(lo{i})s AND c.valid_to < %(hi{i})s)")


class TemporalRoute(PlainRoute):
    name = "temporal"

    def idle(self, query: RetrievalQuery, **extra: Any) -> str | None:
        return None if query.time_ranges else "no time expression"

    def __call__(self, conn: psycopg.Connection[Any], query: RetrievalQuery, ctx: RouteContext,
                 **extra: Any) -> Hits:
        if (reason := self.idle(query)) is not None:
            return Hits([], reason)
        ranges = query.time_ranges
        bounds = {f"{name}{i}": value for i, r in enumerate(ranges)
                  for name, value in (("lo", r.start), ("hi", r.end))}
        found: list[UUID] = []
        strengths: list[float] = []
        for (template, part), strength in zip(((_EVENTS, _OCCURRED), (_CHANGES, _CHANGED)),
                                              (1.0, CHANGE_STRENGTH), strict=True):
            room = ctx.settings.temporal_limit - len(found)
            if room <= 0:
                break
            statement = sql.SQL(template).format(
                s=ctx.s, visible=ctx.visible(query),
                ranges=sql.SQL(" OR ".join(part.format(i=i) for i in range(len(ranges)))))
            rows = conn.execute(statement, {**parameters(query), **bounds, "limit": room}).fetchall()
            found += [row["card_id"] for row in rows]
            strengths += [strength] * len(rows)
        note = "; ".join(f"{r.expression!r} → [{r.start.isoformat()}, {r.end.isoformat()})" for r in ranges)
        return Hits(found, note, strengths)
