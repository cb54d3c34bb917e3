"""The embedding cache on the embedded PostgreSQL (pgvector): hits skip the embedder, only misses are
computed, entries are a tenant's own (keyed by an HMAC under the tenant's key), the runtime role
can read and add entries but not change them, and the projector's role can delete them."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

import psycopg
import pytest
from psycopg import sql

from infra.embedders import (
    CACHE_TABLE,
    CachedEmbedder,
    CacheKeys,
    Embedder,
    EmbeddingError,
    OpenAIEmbedder,
    UniversalSentenceEmbedder,
    content_hash,
    create_embedder,
    ensure_cache_table,
)
from infra.keyring import MemoryKeyRing
from infra.postgres import Database, projector_database
from infra.settings import Settings
from tests.fakes.openai_server import FakeOpenAIServer
from tests.support import new_tenant

pytestmark = pytest.mark.integration

DIMENSIONS = 512  # the table's width: USE's, and what the fake server is asked for


class Counting(Embedder):
    """Passes through to ``inner`` and remembers every batch it was given."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.model = inner.model
        self.dimensions = inner.dimensions
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return self.inner.embed(texts)


@pytest.fixture(scope="module")
def cache_schema(admin_db: Database, pg_settings: Settings) -> str:
    with admin_db.connect(autocommit=True) as conn:
        ensure_cache_table(conn, pg_settings.event_schema, DIMENSIONS, grant_to=pg_settings.runtime_role)
        ensure_cache_table(conn, pg_settings.event_schema, DIMENSIONS, grant_to=[pg_settings.runtime_role])
    return pg_settings.event_schema


@pytest.fixture(scope="module")
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as running:
        yield running


@pytest.fixture
def counting(server: FakeOpenAIServer) -> Counting:
    server.reset()
    # A model id of its own per test: the table is shared by the whole session.
    inner = OpenAIEmbedder(model=f"fake-{new_tenant()}", dimensions=DIMENSIONS, base_url=server.base_url)
    return Counting(inner)


def texts(*words: str) -> list[str]:
    return [f"{word} {new_tenant()}" for word in words]  # fresh texts: no hit from another test


def test_second_embed_of_the_same_texts_makes_no_call(
    cache_schema: str, runtime_db: Database, counting: Counting, server: FakeOpenAIServer
) -> None:
    cached = CachedEmbedder(counting, runtime_db.connect, schema=cache_schema).for_tenant(new_tenant())
    batch = texts("Taipei", "Kyoto", "高雄")

    first = cached.embed(batch)
    assert counting.calls == [batch] and server.request_count == 1
    second = cached.embed(batch)
    assert counting.calls == [batch] and server.request_count == 1  # all hits
    assert second == first  # bit for bit: misses are returned as float32, as stored
    assert [len(v) for v in second] == [DIMENSIONS] * 3


def test_mixed_hits_and_misses_compute_only_the_misses(
    cache_schema: str, runtime_db: Database, counting: Counting
) -> None:
    cached = CachedEmbedder(counting, runtime_db.connect, schema=cache_schema).for_tenant(new_tenant())
    known_a, known_b, new_a, new_b = texts("known a", "known b", "new a", "new b")
    warm = cached.embed([known_a, known_b])

    mixed = cached.embed([new_a, known_a, new_b, new_a, known_b])
    assert counting.calls[1:] == [[new_a, new_b]]  # each missing text once, in first-seen order
    assert mixed[1] == warm[0] and mixed[4] == warm[1]
    assert mixed[0] == mixed[3]
    assert mixed == [cached.embed([t])[0] for t in [new_a, known_a, new_b, new_a, known_b]]
    assert len(counting.calls) == 2


def test_the_cache_stores_keyed_hashes_per_tenant_not_text(
    cache_schema: str, admin_db: Database, runtime_db: Database, counting: Counting
) -> None:
    secret = texts("my private address is 12 Secret Lane")[0]
    keys = CacheKeys(MemoryKeyRing(b"k" * 32))
    cache = CachedEmbedder(counting, runtime_db.connect, schema=cache_schema, keys=keys)
    mine, theirs = new_tenant(), new_tenant()
    assert cache.for_tenant(mine).embed([secret]) == cache.for_tenant(theirs).embed([secret])
    assert len(counting.calls) == 2, "another tenant's entry is never a hit"
    with admin_db.connect() as conn:
        rows = conn.execute(
            sql.SQL("SELECT tenant_id, model, content_hash, created_at, embedding::text FROM {} "
                    "WHERE model = %s ORDER BY tenant_id = %s DESC")
            .format(sql.Identifier(cache_schema, CACHE_TABLE)),
            (counting.model, mine),
        ).fetchall()
    assert [row[0] for row in rows] == [mine, theirs]
    tenant, model, digest, created_at, _ = rows[0]
    assert model == counting.model and bytes(digest) == keys.digest(mine, secret) and created_at
    assert bytes(digest) not in (content_hash(secret), bytes(rows[1][2])), "keyed, per tenant"
    assert "Secret Lane" not in repr(rows)
    with admin_db.connect() as conn:
        columns = conn.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
            (cache_schema, CACHE_TABLE),
        ).fetchall()
    assert columns == [
        ("tenant_id", "text"), ("model", "text"), ("content_hash", "bytea"),
        ("embedding", "USER-DEFINED"), ("created_at", "timestamp with time zone"),
    ]


