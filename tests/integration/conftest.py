"""The embedded PostgreSQL, started once per test session into a temporary data folder."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

from infra.postgres import Database, admin_database, bootstrap, runtime_database, stop_embedded
from infra.settings import Settings

if TYPE_CHECKING:
    from services.command.memory import Palimpsest

# The console's fixtures, defined once for the session (one server, one browser):
from tests.integration.console_support import browser, console, console_errors, page  # noqa: F401


@pytest.fixture(scope="session")
def pg_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    # Bootstrapped once by ``admin_db``; the applications the tests make skip it.
    return Settings(
        persistence="postgres", data_dir=tmp_path_factory.mktemp("palimpsest"), auto_bootstrap=False
    )


@pytest.fixture(scope="session")
def admin_db(pg_settings: Settings):  # type: ignore[no-untyped-def]
    admin = admin_database(pg_settings)
    bootstrap(admin, pg_settings)
    yield admin
    # a projector killed with SIGKILL never leaves the server's handle list: stop it ourselves
    stop_embedded(pg_settings.data_dir)


@pytest.fixture(scope="session")
def runtime_db(admin_db: Database, pg_settings: Settings) -> Database:
    return runtime_database(admin_db, pg_settings)


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """One embedded Kafka broker (tansu, in-memory) per test session; its log is in a temp folder.

    Tests that restart a broker start their own: a restart empties every topic."""
    from infra.broker import EmbeddedBroker

    embedded = EmbeddedBroker(tmp_path_factory.mktemp("kafka"))
    embedded.start()
    yield embedded
    embedded.stop()


@pytest.fixture
def app(pg_settings: Settings, admin_db: Database):  # type: ignore[no-untyped-def]
    """An application on the session's server, its clock the tests' (``app.test_clock``); test
    modules that need another define their own."""
    from services.factory import create_app
    from tests.support import Clock

    clock = Clock()
    application = create_app(pg_settings, clock=clock)
    application.test_clock = clock  # type: ignore[attr-defined]
    yield application
    application.close()


@pytest.fixture
def projector(pg_settings: Settings, app, admin_db: Database):  # type: ignore[no-untyped-def]
    """The incremental projector as the projector role, on ``app``'s log."""
    from projections.replay import make_projector

    made = make_projector(pg_settings, app, admin=admin_db)
    yield made
    made.close()


@pytest.fixture
def processes(pg_settings: Settings, admin_db: object) -> Iterator[Callable[[], Palimpsest]]:
    """Makes command applications on the session's store, each with a cache of its own: as many
    processes on one store (``test_erasure_processes``, ``test_erasure_races``)."""
    from services.factory import create_app
    from tests.support import Clock

    made: list[Palimpsest] = []
    clock = Clock()

    def make() -> Palimpsest:
        made.append(create_app(pg_settings, clock=clock))
        return made[-1]

    yield make
    for app in made:
        app.close()
