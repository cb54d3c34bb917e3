"""Builds the application from settings: the one place processes are wired."""

from __future__ import annotations

from infra.postgres import admin_database, bootstrap, runtime_database
from infra.settings import Settings
from services.application import Clock, utc_now
from services.memory import Palimpsest


def create_app(
    settings: Settings | None = None, clock: Clock = utc_now,
    app_class: type[Palimpsest] = Palimpsest,
) -> Palimpsest:
    """The command side on the configured store; PostgreSQL is bootstrapped first."""
    settings = settings or Settings()
    env = settings.eventsourcing_env()
    if settings.persistence == "postgres":
        admin = admin_database(settings)
        if settings.auto_bootstrap:
            bootstrap(admin, settings)
        runtime = runtime_database(admin, settings)
        env = settings.eventsourcing_env(
            host=runtime.host, port=runtime.port, dbname=runtime.dbname, user=runtime.user,
            password=runtime.password,
        )
    return app_class(
        env=env, policy=settings.policy(), clock=clock,
        conflict_retries=settings.conflict_retries,
    )
