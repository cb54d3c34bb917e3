"""``palimpsest ingest-worker``: the extraction worker (:class:`services.ingest.worker.IngestWorker`)
as a process of its own, following the ingest topic until SIGINT/SIGTERM.

It joins the consumer group ``settings.ingest_group`` (several workers share the topic's
partitions), commits offsets only after a batch's turns are applied or dead-lettered, and beats
as ``ingest`` in the heartbeats table. Without an LLM configured it says so and waits: the turns
stay stored as episodic records and on the topic, and are extracted once a worker with an LLM
starts. ``serve`` runs it as a supervised child when extraction is on.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from infra.heartbeats import Beat
from infra.postgres import admin_database, bootstrap, runtime_database
from infra.processes import Kafka, heartbeats, process_shutdown, wait_for_broker, watch
from infra.settings import Settings
from services.factory import create_app, create_ingest_worker
from services.ingest.extraction import extraction_off_reason

log = logging.getLogger(__name__)


def run_ingest_worker(settings: Settings, bootstrap_servers: str | None = None,
                      stop: threading.Event | None = None) -> int:
    """Run until stopped; 0. ``bootstrap_servers``: the broker (default: the configured Kafka,
    or the data folder's embedded broker, kept up here)."""
    shutdown = process_shutdown("ingest", settings, stop)
    off = extraction_off_reason(settings)
    if off is not None:
        log.warning("ingest worker: %s; turns are stored and searchable as episodic records", off)
        shutdown.stop.wait()
        shutdown.done()
        return 0
    kafka = None
    if bootstrap_servers is None:
        kafka = Kafka(settings)
        watch(shutdown, kafka)
        bootstrap_servers = kafka.bootstrap
    if settings.auto_bootstrap:
        bootstrap(admin_database(settings), settings)
    settings = settings.model_copy(update={"auto_bootstrap": False})
    app = create_app(settings)
    worker = create_ingest_worker(settings, app)
    started = time.time()
    beats = heartbeats(runtime_database(admin_database(settings), settings).connect, settings,
                       ingest=lambda: Beat(True, started, f"{worker.applied} turn(s) applied, "
                                           f"{worker.dead_lettered} dead-lettered"))
    consumer = None
    try:
        if not wait_for_broker(bootstrap_servers, shutdown.stop):
            return 0
        consumer = ingest_consumer(settings, bootstrap_servers)
        worker.warm_up()  # the embedding model loaded before the first turn, not during it
        log.warning("ingest worker: extracting turns of %s with %s at %s", settings.kafka_ingest_topic,
                    settings.llm_model, settings.llm_base_url)
        worker.run(consumer, shutdown.stop, batch=settings.ingest_batch)
        return 0
    finally:
        if consumer is not None:
            consumer.close(autocommit=False)
        beats.stop()
        worker.close()
        app.close()
        if kafka is not None:
            kafka.close()
        shutdown.done()


def ingest_consumer(settings: Settings, bootstrap_servers: str) -> Any:
    """A kafka-python consumer of the ingest topic in the worker's group: offsets committed by
    the worker, a new group reads the topic from its start."""
    from kafka import KafkaConsumer

    return KafkaConsumer(
        settings.kafka_ingest_topic, bootstrap_servers=bootstrap_servers,
        group_id=settings.ingest_group, enable_auto_commit=False, auto_offset_reset="earliest",
        session_timeout_ms=settings.kafka_session_timeout_ms, heartbeat_interval_ms=1_000,
        max_poll_records=settings.ingest_batch,
        # a batch may take every retry of every turn: the group must not think the worker dead
        max_poll_interval_ms=max(300_000, int(1000 * settings.ingest_batch * settings.llm_timeout_seconds
                                              * (settings.llm_retries + 1))),
        fetch_max_wait_ms=100, request_timeout_ms=max(30_000, settings.kafka_session_timeout_ms + 5_000),
        reconnect_backoff_max_ms=1_000, client_id="palimpsest-ingest")
