"""Semantic route: pgvector cosine distance over card embeddings, top ``semantic_top_k``.

The tenant's nearest ``semantic_candidates`` vectors are read first (through the vector index where
there is one — IVFFlat, ``semantic_probes`` of its lists; ``projections.vector_index`` — an exact
scan otherwise), then the scope and time filter keeps the best
``semantic_top_k`` of them at least the model's floor alike (``semantic_floor``: measured per model
on ``palimpsest bench aging``). A hit's strength is its similarity over the model's
``semantic_full`` (a similarity that means "about the same thing"), at most 1. Only vectors of the
configured embedding model are compared. The question's vector goes as pgvector's text literal
with a cast: a query's cost is the same either way (decision 0009), and the route then runs on any
connection it is handed, with no adapter to register on the query side's pool.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from functools import lru_cache
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from infra.embedders import Embedder
from infra.settings import RetrievalSettings
from services.query.retrieval.query import Hits, PlainRoute, RetrievalQuery, RouteContext, parameters

#: (floor, full) cosine similarity per embedding model, measured on ``palimpsest bench aging``
#: (docs/benchmarks.md): below the floor a neighbour is no match; at ``full`` a hit counts fully.
MODEL_CALIBRATION: dict[str, tuple[float, float]] = {
    "use-multilingual-v3": (0.1, 0.5),
}
#: A model nobody has measured here: the floor that suits sentence encoders whose unrelated
#: texts score near 0 (measure yours with ``palimpsest bench aging`` and set both).
UNMEASURED = (0.2, 0.6)

_SQL = """WITH nearest AS MATERIALIZED (
    SELECT e.card_id, e.embedding <=> %(vector)s::vector AS distance
    FROM {s}.card_embeddings e WHERE e.model = %(model)s
    ORDER BY distance LIMIT %(candidates)s)
SELECT n.card_id, 1 - n.distance AS similarity FROM nearest n JOIN {s}.cards c ON c.card_id = n.card_id
WHERE n.distance <= 1 - %(min_similarity)s AND {visible}
ORDER BY n.distance, n.card_id LIMIT %(limit)s"""


def semantic_calibration(settings: RetrievalSettings, model: str) -> tuple[float, float]:
    """(floor, full) similarity for ``model``: the settings' when set, else the model's measured
    defaults (:data:`MODEL_CALIBRATION`), else those of an unmeasured model."""
    measured = MODEL_CALIBRATION.get(model, UNMEASURED)
    floor = settings.semantic_min_similarity
    full = settings.semantic_full_similarity
    return (measured[0] if floor is None else floor), (measured[1] if full is None else full)


def candidates(settings: RetrievalSettings) -> int:
    """How many nearest vectors are read before the filter."""
    return min(max(settings.semantic_candidates, settings.semantic_top_k), 1_000)


class OnceEach:
    """A bounded cache of ``compute(key)`` that computes each key once even when several threads
    ask at the same moment (the semantic route and the slot stage both want the question's
    embedding): the later askers wait for the first one's answer."""

    def __init__(self, compute: Callable[[str], Any], size: int = 1_024) -> None:
        self.compute = compute
        self.size = size
        self._done: OrderedDict[str, Any] = OrderedDict()
        self._pending: dict[str, Future[Any]] = {}
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._done.clear()

    def __call__(self, key: str) -> Any:
        with self._lock:
            if key in self._done:
                self._done.move_to_end(key)
                return self._done[key]
            future = self._pending.get(key)
            owner = future is None
            if future is None:
                future = self._pending[key] = Future()
        if not owner:
            return future.result()
        try:
            value = self.compute(key)
        except BaseException as exc:
            future.set_exception(exc)
            raise
        finally:
            with self._lock:
                self._pending.pop(key, None)
        with self._lock:
            self._done[key] = value
            while len(self._done) > self.size:
                self._done.popitem(last=False)
        future.set_result(value)
        return value


class SemanticRoute(PlainRoute):
    name = "semantic"

    def __init__(self, embedder: Embedder, cache_size: int = 1_024) -> None:
        self.embedder = embedder
        self.array = OnceEach(self._array, cache_size)
        self.vector = lru_cache(maxsize=cache_size)(self._vector)

    def forget(self) -> None:
        """Empty the question embeddings cache (benchmarks: what a new question pays)."""
        self.array.clear()
        self.vector.cache_clear()

    def _array(self, text: str) -> np.ndarray:
        """``text``'s embedding, unit length (what the slots compare labels with)."""
        (vector,) = self.embedder.embed([text])
        array = np.asarray(vector, dtype=np.float32)
        norm = float(np.linalg.norm(array))
        return array / norm if norm else array

    def _vector(self, text: str) -> str:
        return "[" + ",".join(map(repr, self.array(text).tolist())) + "]"

    def settings(self, ctx: RouteContext) -> Mapping[str, str]:
        # the index is shared by every tenant and model: keep scanning until enough pass the filter
        return {"ivfflat.probes": str(ctx.settings.semantic_probes),
                "ivfflat.iterative_scan": "relaxed_order",
                "hnsw.ef_search": str(candidates(ctx.settings)), "hnsw.iterative_scan": "relaxed_order"}

    def __call__(self, conn: psycopg.Connection[Any], query: RetrievalQuery, ctx: RouteContext,
                 *, below_floor: bool = False, **extra: Any) -> Hits:
        """The nearest cards at least the model's floor alike; ``below_floor``: the nearest
        whatever their similarity (what :class:`NearestRoute` answers with)."""
        settings = ctx.settings
        statement = sql.SQL(_SQL).format(s=ctx.s, visible=ctx.visible(query))
        floor, full = semantic_calibration(settings, self.embedder.model)
        rows = conn.execute(statement, {
            **parameters(query), "vector": self.vector(query.text), "model": self.embedder.model,
            "candidates": candidates(settings), "limit": settings.semantic_top_k,
            "min_similarity": -1.0 if below_floor else floor}).fetchall()
        return Hits([row["card_id"] for row in rows],
                    strengths=[min(1.0, max(row["similarity"], 0.0) / full) for row in rows])
