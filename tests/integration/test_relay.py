"""The relay on the embedded PostgreSQL and the embedded Kafka broker (tansu), neither mocked:
events arrive in order with the agreed key and value, the relay resumes from its stored position,
and a broker that lost its storage gets the whole log again."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
from eventsourcing.persistence import Notification, PersistenceError
from kafka import KafkaConsumer, TopicPartition

from infra.broker import EmbeddedBroker, ensure_topic
from infra.broker_folder import kafka_bootstrap
from infra.postgres import Database
from infra.relay import (
    Relay,
    RelayError,
    RelayState,
    decode_message,
    decode_messages,
    encode_message,
    encode_messages,
    ensure_relay_table,
    log_head,
)
from infra.settings import Settings
from services.command.commands import Verify
from services.command.memory import Palimpsest
from services.factory import create_app
from tests.support import new_tenant, state

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def relay_db(admin_db: Database, pg_settings: Settings) -> Database:
    # Until ``infra.postgres.bootstrap`` creates it, the tests make the relay's table themselves.
    with admin_db.connect(autocommit=True) as conn:
        ensure_relay_table(conn, pg_settings)
    return admin_db


@pytest.fixture
def app(relay_db: Database, pg_settings: Settings) -> Iterator[Palimpsest]:
    application = create_app(pg_settings)
    yield application
    application.close()


@pytest.fixture
def make_relay(app: Palimpsest) -> Iterator[Callable[..., Relay]]:
    relays: list[Relay] = []

    def make(bootstrap: str, topic: str, name: str, cls: type[Relay] = Relay, **options: Any) -> Relay:
        relay = cls(app.recorder, bootstrap, topic=topic, name=name, **options)  # type: ignore[arg-type]
        relays.append(relay)
        return relay

    yield make
    for relay in relays:
        relay.close()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid4().hex[:10]}"


def write(app: Palimpsest, tenant: str, slots: int = 3, verifies: int = 3) -> list[UUID]:
    """``slots`` aggregates of ``1 + verifies`` events each."""
    ids = []
    for i in range(slots):
        result = app.remember(tenant, state(f"label-{i}", f"value {i}"))
        for _ in range(verifies):
            app.verify(tenant, result.aggregate_id, Verify())
        ids.append(result.aggregate_id)
    return ids


def head(app: Palimpsest) -> int:
    return app.recorder.max_notification_id() or 0


def log_until(app: Palimpsest, last: int) -> list[Notification]:
    return list(app.recorder.select_notifications(start=1, limit=1_000_000, stop=last))


def relay_until(relay: Relay, position: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while relay.position < position:
        assert time.monotonic() < deadline, f"relay stuck at {relay.position} < {position}"
        relay.run_once(timeout=0.2)


def consume(bootstrap: str, topic: str, at_least: int, timeout: float = 15.0, idle: float = 0.7) -> list[Any]:
    """Every message of ``topic`` from the beginning: polls until messages carrying ``at_least``
    events arrived and then nothing more for ``idle`` seconds (tansu's end offsets are not the
    high watermark)."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
        allow_auto_create_topics=False, fetch_max_wait_ms=100, request_timeout_ms=10_000,
    )
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        assert partitions, f"topic {topic} has no partitions"
        assigned = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(assigned)
        consumer.seek_to_beginning(*assigned)
        records: list[Any] = []
        events = 0
        deadline = time.monotonic() + timeout
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            polled = consumer.poll(timeout_ms=200)
            got = [r for batch in polled.values() for r in batch]
            if got:
                records.extend(got)
                events += sum(len(decode_messages(r.value)) for r in got)
                quiet_since = time.monotonic()
            elif events >= at_least and time.monotonic() - quiet_since >= idle:
                break
        return records
    finally:
        consumer.close()


def notification_ids(records: list[Any]) -> list[int]:
    return [m.notification_id for r in records for m in decode_messages(r.value)]


def stored_state(db: Database, name: str) -> RelayState | None:
    with db.connect() as conn:
        row = conn.execute(
            "SELECT position, published, topic, topic_id, offsets FROM palimpsest.relay_position"
            " WHERE relay_name = %s", (name,),
        ).fetchone()
    if row is None:
        return None
    return RelayState(row[0], row[1], row[2], row[3], {int(k): v for k, v in row[4].items()})


def test_message_round_trip(app: Palimpsest) -> None:
    tenant = new_tenant()
    result = app.remember(tenant, state("address", "Taipei"))
    (notification,) = app.recorder.select_notifications(start=result.position, limit=1)

    key, value = encode_message(notification)
    message = decode_message(value)

    assert key == tenant.encode()
    assert list(json.loads(value)) == [
        "notification_id", "originator_id", "originator_version", "topic", "state",
    ]
    assert message.notification_id == notification.id
    assert message.state == notification.state
    assert message.to_notification() == notification
    event = app.mapper.to_domain_event(message.to_stored_event())
    assert event.originator_id == result.aggregate_id
    assert event.originator_version == notification.originator_version


