"""The whole-system state machine (tests/machine.py), a short profile: its own embedded PostgreSQL
and broker, so the broker it kills and the log it replays are its own. ``make soak`` runs the same
machine for at least 10,000 steps."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from infra.embedded_pg import stop_embedded
from infra.postgres import admin_database, bootstrap, runtime_database
from infra.settings import Settings
from tests.machine import Env, SystemMachine, start_env

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    folder = tmp_path_factory.mktemp("machine")
    machine_settings = Settings(persistence="postgres", data_dir=folder, auto_bootstrap=False)
    admin = admin_database(machine_settings)
    bootstrap(admin, machine_settings)
    started = start_env(machine_settings, admin, runtime_database(admin, machine_settings),
                        folder / "kafka")
    yield started
    started.close()
    stop_embedded(folder)


def test_whole_system_state_machine(env: Env) -> None:
    SystemMachine.env = env
    run_state_machine_as_test(SystemMachine, settings=settings(
        max_examples=8, stateful_step_count=25, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]))
    assert env.steps >= 8 and env.checks >= 8, "the machine ran and compared"
    assert not env.divergences
