"""An erasure that races the embedder, on the embedded PostgreSQL: the embedder has read a card,
made its vector and inserted it, not yet committed, when the erasure of that card is projected.
The erasure's batch waits for the embedder's commit (the projector's per-tenant lock, which the
embedder holds shared) and then deletes the vector: none survives, and search has nothing of the
card to find."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any
from uuid import uuid4

import psycopg
import pytest
from psycopg import sql

from infra.embedders import Embedder
from infra.postgres import Database, projector_database
from infra.settings import Settings
from projections.embeddings import EmbeddingProjection
from projections.replay import catch_up
from services.command.commands import Erase, Remember
from services.command.memory import Palimpsest
from tests.support import new_tenant

pytestmark = pytest.mark.integration


class Unit(Embedder):
    """The same vector for every text."""

    dimensions = 512

    def __init__(self) -> None:
        self.model = f"fake-race-{uuid4().hex[:8]}"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [[1.0] + [0.0] * 511 for _ in texts]


class Racing(EmbeddingProjection):
    """Projects the pending erasure in another thread once the card's vector is written and not
    yet committed, and gives it ``patience`` seconds to finish before committing."""

    def __init__(self, *args: Any, card_id: Any, erase: Any, patience: float = 2.0) -> None:
        super().__init__(*args)
        self.schema: str = args[1]
        self.card_id, self.erase, self.patience = card_id, erase, patience
        self.thread: threading.Thread | None = None
        self.finished_before_commit: bool | None = None

    def written(self, conn: psycopg.Connection[Any]) -> None:
        if self.thread is not None or conn.execute(
                sql.SQL("SELECT 1 FROM {}.card_embeddings WHERE card_id = %s").format(
                    sql.Identifier(self.schema)), (self.card_id,)).fetchone() is None:
            return
        self.thread = threading.Thread(target=self.erase, daemon=True)
        self.thread.start()
        self.thread.join(self.patience)
        self.finished_before_commit = not self.thread.is_alive()


def vectors(admin: Database, schema: str, card_id: Any) -> int:
    with admin.connect() as conn:
        row = conn.execute(sql.SQL("SELECT count(*) FROM {}.card_embeddings WHERE card_id = %s"
                                   ).format(sql.Identifier(schema)), (card_id,)).fetchone()
    return int(row[0]) if row else -1


def test_an_erasure_projected_while_the_embedder_inserts_leaves_no_vector(
        pg_settings: Settings, admin_db: Database, app: Palimpsest, projector: Any) -> None:
    tenant = new_tenant()
    card = app.remember(tenant, Remember(kind="knowledge", memory_type="note", title="Diagnosis",
                                         content=f"zqrace{uuid4().hex[:6]} is my diagnosis"))
    catch_up(projector, app)  # the card is in the read models and on the embedder's queue
    app.erase(tenant, Erase(unit="card", card_id=card.card_id))  # in the log, not projected yet

    connect = projector_database(admin_db, pg_settings).connect
    racing = Racing(connect, pg_settings.read_schema, Unit(), card_id=card.card_id,
                    erase=lambda: catch_up(projector, app))
    while racing.embed_pending():
        pass
    assert racing.thread is not None, "the card's vector was written"
    racing.thread.join(30)
    assert not racing.thread.is_alive()
    assert vectors(admin_db, pg_settings.read_schema, card.card_id) == 0, "no vector survives"
    assert racing.finished_before_commit is False, "the erasure waited for the embedder's commit"
    with admin_db.connect() as conn:
        erased = conn.execute(sql.SQL("SELECT erased_at FROM {}.cards WHERE card_id = %s").format(
            sql.Identifier(pg_settings.read_schema)), (card.card_id,)).fetchone()
    assert erased is not None and erased[0] is not None, "the card is a tombstone"