def notification(number: int, tenant: str, state_bytes: int = 10) -> Notification:
    state = json.dumps({"tenant_id": tenant, "pad": "x" * state_bytes}).encode()
    return Notification(id=number, originator_id=uuid4(), originator_version=1, topic="t", state=state)


def test_consecutive_events_of_a_tenant_share_a_message_in_log_order() -> None:
    log = [notification(i, "a" if i % 3 else "b") for i in range(1, 13)]
    messages = encode_messages(log, per_message=3)
    by_key: dict[bytes, list[int]] = {}
    for key, value, count in messages:
        carried = decode_messages(value)
        assert 1 <= len(carried) == count <= 3
        by_key.setdefault(key, []).extend(m.notification_id for m in carried)
    assert by_key == {b"a": [n.id for n in log if n.id % 3], b"b": [n.id for n in log if not n.id % 3]}
    assert len(messages) == 3 + 2  # 8 of "a" in 3, 4 of "b" in 2
    # one event alone keeps the one-event form; a message holds about MESSAGE_BYTES at most
    ((_, single, _),) = encode_messages(log[:1], per_message=100)
    assert decode_message(single).notification_id == 1
    big = [notification(i, "a", state_bytes=90_000) for i in range(1, 6)]  # 120 KB each in base64
    assert [count for _, _, count in encode_messages(big, per_message=100)] == [2, 2, 1]
    with pytest.raises(RelayError):
        decode_message(encode_messages(log[:2], per_message=100)[0][1])
    with pytest.raises(RelayError):
        decode_messages(b'{"events": [{"notification_id": 1}]}')


def test_events_arrive_in_kafka_in_order_with_key_and_value(
    app: Palimpsest, broker: EmbeddedBroker, make_relay: Callable[..., Relay], relay_db: Database,
) -> None:
    topic, name = unique("events"), unique("relay")
    tenant = new_tenant()
    aggregates = write(app, tenant)
    last = head(app)
    relay = make_relay(broker.bootstrap, topic, name, partitions=4)

    relay_until(relay, last)

    expected = log_until(app, last)
    records = consume(broker.bootstrap, topic, at_least=len(expected))
    assert sorted(notification_ids(records)) == [n.id for n in expected]  # each once
    by_id = {n.id: n for n in expected}
    for record in records:
        for message in decode_messages(record.value):
            notification = by_id[message.notification_id]
            assert record.key == json.loads(notification.state)["tenant_id"].encode()
            assert message.originator_id == notification.originator_id
            assert message.originator_version == notification.originator_version
            assert message.topic == notification.topic
            assert message.state == notification.state
    # One tenant, one partition, in log order: so each aggregate's versions are in order too.
    ours = sorted((r for r in records if r.key == tenant.encode()), key=lambda r: r.offset)
    assert len({r.partition for r in ours}) == 1
    assert len(ours) < len(notification_ids(ours))  # consecutive events share a message
    assert notification_ids(ours) == sorted(notification_ids(ours))
    carried = [m for r in ours for m in decode_messages(r.value)]
    for aggregate in aggregates:
        versions = [n.originator_version for n in expected if n.originator_id == aggregate]
        assert len(versions) >= 4
        assert [m.originator_version for m in carried if m.originator_id == aggregate] == versions
    assert relay.position == last
    stored = stored_state(relay_db, name)
    assert stored is not None and stored.position == last and stored.published == len(expected)
    assert stored.topic == topic and stored.topic_id

    # New events are pushed by LISTEN/NOTIFY: the relay publishes them on its next call.
    more = app.verify(tenant, aggregates[0], Verify()).position
    assert more is not None
    relay_until(relay, more, timeout=5)
    assert max(notification_ids(consume(broker.bootstrap, topic, at_least=len(expected) + 1))) == more


class CrashBeforeSaving(Relay):
    """Loses its database connection once, after the broker acknowledged a batch."""

    crashed = False

    def _save(self, state: RelayState) -> None:
        if state.position > 0 and not self.crashed:
            self.crashed = True
            raise PersistenceError("connection lost")
        super()._save(state)


