"""Ingested turns on the embedded PostgreSQL and broker, neither mocked: the ``ingestions`` read
model after projection (row-level security: another tenant sees none), the turn's event card
searchable, and the ingest relay putting only the turns handed to the worker on its topic."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta, timezone
from typing import Any
from uuid import uuid4

import pytest
from kafka import KafkaConsumer, TopicPartition
from psycopg import sql

from domain.errors import InvalidCommandError
from domain.ingestion import Ingestion
from infra.relay import INGEST_EVENTS, Relay, decode_messages
from infra.settings import Settings
from projections.replay import catch_up
from services.command.commands import IngestResult, IngestTurn
from services.command.memory import Palimpsest
from services.factory import create_queries
from services.query.queries import Queries
from tests.support import new_tenant, state

pytestmark = pytest.mark.integration

TOKYO = timezone(timedelta(hours=9))


@pytest.fixture(scope="module")
def queries(pg_settings: Settings, admin_db: Any) -> Iterator[Queries]:
    made = create_queries(pg_settings)
    yield made
    made.close()


def ingest(app: Palimpsest, tenant: str, turn_id: str, text: str, **extra: Any) -> IngestResult:
    app.test_clock.advance(minutes=1)  # type: ignore[attr-defined]
    fields: dict[str, Any] = {"session_id": "s-1", "turn_id": turn_id, "role": "user", "text": text,
                              "said_at": app.test_clock.now, "timezone": "Asia/Tokyo", **extra}  # type: ignore[attr-defined]
    return app.ingest_turn(tenant, IngestTurn(**fields))


def test_the_ingestions_read_model_after_projection(app, projector, queries) -> None:  # type: ignore[no-untyped-def]
    tenant, other = new_tenant(), new_tenant()
    said = app.test_clock.now - timedelta(days=400)
    first = ingest(app, tenant, "1", "We went hiking in Hakone", said_at=said.astimezone(TOKYO))
    second = ingest(app, tenant, "2", "Sounds lovely", role="assistant", agent_id="helper")
    third = ingest(app, tenant, "3", "Book the ryokan again")
    app.record_dead_letter(tenant, second.ingestion_id, "the model timed out", 4)
    app.record_extraction(tenant, third.ingestion_id, [{"kind": "event"}, {"kind": "state"}], "m", 2)
    app.record_applied(tenant, third.ingestion_id, [first.event_card_id])
    ingest(app, other, "1", "another tenant's turn")
    catch_up(projector, app)

    rows = queries.ingestions(tenant)
    assert [r.ingestion_id for r in rows] == [third.ingestion_id, second.ingestion_id,
                                              first.ingestion_id], "newest first"
    newest, parked, oldest = rows
    assert (newest.status, newest.attempts, newest.candidates, newest.card_ids, newest.error) == (
        "applied", 2, 2, [first.event_card_id], None)
    assert (parked.status, parked.attempts, parked.error, parked.role, parked.agent_id) == (
        "dead_letter", 4, "the model timed out", "assistant", "helper")
    assert oldest.said_at == said and oldest.timezone == "Asia/Tokyo" and oldest.status == "received"
    assert oldest.event_card_id == first.event_card_id and oldest.tenant_id == tenant
    assert newest.updated_at == app.test_clock.now - timedelta(minutes=1)
    assert oldest.received_at < parked.received_at < newest.received_at
    assert [r.ingestion_id for r in queries.ingestions(tenant, status="dead_letter")] == [
        second.ingestion_id]
    assert len(queries.ingestions(tenant, limit=1)) == 1
    assert queries.ingest_counts(tenant) == {"received": 1, "extracted": 0, "applied": 1,
                                             "dead_letter": 1, "erased": 0}
    with pytest.raises(InvalidCommandError, match="unknown ingestion status"):
        queries.ingestions(tenant, status="lost")
    with pytest.raises(InvalidCommandError, match="limit"):
        queries.ingestions(tenant, limit=0)


def test_another_tenant_sees_no_ingestion(app, projector, queries) -> None:  # type: ignore[no-untyped-def]
    tenant, stranger = new_tenant(), new_tenant()
    ingest(app, tenant, "1", "only mine")
    catch_up(projector, app)
    assert len(queries.ingestions(tenant)) == 1
    assert queries.ingestions(stranger) == []
    assert queries.ingest_counts(stranger) == dict.fromkeys(
        ("received", "extracted", "applied", "dead_letter", "erased"), 0)
    with queries.read.tenant(stranger) as conn:  # row-level security, not a WHERE of ours
        (row,) = conn.execute(sql.SQL("SELECT count(*) AS n FROM {}.ingestions").format(
            sql.Identifier(queries.settings.read_schema))).fetchall()
    assert row["n"] == 0


def test_a_turn_is_searchable_as_its_event_card(app, projector, queries) -> None:  # type: ignore[no-untyped-def]
    tenant = new_tenant()
    said = app.test_clock.now - timedelta(days=400)
    turn = ingest(app, tenant, "1", "我們去箱根泡溫泉 onsen weekend", said_at=said)
    app.remember(tenant, state("address", "Kyoto"))
    catch_up(projector, app)
    found = queries.search(tenant, "onsen")
    assert turn.event_card_id in [c.card_id for c in found.results]
    (card,) = [c for c in queries.read.current(tenant) if c.card_id == turn.event_card_id]
    assert (card.kind, card.occurred_at, card.source) == ("event", said, "user_stated")


def consume(bootstrap: str, topic: str, at_least: int, timeout: float = 20.0) -> list[Any]:
    """Every record of ``topic`` from the beginning, once messages carrying ``at_least`` events
    arrived and nothing more came for a moment."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, allow_auto_create_topics=False,
                             fetch_max_wait_ms=100, request_timeout_ms=10_000)
    try:
        partitions = sorted(consumer.partitions_for_topic(topic) or ())
        assert partitions, f"topic {topic} has no partitions"
        assigned = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(assigned)
        consumer.seek_to_beginning(*assigned)
        records: list[Any] = []
        events, deadline, quiet_since = 0, time.monotonic() + timeout, time.monotonic()
        while time.monotonic() < deadline:
            got = [r for batch in consumer.poll(timeout_ms=200).values() for r in batch]
            if got:
                records.extend(got)
                events += sum(len(decode_messages(r.value)) for r in got)
                quiet_since = time.monotonic()
            elif events >= at_least and time.monotonic() - quiet_since >= 0.7:
                break
        return records
    finally:
        consumer.close()


