"""Retention on the embedded PostgreSQL: a tenant's policy erases the raw turns said before its
cut-off (and, when it says so, the cards made of them), records the run, and leaves newer turns,
other tenants and a tenant without a policy alone."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from psycopg import sql

from domain.erased import is_erased
from domain.event_card import EventCard
from domain.retention import Retention
from infra.postgres import Database
from infra.settings import Settings
from projections.replay import catch_up
from services.command.commands import IngestTurn, Remember
from services.command.retention import RetentionWorker, SetRetention
from services.query.readmodels import ReadModels
from tests.support import new_tenant


@pytest.fixture
def reads(runtime_db: Database, pg_settings: Settings) -> Iterator[ReadModels]:
    models = ReadModels(runtime_db, pg_settings.read_schema)
    yield models
    models.close()


def turn(app: Any, tenant: str, text: str, days_ago: float, turn_id: str) -> Any:
    said = app.clock() - timedelta(days=days_ago)
    return app.ingest_turn(tenant, IngestTurn(session_id="s-1", turn_id=turn_id, role="user", text=text,
                                              said_at=said, timezone="UTC"))


def contents(reads: ReadModels, tenant: str, card_ids: list[Any]) -> dict[Any, Any]:
    query = sql.SQL("SELECT card_id, content, erased_at FROM {}.cards WHERE card_id = ANY(%s)").format(
        reads.schema)
    with reads.tenant(tenant) as conn:
        return {row["card_id"]: (row["content"], row["erased_at"])
                for row in conn.execute(query, (card_ids,)).fetchall()}


def test_turns_older_than_the_policy_are_erased_and_the_run_is_recorded(app, projector, reads) -> None:
    tenant, other = new_tenant(), new_tenant()
    old = turn(app, tenant, "I lived in Valparaiso back then", 40, "1")
    new = turn(app, tenant, "Now I live in Lima", 2, "2")
    theirs = turn(app, other, "I lived in Valparaiso back then", 40, "1")
    app.set_retention(tenant, SetRetention(turn_days=30, set_by="admin"))
    catch_up(projector, app)
    worker = RetentionWorker(app, reads, interval=3600)

    assert worker.apply_all().get(tenant) == 1
    assert worker.apply(tenant) == 0, "once erased, a turn is not found again"
    catch_up(projector, app)
    shown = contents(reads, tenant, [old.event_card_id, new.event_card_id])
    assert shown[old.event_card_id][0] is None and shown[old.event_card_id][1] is not None
    assert shown[new.event_card_id] == ("Now I live in Lima", None)
    assert is_erased(app.load(tenant, old.event_card_id, EventCard).description)
    assert contents(reads, other, [theirs.event_card_id])[theirs.event_card_id][0] is not None
    retention = app.load(tenant, Retention.create_id(tenant), Retention, "retention")
    assert retention.runs == 1


def test_a_policy_that_takes_the_extracted_cards_erases_them_too(app, projector, reads) -> None:
    tenant = new_tenant()
    said = turn(app, tenant, "My cat is called Miso", 10, "1")
    made = app.remember(tenant, Remember(kind="state", memory_type="fact", subject="user",
                                         label="cat name", content="Miso", session_id="s-1", turn_id="1"))
    app.record_extraction(tenant, said.ingestion_id, [{"kind": "state", "value": "Miso"}], "m", 1)
    app.record_applied(tenant, said.ingestion_id, (str(made.card_id),))
    app.set_retention(tenant, SetRetention(turn_days=7, extracted=True))
    catch_up(projector, app)

    assert RetentionWorker(app, reads, interval=3600).apply(tenant) == 1
    catch_up(projector, app)
    shown = contents(reads, tenant, [said.event_card_id, made.card_id])
    assert shown[said.event_card_id][0] is None and shown[made.card_id][0] is None


def test_a_tenant_without_a_policy_keeps_every_turn(app, projector, reads) -> None:
    tenant = new_tenant()
    kept = turn(app, tenant, "an old turn", 4000, "1")
    catch_up(projector, app)
    assert RetentionWorker(app, reads, interval=3600, clock=lambda: datetime.now(UTC)).apply(tenant) == 0
    assert contents(reads, tenant, [kept.event_card_id])[kept.event_card_id][0] == "an old turn"