def test_relay_resumes_from_its_stored_position(
    app: Palimpsest, broker: EmbeddedBroker, make_relay: Callable[..., Relay],
) -> None:
    topic, name = unique("resume"), unique("relay")
    tenant = new_tenant()
    write(app, tenant, slots=2, verifies=1)
    first = head(app)
    relay = make_relay(broker.bootstrap, topic, name)
    relay_until(relay, first)
    relay.close()

    write(app, tenant, slots=2, verifies=1)
    second = head(app)
    # A new process with the same name starts where the first one stopped.
    again = make_relay(broker.bootstrap, topic, name)
    assert again.position == first
    relay_until(again, second)
    again.close()

    # Acknowledged, then the position update failed: that batch (and only that one) goes twice.
    write(app, tenant, slots=1, verifies=1)
    third = head(app)
    crashing = make_relay(broker.bootstrap, topic, name, cls=CrashBeforeSaving)
    assert crashing.run_once(timeout=5) == 0 and isinstance(crashing.last_error, PersistenceError)
    assert crashing.position == second
    relay_until(crashing, third)

    expected = [n.id for n in log_until(app, third)]
    unacked = [i for i in expected if i > second]
    ids = notification_ids(consume(broker.bootstrap, topic, at_least=len(expected) + len(unacked)))
    assert sorted(set(ids)) == expected
    assert sorted(i for i in set(ids) if ids.count(i) > 1) == unacked
    assert all(ids.count(i) == 2 for i in unacked)


def test_broker_that_lost_its_storage_gets_the_whole_log_again(
    app: Palimpsest, make_relay: Callable[..., Relay], relay_db: Database,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    topic, name = unique("restart"), unique("relay")
    tenant = new_tenant()
    with EmbeddedBroker(tmp_path_factory.mktemp("restarted")) as own:
        write(app, tenant, slots=2, verifies=2)
        first = head(app)
        relay = make_relay(own.bootstrap, topic, name, check_interval=0.5)
        relay_until(relay, first)
        before = stored_state(relay_db, name)
        assert before is not None and before.position == first

        # Restarted while the relay is idle: its periodic check notices.
        own.restart()
        deadline = time.monotonic() + 10
        while relay.resets == 0:
            assert time.monotonic() < deadline, "the relay did not notice the lost topic"
            relay.run_once(timeout=0.2)
        relay_until(relay, first)
        expected = [n.id for n in log_until(app, first)]
        assert sorted(set(notification_ids(consume(own.bootstrap, topic, len(expected))))) == expected

        # Restarted with new events waiting and no check due: the producer's error makes it check.
        relay.check_interval = 60
        own.restart()
        write(app, tenant, slots=1, verifies=1)
        second = head(app)
        assert relay.run_once(timeout=5) == 0 and relay.last_error is not None
        assert stored_state(relay_db, name).position == first  # type: ignore[union-attr]
        relay_until(relay, second, timeout=30)
        assert relay.resets == 2
        expected = [n.id for n in log_until(app, second)]
        assert sorted(set(notification_ids(consume(own.bootstrap, topic, len(expected))))) == expected

        # The position lives in PostgreSQL, not in the broker or the process.
        after = stored_state(relay_db, name)
        assert after is not None and after.position == second and after.topic == topic
        assert after.topic_id and after.topic_id != before.topic_id
        assert make_relay(own.bootstrap, topic, name).position == second


def test_position_table_and_log_head(relay_db: Database, runtime_db: Database, app: Palimpsest,
                                     pg_settings: Settings) -> None:
    with relay_db.connect(autocommit=True) as conn:
        ensure_relay_table(conn, pg_settings)  # idempotent
        assert log_head(conn) == head(app)
    name = unique("relay")
    with runtime_db.connect(autocommit=True) as conn:
        conn.execute("INSERT INTO palimpsest.relay_position (relay_name, position) VALUES (%s, 7)",
                     (name,))
        conn.execute("UPDATE palimpsest.relay_position SET position = 8 WHERE relay_name = %s", (name,))
        assert log_head(conn) == head(app)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DELETE FROM palimpsest.relay_position WHERE relay_name = %s", (name,))


def test_kafka_bootstrap_and_ensure_topic(
    broker: EmbeddedBroker, pg_settings: Settings, tmp_path: Path
) -> None:
    configured = pg_settings.model_copy(update={"kafka_bootstrap": broker.bootstrap})
    assert kafka_bootstrap(configured) == (broker.bootstrap, None)
    # Unset: the data folder's embedded broker, started by the first caller and joined by the next.
    embedded = pg_settings.model_copy(update={"data_dir": tmp_path})
    bootstrap, started = kafka_bootstrap(embedded)
    assert started is not None
    try:
        assert kafka_bootstrap(embedded) == (bootstrap, None)
        assert (tmp_path / "kafka" / "tansu.log").exists()
    finally:
        started.stop()
    assert not (tmp_path / "kafka" / "bootstrap").exists()
    topic = unique("topic")
    assert ensure_topic(broker.bootstrap, topic, 3) is True
    assert ensure_topic(broker.bootstrap, topic, 3) is False
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, allow_auto_create_topics=False)
    try:
        assert consumer.partitions_for_topic(topic) == {0, 1, 2}
    finally:
        consumer.close()
