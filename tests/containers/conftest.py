"""The integration, pipeline and stream suites against real servers: the ``pgvector/pgvector`` and
``apache/kafka`` images, started once per session through ``testcontainers``.

    make test-containers        # PALIMPSEST_TEST_CONTAINERS=1 pytest tests/containers

Each ``test_*.py`` here runs one suite of ``tests/integration`` (or ``tests/stream``) again; this
conftest gives it the fixtures ``tests/integration/conftest.py`` gives its own — ``pg_settings``,
``admin_db``, ``runtime_db``, ``broker``, ``app``, ``projector`` — backed by the containers:
``pg_settings.database_url`` names the container's superuser (the embedded server's place), with
the role passwords the image's password authentication asks for, and ``broker.bootstrap`` the Kafka
container. The same database address and passwords go into the environment of this process, so
the commands the tests start as processes (``{**os.environ, …}``) reach the same server.

Without ``PALIMPSEST_TEST_CONTAINERS=1`` nothing here is collected: ``make test`` is unaffected.
With it and no Docker engine answering, every suite is skipped for that one reason (one line of
the summary); :func:`test_coverage.test_every_suite_runs_here_or_says_why_not` still runs.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import SecretStr

from infra.postgres import Database, admin_database, bootstrap, runtime_database
from infra.settings import Settings
from tests.integration.conftest import app, projector  # noqa: F401 - the same fixtures, here

SWITCH = "PALIMPSEST_TEST_CONTAINERS"
HERE = "tests/containers/"
POSTGRES_IMAGE = "pgvector/pgvector:pg17"
KAFKA_IMAGE = "apache/kafka:3.9.1"
#: The image authenticates by password: each role gets one (throwaway servers, throwaway secrets).
PASSWORDS = {"PALIMPSEST_RUNTIME_PASSWORD": "runtime-in-a-container",
             "PALIMPSEST_PROJECTOR_PASSWORD": "projector-in-a-container"}

if os.environ.get(SWITCH) != "1":
    collect_ignore_glob = ["test_*.py"]


#: Tests of the mirrored suites that cannot reach the containers, and why.
DATA_FOLDER_ONLY = {
    "test_mcp.py::test_stdio_serves_the_same_tools_with_the_keys_tenant":
        "spawns `palimpsest mcp` with an environment of its own that names only the data folder, "
        "so it reaches that folder's embedded server, not the container",
}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "without_docker: runs whether or not a Docker engine answers")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # a session hook: it sees every item of the run, the embedded suites' too
    ours = [item for item in items if item.nodeid.startswith(HERE)]
    if not ours or problem(config) is not None:
        return  # nothing of ours, or every test of ours is skipped for that one reason
    for item in ours:
        reason = DATA_FOLDER_ONLY.get(item.nodeid.removeprefix(HERE))
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"embedded only: {reason}"))


@dataclass(frozen=True)
class Servers:
    """Where the session's servers answer."""

    database_url: str
    kafka_bootstrap: str


@dataclass(frozen=True)
class KafkaServer:
    """What the suites ask of the ``broker`` fixture: its address. (Tests that stop or kill a
    broker start one of their own.)"""

    bootstrap: str


def docker_problem() -> str | None:
    """Why the containers cannot run here, or None when a Docker engine answers."""
    try:
        from testcontainers.core.docker_client import DockerClient
    except ImportError as error:
        return f"testcontainers is not installed ({error}): pip install -e '.[dev]'"
    try:
        DockerClient().client.ping()
    except Exception as error:  # docker-py raises several kinds for a missing or refusing engine
        detail = str(error).splitlines()[0] if str(error) else type(error).__name__
        return f"no Docker engine answers ({detail[:160]})"
    return None


