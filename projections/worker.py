"""The embedding projection's loop and lease, :func:`project_log` (the read models brought up to
the log's head without Kafka) and :func:`start_requests` (the parked-event requests of the HTTP
processes carried out). The projector process that runs the first is
:mod:`services.entrypoints.projector`; ``serve``'s own process runs the last."""

from __future__ import annotations

import logging
import threading
from typing import Any

from infra.postgres import Database, Lease, admin_database, projector_database
from infra.redact import traced
from infra.settings import Settings
from projections.embeddings import EmbeddingProjection
from projections.replay import catch_up, make_projector

log = logging.getLogger(__name__)


def embedding_loop(projection: EmbeddingProjection, stop: threading.Event,
                   idle: float = 0.5, lease: Lease | None = None, window: float = 0.0) -> None:
    """Embed what is pending until ``stop``; with ``lease``, only while this process holds it
    (several projector processes share the read models: one embeds, the others stand by).

    With nothing pending it waits for a projector to apply cards (:meth:`EmbeddingProjection.wait`,
    at most ``idle`` seconds: a stop is seen within that), then ``window`` seconds more, so that
    the cards of the writes that follow are embedded in one batch: the offline encoder does twice
    the texts per CPU-second at batches of 16 as one at a time (``bench_embedding``)."""
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
                if projection.embed_pending() == 0 and projection.wait(idle) and window:
                    stop.wait(window)
            except Exception as error:  # a model or database hiccup: log it, retry after a pause
                log.error("embedding projection failed; retrying: %s", traced(error))
                stop.wait(5.0)
    finally:
        projection.close()
        if lease is not None:
            lease.release()


def embedding_lease(settings: Settings, admin: Database | None = None) -> Lease:
    """The lease of embedding the read models in ``settings.read_schema``: one process at a time."""
    db = projector_database(admin or admin_database(settings), settings)
    return Lease(db.connect, f"palimpsest embeddings {settings.read_schema}")


def embedding_projection(settings: Settings, admin: Database | None = None,
                         keyring: Any = None) -> EmbeddingProjection:
    """The embedding projection as the projector role, its embedder behind the vector cache,
    whose entries are keyed by the tenants' keys in ``keyring`` (by default the configured ring,
    when events are sealed)."""
    from infra.embedders import CacheKeys, create_embedder
    from infra.keyring import open_keyring

    db = projector_database(admin or admin_database(settings), settings)
    if keyring is None and settings.seal_events:
        keyring = open_keyring(settings)
    embedder = create_embedder(settings, connect=db.connect, keys=CacheKeys(keyring))
    return EmbeddingProjection(db.connect, settings.read_schema, embedder)


def start_requests(settings: Settings, app: Any, monitor: Database, stop: threading.Event,
                   interval: float = 1.0) -> threading.Thread:
    """Carry out the requests to retry or skip a parked event (:mod:`projections.requests`) on a
    daemon thread until ``stop``: ``app``'s log (the runtime role's: a skip is a decision in it),
    the projector role's ``monitor``; one process at a time among those on the read models."""
    from projections.requests import RequestKeeper

    lease = Lease(monitor.connect, f"palimpsest parked-event requests {settings.read_schema}")
    keeper = RequestKeeper(monitor, settings.read_schema, app,
                           lambda: make_projector(settings, app, projector_db=monitor), stop,
                           lease, interval)
    return keeper.start()


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
    if projector.parked:  # poison parks its aggregate: the rest is applied
        log.warning("%d event(s) parked: `palimpsest failures` lists them", projector.parked)
    embedded = (embedding_projection(settings, admin, getattr(app, "keyring", None)).embed_all()
                if settings.projector_embeddings else 0)
    return applied, embedded
