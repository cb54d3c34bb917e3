"""Graph route: a 1-hop walk on ``card_relations`` (both directions) from the top
``graph_seeds`` cards the other routes fused — a state card also from its slot, which is what an
event ``affects``, and a slot reached stands for its cards. At most ``graph_neighbours`` visible
neighbours (a seed linked to another seed included: they support each other), ranked by their
best seed's rank, then the most recently linked.
It runs after the others, on its own ``graph_budget_ms`` statement timeout."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg import sql

from services.query.retrieval.query import (
    GENERIC_PLANS,
    Hits,
    PlainRoute,
    RetrievalQuery,
    RouteContext,
    parameters,
)

_SQL = """WITH seeds AS (SELECT * FROM unnest(%(seeds)s::uuid[]) WITH ORDINALITY AS s(id, rank)),
starts AS (  -- a state card stands for its slot too: events link to the slot they affect
    SELECT id, rank FROM seeds
    UNION ALL
    SELECT x.aggregate_id, s.rank FROM seeds s JOIN {s}.cards x ON x.card_id = s.id
    WHERE x.aggregate_id <> x.card_id),
linked AS (
    SELECT t.rank, r.dst_id AS node, r.recorded_at
    FROM starts t JOIN {s}.card_relations r ON r.src_id = t.id
    UNION ALL
    SELECT t.rank, r.src_id, r.recorded_at
    FROM starts t JOIN {s}.card_relations r ON r.dst_id = t.id),
reached AS (  -- a slot reached stands for its cards
    SELECT l.rank, l.recorded_at, x.card_id FROM linked l JOIN {s}.cards x ON x.card_id = l.node
    UNION ALL
    SELECT l.rank, l.recorded_at, x.card_id FROM linked l JOIN {s}.cards x ON x.aggregate_id = l.node
    WHERE x.aggregate_id <> x.card_id)
SELECT r.card_id, min(r.rank) AS seed_rank, max(r.recorded_at) AS linked_at
FROM reached r JOIN {s}.cards c ON c.card_id = r.card_id
WHERE {visible}
GROUP BY r.card_id ORDER BY seed_rank, linked_at DESC, r.card_id LIMIT %(limit)s"""


class GraphRoute(PlainRoute):
    name = "graph"

    def settings(self, ctx: RouteContext) -> Mapping[str, str]:
        return GENERIC_PLANS  # a walk from a few ids: the same plan fits every call

    def idle(self, query: RetrievalQuery, seeds: list[Any] | None = None, **extra: Any
             ) -> str | None:
        return None if seeds else "no seeds"

    def __call__(self, conn: psycopg.Connection[Any], query: RetrievalQuery, ctx: RouteContext,
                 seeds: list[Any] | None = None, **extra: Any) -> Hits:
        if not seeds:
            return Hits([], "no seeds")
        statement = sql.SQL(_SQL).format(s=ctx.s, visible=ctx.visible(query))
        rows = conn.execute(statement, {**parameters(query), "seeds": seeds,
                                        "limit": ctx.settings.graph_neighbours}).fetchall()
        return Hits([row["card_id"] for row in rows],
                    f"{len(seeds)} seeds, {len(rows)} neighbours")
