"""The projector process: catch up from the log, then follow Kafka with Faust; embeddings in a
thread of their own so the cards projection never waits on a model."""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any

from infra.locale_check import check_cjk_support
from infra.postgres import Database, Lease, admin_database, bootstrap, projector_database
from infra.settings import Settings
from projections.embeddings import EmbeddingProjection
from projections.faust_app import POISON_EXIT, Outcome, create_faust_app
from projections.projector import ProjectionError
from projections.replay import catch_up, make_projector
from projections.text import warm_up
from services.factory import create_app

log = logging.getLogger(__name__)


def embedding_loop(projection: EmbeddingProjection, stop: threading.Event,
                   idle: float = 0.5, lease: Lease | None = None) -> None:
    """Embed what is pending until ``stop``; with ``lease``, only while this process holds it
    (several projector processes share the read models: one embeds, the others stand by)."""
    standing_by = False
    try:
        while not stop.is_set():
            try:
                if lease is not None and not lease.held():
                    if not standing_by:
                        log.info("lease %r is held by another process: standing by", lease.name)
                    standing_by = True
                    stop.wait(idle * 4)
                    continue
                standing_by = False
                if projection.embed_pending() == 0:
                    stop.wait(idle)
            except Exception:  # a model or database hiccup: log it, retry after a pause
                log.exception("embedding projection failed; retrying")
                stop.wait(5.0)
    finally:
        if lease is not None:
            lease.release()


def embedding_lease(settings: Settings, admin: Database | None = None) -> Lease:
    """The lease of embedding the read models in ``settings.read_schema``: one process at a time."""
    db = projector_database(admin or admin_database(settings), settings)
    return Lease(db.connect, f"palimpsest embeddings {settings.read_schema}")


def embedding_projection(settings: Settings, admin: Database | None = None) -> EmbeddingProjection:
    """The embedding projection as the projector role, its embedder behind the vector cache."""
    from infra.embedders import create_embedder

    db = projector_database(admin or admin_database(settings), settings)
    embedder = create_embedder(settings, connect=db.connect)
    return EmbeddingProjection(db.connect, settings.read_schema, embedder)


def start_embeddings(settings: Settings, stop: threading.Event) -> threading.Thread:
    projection = embedding_projection(settings)
    thread = threading.Thread(target=embedding_loop, args=(projection, stop),
                              kwargs={"lease": embedding_lease(settings)}, daemon=True,
                              name="embeddings")
    thread.start()
    return thread


def run_projector(settings: Settings, bootstrap_servers: str | None = None) -> int:
    """Run until stopped; the exit code is 0, or ``POISON_EXIT`` after an unappliable event."""
    from infra.broker import kafka_bootstrap

    broker = None
    if bootstrap_servers is None:  # the configured Kafka, or the data folder's embedded broker
        bootstrap_servers, broker = kafka_bootstrap(settings, settings.data_dir)
    try:
        return _run_projector(settings, bootstrap_servers)
    finally:
        if broker is not None:
            broker.stop()


def _run_projector(settings: Settings, servers: str) -> int:
    admin = admin_database(settings)
    if settings.auto_bootstrap:
        bootstrap(admin, settings)
    with projector_database(admin, settings).connect() as conn:
        check_cjk_support(conn)  # refuse to start where Chinese fuzzy matching would silently fail
    app = create_app(settings.model_copy(update={"auto_bootstrap": False}))
    projector = make_projector(settings, app, admin=admin)
    stop = threading.Event()
    try:
        caught = catch_up(projector, app, batch=settings.projector_batch)
        log.info("caught up %d event(s) from the log", caught)
    except ProjectionError as error:
        log.critical("projector stopped: %s", error)
        return POISON_EXIT
    if settings.projector_embeddings:
        start_embeddings(settings, stop)
    warm_up()  # the tokenizer loads now, not inside the first batch while its partition waits
    outcome = Outcome()
    worker_app = create_faust_app(settings, servers, app, projector, outcome)
    try:
        _run_worker(worker_app)
    finally:
        stop.set()
        projector.close()
        app.close()
    return POISON_EXIT if outcome.poisoned else 0


def _run_worker(worker_app: Any) -> None:
    import faust

    worker = faust.Worker(worker_app, loglevel="WARNING", quiet=True, redirect_stdouts=False)
    with contextlib.suppress(SystemExit):  # the worker exits the process when it stops
        worker.execute_from_commandline()


def run_pipeline(settings: Settings) -> int:
    """Broker (embedded unless configured), relay and projector in one process: the embedded
    profile's whole write-to-read-model path."""
    from infra.broker import ensure_topic, kafka_bootstrap
    from infra.relay import Relay

    admin = admin_database(settings)
    if settings.auto_bootstrap:
        bootstrap(admin, settings)
    servers, broker = kafka_bootstrap(settings, settings.data_dir)
    ensure_topic(servers, settings.kafka_topic, settings.kafka_partitions)
    settings = settings.model_copy(update={"auto_bootstrap": False})
    app = create_app(settings)
    stop = threading.Event()
    relay = Relay.from_settings(app.recorder, settings, servers)  # type: ignore[arg-type]
    thread = threading.Thread(target=relay.run, args=(stop,), name="relay", daemon=True)
    thread.start()
    log.warning("pipeline: broker %s, relay and projector running; Ctrl-C stops", servers)
    try:
        return run_projector(settings, bootstrap_servers=servers)
    finally:
        stop.set()
        thread.join(timeout=10)
        relay.close()
        app.close()
        if broker is not None:
            broker.stop()


def project_log(settings: Settings, app: Any, admin: Database | None = None) -> tuple[int, int]:
    """Bring the read models up to the log's head without Kafka (the demo, tests, one-off jobs):
    the cards projection from its position, then every missing embedding. Returns (events applied,
    cards embedded)."""
    admin = admin or admin_database(settings)
    projector = make_projector(settings, app, admin=admin)
    try:
        applied = catch_up(projector, app, batch=settings.projector_batch)
    finally:
        projector.close()
    embedded = embedding_projection(settings, admin).embed_all() if settings.projector_embeddings else 0
    return applied, embedded
