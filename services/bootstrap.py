"""The composition root: everything a serving process needs, built from ``Settings`` in one place.

The edges (REST, MCP, the CLI's local commands, ``serve``) call :func:`build_services` and hand
the result to their use cases; nothing else wires the command side, the query side and the keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from infra.postgres import Database
from infra.settings import Settings
from services.command.application import Clock, utc_now
from services.command.memory import Palimpsest
from services.factory import create_app, create_queries
from services.keys import KeyStore, MemoryKeyStore, PostgresKeyStore
from services.query.overlay_erasures import ErasedCards
from services.query.pending import PendingWrites
from services.query.queries import Queries
from services.query.readmodels import ReadModels


@dataclass
class Services:
    settings: Settings
    #: The command side.
    app: Palimpsest
    #: Search, facts, history, briefing and the context, on the read models.
    queries: Queries
    keys: KeyStore
    #: Per tenant, the writes this process accepted that the read models may not hold yet: the
    #: read-your-writes overlay of search.
    pending: PendingWrites = field(default_factory=PendingWrites)
    #: The projector role's database, for metrics and the parked-event requests ``serve``
    #: carries out (it reads every tenant's bookkeeping); None in an HTTP process, which holds no
    #: cross-tenant role (decision 0018).
    monitor: Database | None = None

    def close(self) -> None:
        self.queries.close()
        self.app.close()
        self.keys.close()


@dataclass
class Background:
    """What ``serve``'s own process needs when HTTP workers answer the requests: the command side
    (the relays follow its log; consolidation proposes and retention erases through it), the read
    models those jobs read, the key store (the local key) and the projector role's database — no
    query side (no embedding model loaded where no question is asked)."""

    app: Palimpsest
    read: ReadModels
    keys: KeyStore
    monitor: Database | None
    #: Whether :meth:`close` closes them (not when they are a :class:`Services`' own).
    owned: bool = True

    @classmethod
    def of(cls, services: Services) -> Background:
        return cls(services.app, services.queries.read, services.keys, services.monitor, owned=False)

    def close(self) -> None:
        if self.owned:
            self.read.close()
            self.app.close()
            self.keys.close()


def build_background(settings: Settings, *, clock: Clock = utc_now) -> Background:
    """The command side, the read models (as the runtime role, a small pool) and the key store;
    PostgreSQL bootstrapped once first (when ``auto_bootstrap``)."""
    from infra.postgres import admin_database, runtime_database

    app = create_app(settings, clock)
    settled = settings.model_copy(update={"auto_bootstrap": False})
    read = ReadModels(runtime_database(admin_database(settled), settled), settled.read_schema,
                      pool_size=2)
    return Background(app, read, create_key_store(settled, clock=clock), monitor(settled))


def build_services(settings: Settings | None = None, *, clock: Clock = utc_now,
                   http: bool = False) -> Services:
    """The command side, the query side and the key store on the configured backends; PostgreSQL
    is bootstrapped once first (when ``auto_bootstrap``). The read models are always PostgreSQL's.
    ``http``: for an HTTP process, every connection as the HTTP role (:func:`http_settings`), no
    projector role's ``monitor``."""
    settings = settings or Settings()
    if http and settings.persistence == "postgres":
        if settings.auto_bootstrap:
            from infra.postgres import admin_database, bootstrap

            bootstrap(admin_database(settings), settings)
        settings = http_settings(settings)
    app = create_app(settings, clock)
    bootstrapped = settings.model_copy(update={"auto_bootstrap": False}) \
        if settings.persistence == "postgres" else settings
    queries = create_queries(bootstrapped, clock)
    return Services(settings=settings, app=app, queries=queries,
                    keys=create_key_store(bootstrapped, clock=clock),
                    pending=PendingWrites(erasures=overlay_erasures(app, queries, settings)),
                    monitor=None if http else monitor(settings))


def overlay_erasures(app: Palimpsest, queries: Queries, settings: Settings) -> ErasedCards | None:
    """How the overlay learns of erasures other processes made (none without a key ring: nothing
    is ever erased)."""
    if app.keyring is None:
        return None
    return ErasedCards(app.keyring, queries.read, settings.event_schema)


def http_settings(settings: Settings) -> Settings:
    """``settings`` for an HTTP process: the HTTP role in the runtime role's place — the command
    side, the key ring, the key store and the read models connect as it, so every row they touch
    is the request's tenant's (row-level security: ``infra.tenancy``) — and no bootstrap (it is
    the administrator's, done before)."""
    return settings.model_copy(update={"runtime_role": settings.http_role,
                                       "runtime_password": settings.http_password,
                                       "auto_bootstrap": False})


def monitor(settings: Settings) -> Database:
    """The projector role's database: it reads every tenant's bookkeeping (status, metrics)."""
    from infra.postgres import admin_database, projector_database

    return projector_database(admin_database(settings), settings)


def create_key_store(settings: Settings, *, clock: Clock = utc_now) -> KeyStore:
    """The keys in PostgreSQL as the runtime role, or in the process for ``persistence=memory``."""
    pepper = settings.key_pepper.get_secret_value() if settings.key_pepper else None
    if settings.persistence == "memory":
        return MemoryKeyStore(pepper, clock)
    from infra.postgres import admin_database, bootstrap, runtime_database

    admin = admin_database(settings)
    if settings.auto_bootstrap:
        bootstrap(admin, settings)
    return PostgresKeyStore(runtime_database(admin, settings), settings.event_schema, pepper, clock,
                            pool_size=settings.pool_size)
