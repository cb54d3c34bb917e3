"""The answer of last resort: when no route found a card the question may see, the tenant's cards
nearest to it whatever their similarity — the semantic route without its floor — or, with no
embedder, the newest. The floor orders an answer; it never empties one while the tenant holds cards
in scope. Such an answer is marked ``match: "weak"``: nothing matched, these are the closest."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg import sql

from services.query.retrieval.query import Hits, PlainRoute, RetrievalQuery, RouteContext, parameters
from services.query.retrieval.semantic import SemanticRoute

_NEWEST = """SELECT c.card_id FROM {s}.cards c WHERE {visible}
ORDER BY c.recorded_at DESC, c.card_id LIMIT %(limit)s"""


class NearestRoute(PlainRoute):
    name = "nearest"

    def __init__(self, semantic: SemanticRoute | None) -> None:
        self.semantic = semantic

    def settings(self, ctx: RouteContext) -> Mapping[str, str]:
        return self.semantic.settings(ctx) if self.semantic is not None else {}

    def __call__(self, conn: psycopg.Connection[Any], query: RetrievalQuery, ctx: RouteContext,
                 **extra: Any) -> Hits:
        if self.semantic is not None:
            found = self.semantic(conn, query, ctx, below_floor=True)
            return Hits(found.ids, "below the semantic floor: the nearest cards", found.strengths)
        statement = sql.SQL(_NEWEST).format(s=ctx.s, visible=ctx.visible(query))
        rows = conn.execute(statement, {**parameters(query), "limit": ctx.settings.semantic_top_k})
        return Hits([row["card_id"] for row in rows], "no embedder: the newest cards")
