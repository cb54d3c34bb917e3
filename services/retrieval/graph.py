"""Graph route: a 1-hop walk on ``card_relations`` (both directions) from the top
``graph_seeds`` cards the other routes fused, at most ``graph_neighbours`` visible neighbours,
ranked by their best seed's rank, then the most recently linked. It runs after the others, on
its own ``graph_budget_ms`` statement timeout."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from services.retrieval.query import Hits, RetrievalQuery, RouteContext, parameters

_SQL = """WITH seeds AS (SELECT * FROM unnest(%(seeds)s::uuid[]) WITH ORDINALITY AS s(id, rank)),
linked AS (
    SELECT s.rank, r.dst_id AS card_id, r.edge, r.recorded_at
    FROM seeds s JOIN {s}.card_relations r ON r.src_id = s.id
    UNION ALL
    SELECT s.rank, r.src_id, r.edge, r.recorded_at
    FROM seeds s JOIN {s}.card_relations r ON r.dst_id = s.id)
SELECT card_id, min(rank) AS seed_rank, max(recorded_at) AS linked_at,
       string_agg(DISTINCT edge, ',') AS edges
FROM linked WHERE card_id IN ({visible})
GROUP BY card_id ORDER BY seed_rank, linked_at DESC, card_id LIMIT %(limit)s"""


class GraphRoute:
    name = "graph"

    def __call__(self, conn: psycopg.Connection[Any], query: RetrievalQuery, ctx: RouteContext,
                 seeds: list[Any] | None = None) -> Hits:
        if not seeds:
            return Hits([], "no seeds")
        statement = sql.SQL(_SQL).format(s=ctx.s, visible=ctx.visible(query))
        rows = conn.execute(statement, {**parameters(query), "seeds": seeds,
                                        "limit": ctx.settings.graph_neighbours}).fetchall()
        return Hits([row["card_id"] for row in rows],
                    f"{len(seeds)} seeds, {len(rows)} neighbours")