def apache_kafka(image: str = KAFKA_IMAGE) -> Any:
    """testcontainers' ``KafkaContainer`` on the ``apache/kafka`` image, one KRaft node.

    ``KafkaContainer`` starts a script it writes once the mapped port is known (the advertised
    listener must name it); its own script runs the Confluent image's entry points. This one sets
    the same listeners for the Apache image and runs its entry point, ``/etc/kafka/docker/run``."""
    try:
        from testcontainers.community.kafka import KafkaContainer
    except ImportError:  # testcontainers before the community namespace
        from testcontainers.kafka import KafkaContainer

    class ApacheKafkaContainer(KafkaContainer):  # type: ignore[misc, valid-type]
        def configure(self) -> None:
            self.wait_for = re.compile(r".*Kafka Server started.*")
            self.with_env("CLUSTER_ID", self.cluster_id)
            self.with_env("KAFKA_NODE_ID", "1")
            self.with_env("KAFKA_PROCESS_ROLES", "broker,controller")
            self.with_env("KAFKA_LISTENERS", f"{self.listeners},CONTROLLER://0.0.0.0:9094")
            self.with_env("KAFKA_LISTENER_SECURITY_PROTOCOL_MAP",
                          f"{self.security_protocol_map},CONTROLLER:PLAINTEXT")
            self.with_env("KAFKA_CONTROLLER_LISTENER_NAMES", "CONTROLLER")
            self.with_env("KAFKA_CONTROLLER_QUORUM_VOTERS", "1@localhost:9094")
            self.with_env("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1")
            self.with_env("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1")

        def tc_start(self) -> None:
            host = self.get_container_host_ip()
            port = self.get_exposed_port(self.port)
            script = ("#!/bin/sh\n"
                      f"export KAFKA_ADVERTISED_LISTENERS={self.listener_name}://{host}:{port},"
                      "BROKER://$(hostname -i | cut -d' ' -f1):9092\n"
                      "exec /etc/kafka/docker/run\n")
            self.create_file(script.encode(), KafkaContainer.TC_START_SCRIPT)

    return ApacheKafkaContainer(image)


def start_containers(stack: contextlib.ExitStack) -> Servers:
    """PostgreSQL (pgvector) and Kafka in containers, stopped when ``stack`` closes."""
    try:
        from testcontainers.community.postgres import PostgresContainer
    except ImportError:  # testcontainers before the community namespace
        from testcontainers.postgres import PostgresContainer

    postgres = stack.enter_context(PostgresContainer(
        POSTGRES_IMAGE, username="palimpsest", password="palimpsest-in-a-container",
        dbname="palimpsest", driver=None))
    kafka = stack.enter_context(apache_kafka())
    return Servers(database_url=postgres.get_connection_url(driver=None),
                   kafka_bootstrap=kafka.get_bootstrap_server())


_PROBLEM = pytest.StashKey[str | None]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip, before any fixture, when no Docker engine answers (asked once a session). Raised here
    rather than in a fixture, every skip has this one location: one line in the summary."""
    if item.get_closest_marker("without_docker") is not None:
        return
    found = problem(item.config)
    if found is not None:
        pytest.skip(f"the container suites need Docker: {found}")


def problem(config: pytest.Config) -> str | None:
    """:func:`docker_problem`, asked once a session."""
    if _PROBLEM not in config.stash:
        config.stash[_PROBLEM] = docker_problem()
    return config.stash[_PROBLEM]


@pytest.fixture(scope="session")
def servers() -> Iterator[Servers]:
    with contextlib.ExitStack() as stack:
        found = start_containers(stack)
        # the commands the tests start as processes reach the same server as the fixtures
        wanted = {"PALIMPSEST_DATABASE_URL": found.database_url, **PASSWORDS}
        saved = {name: os.environ.get(name) for name in wanted}
        os.environ.update(wanted)
        try:
            yield found
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


@pytest.fixture(scope="session")
def pg_settings(servers: Servers, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    # Bootstrapped once by ``admin_db``; the applications the tests make skip it.
    return Settings(
        persistence="postgres", data_dir=tmp_path_factory.mktemp("palimpsest"), auto_bootstrap=False,
        database_url=SecretStr(servers.database_url),
        runtime_password=SecretStr(PASSWORDS["PALIMPSEST_RUNTIME_PASSWORD"]),
        projector_password=SecretStr(PASSWORDS["PALIMPSEST_PROJECTOR_PASSWORD"]),
    )


@pytest.fixture(scope="session")
def admin_db(pg_settings: Settings) -> Database:
    admin = admin_database(pg_settings)
    bootstrap(admin, pg_settings)
    return admin


@pytest.fixture(scope="session")
def runtime_db(admin_db: Database, pg_settings: Settings) -> Database:
    return runtime_database(admin_db, pg_settings)


@pytest.fixture(scope="session")
def broker(servers: Servers) -> KafkaServer:
    return KafkaServer(servers.kafka_bootstrap)
