"""Semantic route: pgvector cosine distance over card embeddings, top ``semantic_top_k``.

The tenant's nearest ``semantic_candidates`` vectors are read first (through the HNSW index where
there is one, an exact scan otherwise), then the scope and time filter keeps the best
``semantic_top_k`` of them at least ``semantic_min_similarity`` alike. Only vectors of the
configured embedding model are compared.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import psycopg
from psycopg import sql

from infra.embedders import Embedder
from infra.settings import RetrievalSettings
from services.retrieval.query import Hits, PlainRoute, RetrievalQuery, RouteContext, parameters

_SQL = """WITH nearest AS MATERIALIZED (
    SELECT e.card_id, e.embedding <=> %(vector)s::vector AS distance
    FROM {s}.card_embeddings e WHERE e.model = %(model)s
    ORDER BY distance LIMIT %(candidates)s)
SELECT n.card_id FROM nearest n JOIN {s}.cards c ON c.card_id = n.card_id
WHERE n.distance <= 1 - %(min_similarity)s AND {visible}
ORDER BY n.distance, n.card_id LIMIT %(limit)s"""


def candidates(settings: RetrievalSettings) -> int:
    """How many nearest vectors are read before the filter."""
    return min(max(settings.semantic_candidates, settings.semantic_top_k), 1_000)


class SemanticRoute(PlainRoute):
    name = "semantic"

    def __init__(self, embedder: Embedder, cache_size: int = 1_024) -> None:
        self.embedder = embedder
        self.vector = lru_cache(maxsize=cache_size)(self._vector)

    def _vector(self, text: str) -> str:
        (vector,) = self.embedder.embed([text])
        return "[" + ",".join(map(repr, vector)) + "]"

    def settings(self, ctx: RouteContext) -> Mapping[str, str]:
        # the index is shared by every tenant and model: keep scanning until enough pass the filter
        return {"hnsw.ef_search": str(candidates(ctx.settings)), "hnsw.iterative_scan": "relaxed_order"}

    def __call__(self, conn: psycopg.Connection[Any], query: RetrievalQuery, ctx: RouteContext) -> Hits:
        settings = ctx.settings
        statement = sql.SQL(_SQL).format(s=ctx.s, visible=ctx.visible(query))
        rows = conn.execute(statement, {
            **parameters(query), "vector": self.vector(query.text), "model": self.embedder.model,
            "candidates": candidates(settings), "limit": settings.semantic_top_k,
            "min_similarity": settings.semantic_min_similarity}).fetchall()
        return Hits([row["card_id"] for row in rows])
