"""The embedding projection: a vector for every card whose content has none yet.

It is derived from the ``cards`` read model, not from events, so the cards projection never waits
on a model: a card the projector wrote is on the embedder's queue (``embedding_queue``: its id and
version, added in the card's own statement; a rebuild queues every card it copied), and the queue
is taken in batches — a card without a vector of the model, or whose version moved on since its
vector was made, is embedded, and its entry leaves the queue up to the version handled (a later
version queued meanwhile stays). Reading the queue costs what is on it, not what the tenant holds
(looking through the cards table for the cards without a vector took seconds at a million). A
card's text key (:class:`infra.embedders.CacheKeys`: a keyed hash under the tenant's key) tells
whether the text changed — if not, only the version is noted —, and
new texts are embedded through the ``Embedder`` port (cached per tenant by that key, so a rebuild
does not pay twice) and written tenant by tenant, as float32 arrays through pgvector's binary
adapter (:mod:`infra.vectors`). ``card_embeddings.content_hash`` is that key, so an erasure finds
the cache entries of the texts it forgets. A tombstone (``erased_at`` set) is never embedded; a
card erased while its vector was being made gets none, and its text's entry leaves the cache.
The vectors are written under the projector's per-tenant lock, taken shared
(:data:`LOCK_TENANTS`): an erasure's batch holds it from before its delete of the card's vectors
to its commit, so the embedder's insert either waits for that commit and then sees the tombstone,
or commits first and is deleted by it. Without it, an insert that read the card before the
erasure committed would write a vector the erasure's delete had not seen.

A projector that applied events says so on the schema's channel (a ``pg_notify`` committed with
its rows: :func:`projections.bookkeeping.channel`); :meth:`EmbeddingProjection.wait` wakes on it,
whichever projector process applied them, so the embedder neither reads the cards table again and
again nor makes a card wait for its next look.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from itertools import groupby
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from infra.embedders import CacheKeys, Embedder
from infra.vectors import VectorTypes
from projections.bookkeeping import channel
from projections.cards import NAME

log = logging.getLogger(__name__)

#: What is embedded: a knowledge card's title and body; a state card's slot with its value
#: ("user address: Kaohsiung" — the bare value "Kaohsiung" says nothing of what it is); else content.
EMBEDDED_TEXT = ("concat_ws(E'\\n', nullif(c.title, ''), CASE WHEN c.label IS NULL THEN c.content "
                 "ELSE concat(c.subject, ' ', translate(c.label, '_', ' '), ': ', c.content) END)")


#: The projector's per-tenant locks (:attr:`projections.bookkeeping.Bookkeeping.lock_tenants`),
#: shared, in the projector's order (by key), so that the two never wait on each other in a cycle.
LOCK_TENANTS = (
    "SELECT count(pg_advisory_xact_lock_shared(k)) FROM (SELECT DISTINCT "
    "hashtextextended(%s || '/' || t, 0) AS k FROM unnest(%s::text[]) AS t ORDER BY k) s")


class EmbeddingProjection:
    def __init__(self, connect: Callable[[], psycopg.Connection[Any]], schema: str,
                 embedder: Embedder, keys: CacheKeys | None = None) -> None:
        self.connect = connect
        self.channel = channel(schema)
        #: The projector's lock name (its projection and schema) whose tenants' locks it shares.
        self.lock_name = f"{NAME}/{schema}"
        self._listener: psycopg.Connection[Any] | None = None
        self.embedder = embedder
        #: The embedder's own keys when it is the cache (one key for the cache and the row).
        self.keys: CacheKeys = getattr(embedder, "keys", None) or keys or CacheKeys()
        self.vectors = VectorTypes()
        s = sql.Identifier(schema)
        #: The queue's next entries: the version queued, the card's, and its text when it lacks
        #: a current vector (NULL: nothing to embed, the entry just leaves the queue).
        self._pending = sql.SQL(
            "SELECT q.tenant_id, q.card_id, q.version, c.version, CASE WHEN c.erased_at IS NULL "
            "AND (e.card_id IS NULL OR e.version < c.version) THEN " + EMBEDDED_TEXT + " END, "
            "e.content_hash FROM {s}.embedding_queue q "
            "LEFT JOIN {s}.cards c ON c.tenant_id = q.tenant_id AND c.card_id = q.card_id "
            "LEFT JOIN {s}.card_embeddings e ON e.tenant_id = q.tenant_id "
            "AND e.card_id = q.card_id AND e.model = %s ORDER BY q.tenant_id LIMIT %s").format(s=s)
        self._done = sql.SQL(
            "DELETE FROM {}.embedding_queue WHERE tenant_id = %s AND card_id = %s "
            "AND version <= %s").format(s)
        self._upsert = sql.SQL(
            "INSERT INTO {s}.card_embeddings (tenant_id, card_id, model, content_hash, embedding, "
            "version) SELECT c.tenant_id, c.card_id, %s, %s, %s, %s FROM {s}.cards c "
            "WHERE c.tenant_id = %s AND c.card_id = %s AND c.erased_at IS NULL "
            "ON CONFLICT (tenant_id, card_id) DO UPDATE SET model = excluded.model, "
            "content_hash = excluded.content_hash, embedding = excluded.embedding, "
            "version = excluded.version RETURNING card_id").format(s=s)
        self._seen = sql.SQL(
            "UPDATE {}.card_embeddings SET version = greatest(version, %s) "
            "WHERE tenant_id = %s AND card_id = %s AND model = %s").format(s)

    def embed_pending(self, limit: int = 256) -> int:
        """Take up to ``limit`` entries of the queue, embedding the cards among them that lack a
        current vector; returns how many entries were taken."""
        with self.connect() as conn:
            taken = conn.execute(self._pending, (self.embedder.model, limit)).fetchall()
            if not taken:
                return 0
            rows = [row for row in taken if row[4] is not None]
            digests: list[bytes] = []
            for tenant_id, group in groupby(rows, key=lambda row: row[0]):
                digests += self.keys.digests(tenant_id, [row[4] for row in group])
            same = [bytes(row[5] or b"") == digest for row, digest in zip(rows, digests, strict=True)]
            fresh = [(row[0], digest, row[4]) for row, digest, kept
                     in zip(rows, digests, same, strict=True) if not kept]
            vectors = iter(np.asarray(self._embed(fresh), dtype=np.float32))
            found = {(row[0], row[1]): (digest, kept)
                     for row, digest, kept in zip(rows, digests, same, strict=True)}
            self.vectors.register(conn)
            gone: dict[str, list[bytes]] = {}
            with conn.transaction():
                conn.execute(LOCK_TENANTS, (self.lock_name, sorted({row[0] for row in taken})))
                for tenant_id, group in groupby(taken, key=lambda row: row[0]):
                    conn.execute("SELECT set_config('palimpsest.tenant', %s, true)", (tenant_id,))
                    for _, card_id, queued, version, _, _ in group:
                        digest, kept = found.get((tenant_id, card_id), (b"", None))
                        if kept:
                            conn.execute(self._seen, (version, tenant_id, card_id,
                                                      self.embedder.model))
                        elif kept is not None and conn.execute(self._upsert, (
                                self.embedder.model, digest, next(vectors), version, tenant_id,
                                card_id)).fetchone() is None:  # erased meanwhile
                            gone.setdefault(tenant_id, []).append(digest)
                        conn.execute(self._done, (tenant_id, card_id, queued))
                self.written(conn)
        self._purge(gone)
        return len(taken)

    def written(self, conn: psycopg.Connection[Any]) -> None:
        """Called with the vectors written and not yet committed: nothing here; a test makes an
        erasure race the commit through it."""

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a projector to say it applied cards: True when one
        did (or the channel cannot be listened to: then look anyway)."""
        try:
            if self._listener is None or self._listener.closed:
                self._listener = self.connect()
                self._listener.autocommit = True
                self._listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
            return any(True for _ in self._listener.notifies(timeout=timeout, stop_after=1))
        except psycopg.Error as error:
            log.debug("cannot listen on %s: %s", self.channel, type(error).__name__)
            self.close()
            return True

    def close(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()

    def _embed(self, items: list[tuple[str, bytes, str]]) -> list[list[float]]:
        """Vectors of ``(tenant, key, text)``: through the cache's keys when it is one."""
        if not items:
            return []
        keyed = getattr(self.embedder, "embed_keyed", None)
        if keyed is not None:
            return keyed(items)  # type: ignore[no-any-return]
        return self.embedder.embed([text for _, _, text in items])

    def _purge(self, gone: dict[str, list[bytes]]) -> None:
        """The cache entries of texts whose cards were erased while they were embedded."""
        purge = getattr(self.embedder, "purge", None)
        if purge is not None:
            for tenant_id, digests in gone.items():
                purge(tenant_id, digests)

    def embed_all(self, batch: int = 256, progress: Callable[[int], None] | None = None) -> int:
        total = 0
        while count := self.embed_pending(batch):
            total += count
            if progress:
                progress(total)
        return total