def test_the_ingest_relay_publishes_only_the_turns_handed_over(app, pg_settings, broker) -> None:  # type: ignore[no-untyped-def]
    tenant = new_tenant()
    app.remember(tenant, state("address", "Kyoto"))
    parked = ingest(app, tenant, "1", "first turn")
    app.record_dead_letter(tenant, parked.ingestion_id, "timeout", 3)
    app.ingest_rerun(tenant, parked.ingestion_id, "ops")
    done = ingest(app, tenant, "2", "second turn")
    app.record_extraction(tenant, done.ingestion_id, [], "m", 1)
    app.record_applied(tenant, done.ingestion_id, [])
    app.remember(tenant, state("address", "Osaka"))
    handed = list(app.recorder.select_notifications(start=1, limit=1_000_000, topics=INGEST_EVENTS))
    ours = [n.id for n in handed if n.originator_id in (parked.ingestion_id, done.ingestion_id)]
    assert len(ours) == 3, "two Received, one RerunRequested"

    topic = f"ingest-{uuid4().hex[:10]}"
    settings = pg_settings.model_copy(update={"kafka_ingest_topic": topic})
    relay = Relay.for_ingest(app.recorder, settings, broker.bootstrap,  # type: ignore[arg-type]
                             name=f"ingest-{uuid4().hex[:10]}")
    try:
        deadline = time.monotonic() + 30
        while relay.position < handed[-1].id:
            assert time.monotonic() < deadline, f"relay stuck at {relay.position}"
            relay.run_once(timeout=0.2)
        assert relay.topic == topic and relay.state.published == len(handed)
    finally:
        relay.close()

    records = consume(broker.bootstrap, topic, at_least=len(handed))
    messages = [(r.key, m) for r in records for m in decode_messages(r.value)]
    assert sorted(m.notification_id for _, m in messages) == [n.id for n in handed]
    assert {m.topic for _, m in messages} <= set(INGEST_EVENTS)
    mine = [(key, m) for key, m in messages if m.notification_id in ours]
    assert [m.notification_id for _, m in mine] == ours, "a tenant's events in log order"
    assert {key for key, _ in mine} == {tenant.encode()}, "keyed by tenant"
    events = [app.mapper.to_domain_event(m.to_stored_event()) for _, m in mine]
    assert [type(e).__qualname__ for e in events] == [
        "Ingestion.Received", "Ingestion.RerunRequested", "Ingestion.Received"]
    assert isinstance(events[0], Ingestion.Received) and events[0].text == "first turn"
