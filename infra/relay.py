"""The relay: the event store's notification log, published to Kafka in order.

It follows the log with the eventsourcing subscription API (``recorder.subscribe(gt=position)``:
LISTEN/NOTIFY on PostgreSQL, no polling loop of ours) and publishes each notification to
``settings.kafka_topic`` with an idempotent producer (``acks="all"``), keyed by tenant and batched
per tenant as :mod:`infra.relay_messages` describes.

Position. The relay keeps its own row in ``<event schema>.relay_position`` (one per relay name)
and advances it only after the producer has flushed the batch and the broker acknowledged every
message. A crash between the acknowledgement and the update republishes that one batch: consumers
are idempotent by event identity (originator id and version, or notification id), so a duplicate is
harmless and nothing is ever skipped.

Lost broker storage. The embedded broker keeps messages in memory: a restart loses all of them,
and a real cluster can lose a topic too. Beside its position the relay records, after each batch,
the topic name, the topic id and, for every partition it wrote to, the offset of the first message
of its newest acknowledged batch there (a lower bound of that partition's end offset; a lower bound
rather than the last offset because tansu reports a partition's end offset as the base offset of
its last record batch plus one). The broker has lost messages when

1. the topic is missing (it is then created again), or has a different topic id (recreated), or
   is not the topic the relay last wrote to (``kafka_topic`` changed);
2. a partition's end offset is at or below the recorded lower bound (emptied or truncated);
3. a batch is acknowledged at offsets at or below the recorded lower bound (offsets went back).

Rules 1 and 2 are checked when the relay starts or reconnects, after any producer error, and every
``check_interval`` seconds (idle or not); rule 3 on every batch. When any holds, the relay resets
its position back and republishes from there: to ``resume_from()`` — the lowest notification id its
consumers have handled everything up to (:mod:`projections.lowwater`: what they handled is in the
read models already, and a consumer that starts again catches up from the log itself) — or to 0,
the whole log, when it is given none. Duplicates are harmless, as above. (tansu creates a missing
topic as soon as a producer writes to it, so a restart usually shows as a new topic id.)

The row's ``tenant_id`` is ``'*'``: one relay carries every tenant's events.

The ingest relay (:meth:`Relay.for_ingest`, row ``ingest``) follows the same log with a topics
filter (the subscription's ``topics``: the store selects only those events) and publishes only
:data:`INGEST_EVENTS` — the turns handed to the extraction worker — to
``settings.kafka_ingest_topic``, in the same message format; its position is the newest of those
it published. The rules above hold for it as for the main relay.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

import psycopg
from eventsourcing.persistence import Notification, PersistenceError
from eventsourcing.utils import get_topic
from psycopg import sql

from domain.ingestion import Ingestion
from infra.broker import BrokerError, ensure_topic_with
from infra.heartbeats import Beat
from infra.redact import traced
from infra.relay_messages import (  # re-exported: consumers read messages through this module
    MESSAGE_BYTES,
    RelayError,
    StoredEventMessage,
    decode_message,
    decode_messages,
    encode_message,
    encode_messages,
    message_key,
)
from infra.relay_store import POSITION_TABLE, Feed, RelayState, ensure_relay_table, log_head
from infra.settings import Settings

if TYPE_CHECKING:
    from eventsourcing.postgres import PostgresApplicationRecorder

__all__ = [
    "INGEST_EVENTS", "MESSAGE_BYTES", "Relay", "RelayError", "RelayState", "StoredEventMessage",
    "decode_message", "decode_messages", "encode_message", "encode_messages", "ensure_relay_table",
    "log_head", "message_key",
]

log = logging.getLogger(__name__)

#: The events the ingest relay publishes, as eventsourcing spells their topics: the turns handed
#: to the extraction worker.
INGEST_EVENTS = (get_topic(Ingestion.Received), get_topic(Ingestion.RerunRequested))

_NO_TOPIC_ID = {"", "None", "00000000-0000-0000-0000-000000000000", "AAAAAAAAAAAAAAAAAAAAAA"}
#: A broker that comes back is found within a second, and a client gives up bootstrapping in 5 s
#: (kafka-python's defaults: backoff up to 30 s, bootstrap for 30 s).
_RECONNECT = {"reconnect_backoff_max_ms": 1_000, "bootstrap_timeout_ms": 5_000}


# --- the relay -------------------------------------------------------------------------------------


class Relay:
    """Publishes the notification log to Kafka from its stored position on.

    ``recorder`` is the application recorder of a Palimpsest application on PostgreSQL
    (``create_app(settings).recorder``); the position row is read and written through its pool,
    as the runtime role. Not thread-safe: one thread calls :meth:`run_once` or :meth:`run`.
    """

    def __init__(
        self, recorder: PostgresApplicationRecorder, bootstrap: str, *, topic: str,
        partitions: int = 4, name: str = "main", batch_size: int = 500, linger_ms: int = 5,
        events_per_message: int = 100,
        check_interval: float = 5.0, request_timeout_ms: int = 10_000,
        delivery_timeout_ms: int = 30_000, schema: str | None = None,
        topics: Sequence[str] = (), embedded_broker: bool = False,
        resume_from: Callable[[], int] | None = None,
    ) -> None:
        self.recorder = recorder
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.name = name
        self.batch_size = batch_size
        self.events_per_message = max(1, events_per_message)
        self.linger_ms = linger_ms
        self.check_interval = check_interval
        self.request_timeout_ms = request_timeout_ms
        self.delivery_timeout_ms = max(delivery_timeout_ms, request_timeout_ms + linger_ms)
        self.schema = schema or recorder.datastore.schema or "public"
        #: Event topics to publish (eventsourcing's, e.g. ``domain.ingestion:Ingestion.Received``);
        #: empty: every notification.
        self.topics = tuple(topics)
        #: The error that made the last :meth:`run_once` give up, if it did.
        self.last_error: BaseException | None = None
        #: How often this relay found the broker had lost messages and started again from 0.
        self.resets = 0
        #: Whether the broker is the data folder's embedded one, which keeps its topics in memory:
        #: its start is empty by design, and republishing is routine (told at INFO, not WARNING).
        self.embedded_broker = embedded_broker
        #: Where to republish from when the broker lost messages: the consumers' low-water mark.
        self.resume_from = resume_from
        #: When :meth:`run` last came round its loop (monotonic) and last published (wall clock).
        self.ticked_at: float | None = None
        self.published_at: float | None = None
        self._failing_since: float | None = None
        self._state: RelayState | None = None
        self._producer: Any = None
        self._admin: Any = None
        self._feed: Feed | None = None
        self._checked_at: float | None = None

    @classmethod
    def from_settings(
        cls, recorder: PostgresApplicationRecorder, settings: Settings, bootstrap: str,
        name: str = "main", **options: Any,
    ) -> Relay:
        options.setdefault("embedded_broker", not settings.kafka_bootstrap)
        return cls(
            recorder, bootstrap, topic=settings.kafka_topic, partitions=settings.kafka_partitions,
            name=name, schema=settings.event_schema,
            events_per_message=settings.kafka_events_per_message, **options,
        )

    @classmethod
    def for_ingest(
        cls, recorder: PostgresApplicationRecorder, settings: Settings, bootstrap: str,
        name: str = "ingest", **options: Any,
    ) -> Relay:
        """The ingest relay: only the turns handed to the extraction worker
        (:data:`INGEST_EVENTS`), to ``settings.kafka_ingest_topic``, from its own position (the
        ``relay_position`` row ``name``)."""
        options.setdefault("embedded_broker", not settings.kafka_bootstrap)
        return cls(
            recorder, bootstrap, topic=settings.kafka_ingest_topic,
            partitions=settings.kafka_partitions, name=name, schema=settings.event_schema,
            events_per_message=settings.kafka_events_per_message, topics=INGEST_EVENTS,
            **options,
        )

    # -- state --

    @property
    def state(self) -> RelayState:
        if self._state is None:
            self._state = self._load()
        return self._state

    @property
    def position(self) -> int:
        """The newest notification id the broker has acknowledged (as stored)."""
        return self.state.position

    def _table(self) -> sql.Composed:
        return sql.SQL("{}.{}").format(sql.Identifier(self.schema), sql.Identifier(POSITION_TABLE))

    def _load(self) -> RelayState:
        query = sql.SQL(
            "SELECT position, published, topic, topic_id, offsets FROM {} WHERE relay_name = %s"
        ).format(self._table())
        with self.recorder.datastore.get_connection() as conn:
            row: Any = conn.execute(query, (self.name,)).fetchone()
        if row is None:
            return RelayState()
        return RelayState(
            position=int(row["position"]), published=int(row["published"]), topic=row["topic"],
            topic_id=row["topic_id"],
            offsets={int(p): int(o) for p, o in (row["offsets"] or {}).items()},
        )

    def _save(self, state: RelayState) -> None:
        query = sql.SQL(
            "INSERT INTO {} (relay_name, position, published, topic, topic_id, offsets, updated_at)"
            " VALUES (%s, %s, %s, %s, %s, %s::jsonb, now())"
            " ON CONFLICT (relay_name) DO UPDATE SET position = EXCLUDED.position,"
            " published = EXCLUDED.published, topic = EXCLUDED.topic,"
            " topic_id = EXCLUDED.topic_id, offsets = EXCLUDED.offsets, updated_at = now()"
        ).format(self._table())
        offsets = json.dumps({str(p): o for p, o in sorted(state.offsets.items())})
        with self.recorder.datastore.get_connection() as conn:
            conn.execute(query, (
                self.name, state.position, state.published, state.topic, state.topic_id, offsets,
            ))
        self._state = state

    # -- Kafka clients --

    def _producer_client(self) -> Any:
        if self._producer is None:
            from kafka import KafkaProducer

            self._producer = KafkaProducer(
                bootstrap_servers=self.bootstrap, client_id=f"palimpsest-relay-{self.name}",
                acks="all", enable_idempotence=True, linger_ms=self.linger_ms,
                batch_size=256 * 1024, allow_auto_create_topics=False, max_block_ms=5_000,
                request_timeout_ms=self.request_timeout_ms,
                delivery_timeout_ms=self.delivery_timeout_ms, **_RECONNECT,
            )
        return self._producer

    def _admin_client(self) -> Any:
        if self._admin is None:
            from kafka import KafkaAdminClient

            self._admin = KafkaAdminClient(
                bootstrap_servers=self.bootstrap, client_id=f"palimpsest-relay-{self.name}-admin",
                request_timeout_ms=self.request_timeout_ms, **_RECONNECT,
            )
        return self._admin

    def _close_clients(self) -> None:
        producer, self._producer = self._producer, None
        admin, self._admin = self._admin, None
        if producer is not None:
            with contextlib.suppress(Exception):
                producer.close(timeout=1)
        if admin is not None:
            with contextlib.suppress(Exception):
                admin.close()

    def _restart_feed(self) -> None:
        if self._feed is not None:
            self._feed.close()
            self._feed = None

    # -- the broker check --

    def check(self) -> bool:
        """Compare the broker with what the relay recorded (rules 1 and 2 of the module docstring),
        creating the topic when it is missing. True when the relay reset its position to 0."""
        state = self.state
        admin = self._admin_client()
        created = ensure_topic_with(admin, self.topic, self.partitions)
        topic_id, partitions = self._describe(admin)
        end = self._end_offsets(admin, partitions)
        self._checked_at = time.monotonic()
        reasons: list[str] = []
        if state.position > 0:
            if state.topic is not None and state.topic != self.topic:
                reasons.append(f"it last wrote to topic {state.topic}")
            if created:
                reasons.append("the topic was missing")
            elif state.topic_id and topic_id and state.topic_id != topic_id:
                reasons.append(f"the topic id changed from {state.topic_id} to {topic_id}")
            shrunk = {p: end.get(p, 0) for p, low in state.offsets.items() if end.get(p, 0) <= low}
            if shrunk:
                reasons.append(f"partitions hold fewer messages than acknowledged: {shrunk}")
        if reasons:
            self._reset("; ".join(reasons), topic_id)
            return True
        if state.topic != self.topic or (topic_id and state.topic_id != topic_id):
            self._save(RelayState(
                position=state.position, published=state.published, topic=self.topic,
                topic_id=topic_id, offsets=dict(state.offsets),
            ))
        return False

    def _describe(self, admin: Any) -> tuple[str | None, list[int]]:
        for described in admin.describe_topics([self.topic]):
            if described.get("name") == self.topic and described.get("error_code") == 0:
                raw = described.get("topic_id")
                topic_id = None if raw is None or str(raw) in _NO_TOPIC_ID else str(raw)
                partitions = sorted(p["partition_index"] for p in described.get("partitions") or [])
                return topic_id, partitions
        raise BrokerError(f"topic {self.topic} is not described by the broker")

    def _end_offsets(self, admin: Any, partitions: Sequence[int]) -> dict[int, int]:
        from kafka import TopicPartition
        from kafka.admin import OffsetSpec

        if not partitions:
            return {}
        answer = admin.list_partition_offsets(
            {TopicPartition(self.topic, p): OffsetSpec.LATEST for p in partitions}
        )
        return {tp.partition: int(found.offset) for tp, found in answer.items()}

    def _reset(self, reason: str, topic_id: str | None) -> None:
        state = self.state
        start = 0 if self.resume_from is None else max(0, min(self.resume_from(), state.position))
        again = f"{state.position - start} event(s) after position {start}, the ones its " \
            "consumers have not handled yet," if start else "the whole log"
        if self.embedded_broker:  # its topics live in memory: every start of it is empty
            log.info(
                "relay %s: the embedded broker starts empty (it keeps topics in memory); "
                "republishing %s from the event store to %s, nothing is lost (%s)",
                self.name, again, self.topic, reason,
            )
        else:
            log.warning(
                "relay %s: the broker lost messages of %s (%s); republishing %s (position was "
                "%d, %d messages acknowledged)",
                self.name, self.topic, reason, again, state.position, state.published,
            )
        self._save(RelayState(position=start, published=0, topic=self.topic, topic_id=topic_id))
        self.resets += 1
        self._restart_feed()
        # The idempotent producer's sequence numbers belong to the lost topic.
        producer, self._producer = self._producer, None
        if producer is not None:
            with contextlib.suppress(Exception):
                producer.close(timeout=1)

    # -- publishing --

    def _ready(self) -> Feed:
        if self._checked_at is None or time.monotonic() - self._checked_at >= self.check_interval:
            self.check()
        if self._feed is None:
            self._feed = Feed(self.recorder, self.state.position, capacity=self.batch_size * 4,
                              topics=self.topics)
        return self._feed

    def run_once(self, timeout: float = 1.0) -> int:
        """Publish the next batch, waiting up to ``timeout`` seconds for a first notification.

        Returns how many notifications the broker acknowledged (0 when there were none, when
        the relay reset its position, or when the broker or the store failed: then
        :attr:`last_error` holds the error, the clients are dropped and the next call checks the
        broker and resumes from the stored position)."""
        from kafka.errors import KafkaError

        try:
            count = self._run_once(timeout)
        except (KafkaError, BrokerError, OSError, PersistenceError, psycopg.Error) as error:
            self._failed(error)
            self._restart_feed()
            self._close_clients()
            self._state = None
            self._checked_at = None
            return 0
        self._recovered()
        return count

    def _failed(self, error: BaseException) -> None:
        """Say it once when publishing stops working; later failures are retried quietly."""
        self.last_error = error
        if self._failing_since is None:
            self._failing_since = time.monotonic()
            log.warning("relay %s: cannot publish (%s: %s); retrying with backoff", self.name,
                        type(error).__name__, str(error).strip())
        else:
            log.debug("relay %s: still failing: %s: %s", self.name, type(error).__name__, error)

    def _recovered(self) -> None:
        self.last_error = None
        if self._failing_since is not None:
            log.warning("relay %s: publishing again after %.1f s, from position %d", self.name,
                        time.monotonic() - self._failing_since, self.position)
            self._failing_since = None

    def _run_once(self, timeout: float) -> int:
        feed = self._ready()
        batch = feed.take(self.batch_size, timeout)
        if not batch:
            return 0
        if batch[0].id <= self.state.position:  # a feed from before a reset
            batch = [n for n in batch if n.id > self.state.position]
        return self._publish(batch) if batch else 0

    def _publish(self, batch: Sequence[Notification]) -> int:
        started = time.monotonic()
        producer = self._producer_client()
        futures = []
        for key, value, _ in encode_messages(batch, self.events_per_message):
            futures.append(producer.send(self.topic, key=key, value=value))
        producer.flush(timeout=self.delivery_timeout_ms / 1000 + 5)
        lowest: dict[int, int] = {}
        for future in futures:
            metadata = future.get(timeout=0)  # raises the delivery error, if any
            partition, offset = int(metadata.partition), int(metadata.offset)
            if offset < lowest.get(partition, offset + 1):
                lowest[partition] = offset
        state = self.state
        back = {p: (o, state.offsets[p]) for p, o in lowest.items() if o <= state.offsets.get(p, -1)}
        if back and state.position > 0:
            self._reset(f"acknowledged offsets went back (partition: (new, recorded)) {back}",
                        state.topic_id)
            return 0
        position = batch[-1].id
        self._save(RelayState(
            position=position, published=state.published + len(batch), topic=self.topic,
            topic_id=state.topic_id, offsets={**state.offsets, **lowest},
        ))
        self.published_at = time.time()
        elapsed = max(time.monotonic() - started, 1e-6)
        log.info(
            "relay %s: published %d events to %s, position %d (%.0f events/s)",
            self.name, len(batch), self.topic, position, len(batch) / elapsed,
        )
        return len(batch)

    def run(self, stop: threading.Event, timeout: float = 0.5) -> None:
        """Publish until ``stop`` is set; broker and store failures are retried with backoff."""
        log.info("relay %s: publishing %s to %s (topic %s) from position %s",
                 self.name, self.schema, self.bootstrap, self.topic, self._safe_position())
        backoff = 0.0
        while not stop.is_set():
            self.ticked_at = time.monotonic()
            try:
                self.run_once(timeout)
            except Exception as error:  # an unexpected failure: start over from the stored position
                log.error("relay %s: unexpected error: %s", self.name, traced(error))
                self._failed(error)
                self.close()
                self._state = None
                self._checked_at = None
            if self.last_error is None:
                backoff = 0.0
                continue
            backoff = min(max(backoff * 2, 0.5), 5.0)
            stop.wait(backoff)
        log.info("relay %s: stopped at position %s", self.name, self._safe_position())

    def beat(self, within: float = 35.0) -> Beat:
        """For the heartbeats: alive while :meth:`run` comes round its loop (a call to the broker
        may take up to its request timeouts)."""
        ticked = self.ticked_at is not None and time.monotonic() - self.ticked_at < within
        detail = f"position {self._safe_position()}" if self.last_error is None else (
            f"cannot publish: {type(self.last_error).__name__}")
        return Beat(ticked, self.published_at, detail)

    def _safe_position(self) -> int | str:
        try:
            return self.position
        except (PersistenceError, psycopg.Error):
            return "?"

    def close(self) -> None:
        self._restart_feed()
        self._close_clients()

    def __enter__(self) -> Relay:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
