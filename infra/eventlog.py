"""The event store's log, opened without the command side: the processes that only read it —
the relay, the projector's catch-up, replay and status — open it here, so nothing below
``services`` imports the services.

:func:`event_store_env` is the eventsourcing environment of the configured store (PostgreSQL as
the runtime role, bootstrapped first when ``auto_bootstrap`` is on; or memory); the command side
(``services.factory.create_app``) is built on the same one. :class:`EventLog` reads and decodes
what the command side stores: the same event table (its ``name``) and the same transcodings.
"""

from __future__ import annotations

from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import EventStore, JSONTranscoder, Mapper

from infra.keyring import KeyRing, open_keyring
from infra.postgres import admin_database, bootstrap, runtime_database
from infra.sealing import SealedEventStore, sealing_mapper
from infra.settings import Settings
from infra.transcodings import register_domain_transcodings

#: The application name the event table is named after (``palimpsest_events``).
STORE_NAME = "Palimpsest"


def event_store_env(settings: Settings) -> dict[str, str]:
    """The eventsourcing environment of the configured store; PostgreSQL is bootstrapped first
    when ``settings.auto_bootstrap`` is on."""
    env = settings.eventsourcing_env()
    if settings.persistence != "postgres":
        return env
    admin = admin_database(settings)
    if settings.auto_bootstrap:
        bootstrap(admin, settings)
    runtime = runtime_database(admin, settings)
    return settings.eventsourcing_env(host=runtime.host, port=runtime.port, dbname=runtime.dbname,
                                      user=runtime.user, password=runtime.password)


class EventLog(Application[UUID]):
    """The command side's event store, its recorder and mapper, for reading (and for the
    projection's own decisions, :mod:`projections.decisions`)."""

    name = STORE_NAME

    def __init__(self, env: dict[str, str], keyring: KeyRing | None = None) -> None:
        self.keyring = keyring
        super().__init__(env=env)

    def register_transcodings(self, transcoder: JSONTranscoder) -> None:
        super().register_transcodings(transcoder)
        register_domain_transcodings(transcoder)

    def construct_mapper(self) -> Mapper[UUID]:
        return sealing_mapper(self.construct_transcoder(), self.keyring) or super().construct_mapper()

    def construct_event_store(self) -> EventStore[UUID]:
        return SealedEventStore(mapper=self.mapper, recorder=self.recorder)


def open_event_log(settings: Settings) -> EventLog:
    env = event_store_env(settings)
    return EventLog(env=env, keyring=open_keyring(settings) if settings.seal_events else None)
