"""The embedding projection on the embedded PostgreSQL: several projector processes share the read
models, and one of them at a time embeds (the lease), another taking over when it stops."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from psycopg import sql

from infra.embedders import Embedder
from infra.postgres import Database
from infra.settings import Settings
from projections.embeddings import EmbeddingProjection
from projections.replay import catch_up, make_projector, rebuild
from projections.worker import embedding_lease, embedding_loop
from services.command.memory import Palimpsest
from services.factory import create_app
from tests.support import new_tenant, state

pytestmark = pytest.mark.integration

SCHEMA = "palimpsest_read_lease"


class Recording(Embedder):
    """Stands in for an embedding service: the same vector for every text, every call kept."""

    def __init__(self, model: str, seconds: float = 0.0) -> None:
        self.model = model
        self.dimensions = 512
        self.seconds = seconds
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        time.sleep(self.seconds)  # a slow service: the other process starts while cards wait
        return [[1.0] + [0.0] * 511 for _ in texts]


@pytest.fixture
def app(pg_settings: Settings) -> Iterator[Palimpsest]:
    made = create_app(pg_settings)
    yield made
    made.close()


def wait_until(done: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError("not done in time")
        time.sleep(0.05)


def unembedded(admin_db: Database, model: str) -> int:
    with admin_db.connect() as conn:
        row = conn.execute(sql.SQL(
            "SELECT count(*) FROM {s}.cards c LEFT JOIN {s}.card_embeddings e USING (tenant_id, "
            "card_id) WHERE e.model IS DISTINCT FROM %s AND c.erased_at IS NULL").format(
            s=sql.Identifier(SCHEMA)),
            (model,)).fetchone()
    return int(row[0]) if row else -1


def test_one_process_embeds_while_another_stands_by_then_takes_over(
        pg_settings: Settings, admin_db: Database, app: Palimpsest,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="projections.worker")
    tenant = new_tenant()
    for city in ("Taipei", "Kyoto"):
        app.remember(tenant, state("address", city))
    rebuild(pg_settings, app, into=SCHEMA, workers=1)  # a schema of its own: no other test's cards
    settings = pg_settings.model_copy(update={"read_schema": SCHEMA})
    model = f"fake-{tenant}"
    first, second = Recording(model, seconds=0.5), Recording(model)
    connect: Any = admin_db.connect  # a database reachable by both, as the projectors share one
    stops = [threading.Event(), threading.Event()]
    loops = [threading.Thread(target=embedding_loop, daemon=True, kwargs={
        "projection": EmbeddingProjection(connect, SCHEMA, embedder), "stop": stop, "idle": 0.05,
        "lease": embedding_lease(settings, admin_db)}) for embedder, stop in zip(
        (first, second), stops, strict=True)]
    try:
        loops[0].start()
        wait_until(lambda: bool(first.calls))  # the first to try holds the lease
        loops[1].start()
        wait_until(lambda: unembedded(admin_db, model) == 0)
        time.sleep(0.5)  # time enough for the second to embed, would it not stand by
        assert first.calls and not second.calls, "only the lease holder embeds"
        assert "held by another process: standing by" in caplog.text

        stops[0].set()  # the holder stops: its connection, and with it the lease, go
        loops[0].join(timeout=10)
        app.remember(tenant, state("address", "Osaka"))
        projector = make_projector(settings, app, SCHEMA, admin_db)
        try:
            catch_up(projector, app)
        finally:
            projector.close()
        wait_until(lambda: unembedded(admin_db, model) == 0)
        assert any("Osaka" in text for batch in second.calls for text in batch), "taken over"
    finally:
        for stop in stops:
            stop.set()
        for loop in loops:
            loop.join(timeout=10)


def test_the_embedder_wakes_when_a_projector_applies_cards_and_embeds_them_together(
        pg_settings: Settings, admin_db: Database, app: Palimpsest) -> None:
    tenant = new_tenant()
    app.remember(tenant, state("address", "Taipei"))
    rebuild(pg_settings, app, into=SCHEMA, workers=1)
    settings = pg_settings.model_copy(update={"read_schema": SCHEMA})
    model = f"fake-{tenant}"
    recording = Recording(model)
    connect: Any = admin_db.connect
    stop = threading.Event()
    loop = threading.Thread(target=embedding_loop, daemon=True, kwargs={
        "projection": EmbeddingProjection(connect, SCHEMA, recording), "stop": stop,
        "idle": 10.0, "window": 1.0})  # no look without a word from a projector
    projector = make_projector(settings, app, SCHEMA, admin_db)
    try:
        loop.start()
        wait_until(lambda: unembedded(admin_db, model) == 0)
        time.sleep(0.3)  # it is listening now
        for skill in ("Rust", "Go", "Zig"):  # three writes, applied in three batches
            app.remember(tenant, state("skills", skill))
            catch_up(projector, app)
        wait_until(lambda: unembedded(admin_db, model) == 0, timeout=10)
        (batch,) = [" ".join(texts) for texts in recording.calls if any("Rust" in t for t in texts)]
        assert "Go" in batch and "Zig" in batch, "the writes within the window are embedded together"
    finally:
        stop.set()
        projector.close()


def queued(admin_db: Database, tenant: str) -> dict[str, int]:
    with admin_db.connect() as conn:
        rows = conn.execute(sql.SQL("SELECT card_id::text, version FROM {}.embedding_queue "
                                    "WHERE tenant_id = %s").format(sql.Identifier(SCHEMA)), (tenant,))
        return dict(rows.fetchall())


def test_the_queue_holds_what_is_to_embed_and_a_later_version_stays_on_it(
        pg_settings: Settings, admin_db: Database, app: Palimpsest) -> None:
    from services.command.commands import Verify

    tenant = new_tenant()
    first = app.remember(tenant, state("address", f"Taipei of {tenant}"))
    rebuild(pg_settings, app, into=SCHEMA, workers=1)  # the rebuild queues every card it copied
    assert queued(admin_db, tenant) == {str(first.card_id): 1}
    settings = pg_settings.model_copy(update={"read_schema": SCHEMA})
    recording = Recording(f"fake-{tenant}")
    projection = EmbeddingProjection(admin_db.connect, SCHEMA, recording)
    projector = make_projector(settings, app, SCHEMA, admin_db)
    try:
        real = projection._embed

        def meanwhile(items: Any) -> Any:  # the card moves on while its vector is made
            app.verify(tenant, first.aggregate_id, Verify())
            catch_up(projector, app)
            return real(items)

        projection._embed = meanwhile  # type: ignore[method-assign]
        assert projection.embed_pending(limit=1_000_000) >= 1  # the whole queue in one batch
        assert queued(admin_db, tenant) == {str(first.card_id): 2}, "the later version stays"
        projection._embed = real  # type: ignore[method-assign]
        projection.embed_all()
        assert queued(admin_db, tenant) == {}
        embedded = [text for texts in recording.calls for text in texts]
        assert embedded.count(f"user address: Taipei of {tenant}") == 1, "its text once"
        app.remember(tenant, state("address", f"Kyoto of {tenant}"))  # queued as it is written
        catch_up(projector, app)
        assert len(queued(admin_db, tenant)) >= 1
        projection.embed_all()
        assert queued(admin_db, tenant) == {} and unembedded(admin_db, recording.model) == 0
    finally:
        projector.close()
