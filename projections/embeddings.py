"""The embedding projection: a vector for every card whose content has none yet.

It is derived from the ``cards`` read model, not from events, so the cards projection never waits
on a model: new or changed content (its hash differs from the embedded one) is picked up in
batches, embedded through the ``Embedder`` port (cached by model and content hash, so a rebuild
does not pay twice) and written tenant by tenant, as float32 arrays through pgvector's binary
adapter (:mod:`infra.vectors`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from itertools import groupby
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from infra.embedders import Embedder, content_hash
from infra.vectors import VectorTypes

log = logging.getLogger(__name__)

#: What is embedded: a knowledge card's title and body; a state card's slot with its value
#: ("user address: Kaohsiung" — the bare value "Kaohsiung" says nothing of what it is); else content.
EMBEDDED_TEXT = ("concat_ws(E'\\n', nullif(c.title, ''), CASE WHEN c.label IS NULL THEN c.content "
                 "ELSE concat(c.subject, ' ', translate(c.label, '_', ' '), ': ', c.content) END)")


class EmbeddingProjection:
    def __init__(self, connect: Callable[[], psycopg.Connection[Any]], schema: str,
                 embedder: Embedder) -> None:
        self.connect = connect
        self.embedder = embedder
        self.vectors = VectorTypes()
        s = sql.Identifier(schema)
        self._pending = sql.SQL(
            "SELECT c.tenant_id, c.card_id, " + EMBEDDED_TEXT + " AS text FROM {s}.cards c "
            "LEFT JOIN {s}.card_embeddings e ON e.tenant_id = c.tenant_id AND e.card_id = c.card_id "
            "AND e.model = %s WHERE e.card_id IS NULL OR e.content_hash <> "
            "sha256(convert_to(" + EMBEDDED_TEXT + ", 'UTF8')) "
            "ORDER BY c.tenant_id LIMIT %s").format(s=s)
        self._upsert = sql.SQL(
            "INSERT INTO {}.card_embeddings (tenant_id, card_id, model, content_hash, embedding) "
            "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (tenant_id, card_id) DO UPDATE SET "
            "model = excluded.model, content_hash = excluded.content_hash, "
            "embedding = excluded.embedding").format(s)

    def embed_pending(self, limit: int = 256) -> int:
        """Embed up to ``limit`` cards lacking a current vector; returns how many."""
        with self.connect() as conn:
            rows = conn.execute(self._pending, (self.embedder.model, limit)).fetchall()
            if not rows:
                return 0
            texts = [text for _, _, text in rows]
            vectors = np.asarray(self.embedder.embed(texts), dtype=np.float32)
            self.vectors.register(conn)
            with conn.transaction():
                for tenant_id, group in groupby(zip(rows, texts, vectors, strict=True),
                                                key=lambda item: item[0][0]):
                    conn.execute("SELECT set_config('palimpsest.tenant', %s, true)", (tenant_id,))
                    for (_, card_id, _), text, vector in group:
                        conn.execute(self._upsert, (tenant_id, card_id, self.embedder.model,
                                                    content_hash(text), vector))
        return len(rows)

    def embed_all(self, batch: int = 256, progress: Callable[[int], None] | None = None) -> int:
        total = 0
        while count := self.embed_pending(batch):
            total += count
            if progress:
                progress(total)
        return total

