"""Builds the command and query sides from settings: the one place processes are wired."""

from __future__ import annotations

from typing import TYPE_CHECKING

from infra.eventlog import event_store_env
from infra.keyring import open_keyring
from infra.postgres import admin_database, bootstrap, runtime_database
from infra.settings import Settings
from services.command.application import Clock, utc_now
from services.command.memory import Palimpsest
from services.query.queries import Queries

if TYPE_CHECKING:
    from services.ingest.worker import IngestWorker


def create_app(
    settings: Settings | None = None, clock: Clock = utc_now,
    app_class: type[Palimpsest] = Palimpsest,
) -> Palimpsest:
    """The command side on the configured store; PostgreSQL is bootstrapped first."""
    settings = settings or Settings()
    return app_class(
        env=event_store_env(settings), policy=settings.policy(), clock=clock,
        conflict_retries=settings.conflict_retries, group_commit=settings.group_commit,
        keyring=open_keyring(settings) if settings.seal_events else None,
    )


def create_queries(settings: Settings | None = None, clock: Clock = utc_now) -> Queries:
    """The query side: read models as the runtime role, the retriever with its breakers and the
    query embedder (the projection's model, so vectors compare)."""
    from infra.embedders import create_embedder
    from infra.postgres import vector_search_available
    from services.query.readmodels import ReadModels
    from services.query.retrieval.retriever import Retriever

    settings = settings or Settings()
    admin = admin_database(settings)
    if settings.auto_bootstrap:
        bootstrap(admin, settings)
    read = ReadModels(runtime_database(admin, settings), settings.read_schema,
                      pool_size=settings.retrieval.connections)
    embedder = create_embedder(settings)
    retriever = Retriever(read, settings.read_schema, settings.retrieval, embedder,
                          vector_search=vector_search_available(settings))
    retriever.warm_up()
    return Queries(read, retriever, settings, clock)


def create_ingest_worker(settings: Settings, app: Palimpsest) -> IngestWorker:
    """The extraction worker over ``app``: the model, the read models it reads each turn's
    catalogue and earlier turns from (as the runtime role), and the embedder slot resolution
    and grounding weigh with."""
    from infra.embedders import create_embedder
    from services.ingest.admission import Admission
    from services.ingest.catalogue import ReadModelCatalogue, Similarity
    from services.ingest.extraction import Extractor, Shown
    from services.ingest.resolution import Thresholds
    from services.ingest.worker import IngestWorker
    from services.query.readmodels import ReadModels

    read = ReadModels(runtime_database(admin_database(settings), settings), settings.read_schema,
                      pool_size=2)
    admission = Admission(Similarity(create_embedder(settings)),
                          Thresholds(reuse=settings.ingest_label_reuse, near=settings.ingest_label_near),
                          settings.ingest_grounding_floor)
    return IngestWorker(app, Extractor.from_settings(settings), concurrency=settings.ingest_concurrency,
                        catalogue=ReadModelCatalogue(read), admission=admission,
                        shown=Shown.from_settings(settings))