def test_runtime_role_may_read_and_insert_but_not_change(
    cache_schema: str, runtime_db: Database, counting: Counting
) -> None:
    CachedEmbedder(counting, runtime_db.connect, schema=cache_schema).for_tenant(
        new_tenant()).embed(texts("entry"))
    table = sql.Identifier(cache_schema, CACHE_TABLE)
    with runtime_db.connect() as conn:
        assert conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()[0] >= 1  # type: ignore[index]
        for statement in ("UPDATE {} SET created_at = now()", "DELETE FROM {}", "TRUNCATE {}"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(sql.SQL(statement).format(table))
            conn.rollback()


def test_the_projector_role_deletes_what_an_erasure_forgets(
    cache_schema: str, admin_db: Database, pg_settings: Settings, counting: Counting
) -> None:
    connect = projector_database(admin_db, pg_settings).connect
    cache = CachedEmbedder(counting, connect, schema=cache_schema)
    tenant, (text,) = new_tenant(), texts("forgotten")
    cache.for_tenant(tenant).embed([text])
    cache.purge(tenant, [cache.keys.digest(tenant, text)])
    cache.for_tenant(tenant).embed([text])
    assert len(counting.calls) == 2, "purged: a miss again"


def test_racing_writers_of_the_same_text_both_succeed(
    cache_schema: str, runtime_db: Database, counting: Counting
) -> None:
    batch, tenant = texts("raced"), new_tenant()
    both_missed = threading.Barrier(2, timeout=10)

    class AfterBothMissed(Counting):
        def embed(self, texts: Sequence[str]) -> list[list[float]]:
            both_missed.wait()  # each writer has looked up and missed before either stores
            return super().embed(texts)

    racer = AfterBothMissed(counting.inner)
    results: list[list[list[float]]] = []
    errors: list[BaseException] = []

    def write() -> None:
        try:
            results.append(CachedEmbedder(racer, runtime_db.connect, schema=cache_schema)
                           .for_tenant(tenant).embed(batch))
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=write) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(racer.calls) == 2
    assert results[0] == results[1]  # the fake server is deterministic; the second INSERT did nothing
    assert CachedEmbedder(racer, runtime_db.connect, schema=cache_schema).for_tenant(
        tenant).embed(batch) == results[0]
    assert len(racer.calls) == 2


def test_the_real_use_model_through_the_cache(cache_schema: str, runtime_db: Database) -> None:
    use = Counting(UniversalSentenceEmbedder())
    cached = CachedEmbedder(use, runtime_db.connect, schema=cache_schema).for_tenant(new_tenant())
    batch = texts("我搬到了京都。", "I moved to Kyoto.")
    first = cached.embed(batch)
    assert cached.embed(batch) == first and len(use.calls) == 1


def test_create_embedder_wraps_in_the_cache(
    cache_schema: str, runtime_db: Database, pg_settings: Settings, server: FakeOpenAIServer
) -> None:
    server.reset()
    settings = pg_settings.model_copy(update={
        "embedder": "openai", "openai_base_url": server.base_url,
        "openai_embedding_model": f"fake-{new_tenant()}", "embedding_dimensions": DIMENSIONS,
    })
    embedder = create_embedder(settings, connect=runtime_db.connect)
    assert isinstance(embedder, CachedEmbedder)
    batch, tenant = texts("wired"), new_tenant()
    assert embedder.for_tenant(tenant).embed(batch) == embedder.for_tenant(tenant).embed(batch)
    assert server.request_count == 1
    assert embedder.embed(batch) and server.request_count == 2, "without a tenant: no cache"


def test_a_cache_of_another_width_is_refused(
    cache_schema: str, admin_db: Database, runtime_db: Database, server: FakeOpenAIServer
) -> None:
    with admin_db.connect(autocommit=True) as conn, pytest.raises(EmbeddingError, match="512-d"):
        ensure_cache_table(conn, cache_schema, 1536)
    wide = OpenAIEmbedder(model="fake-wide", dimensions=1536, base_url=server.base_url)
    with pytest.raises(EmbeddingError, match="512-d"):
        CachedEmbedder(wide, runtime_db.connect, schema=cache_schema).for_tenant("t").embed(["x"])


def test_a_missing_cache_table_is_a_clear_error(runtime_db: Database, counting: Counting) -> None:
    with pytest.raises(EmbeddingError, match="does not exist"):
        CachedEmbedder(counting, runtime_db.connect, schema="no_such_schema").for_tenant(
            "t").embed(["x"])
