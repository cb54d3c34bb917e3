"""Every suite of ``tests/integration`` and ``tests/stream`` runs against the containers, or says why
it cannot; the fixtures the suites are given there are all given here. (Needs no Docker.)"""

from __future__ import annotations

from pathlib import Path

import pytest

import tests.containers.conftest as containers
import tests.integration.conftest as integration

pytestmark = pytest.mark.without_docker

HERE = Path(__file__).parent
TESTS = HERE.parent

#: Suites about the embedded servers themselves: they start, kill and restart servers in data
#: folders of their own, which a container does not replace.
EMBEDDED_ONLY = {
    "test_faults": "the embedded broker killed under `pipeline` and under `relay` + `project`, in "
                   "data folders of its own",
    "test_supervision": "the embedded broker's keeper: its process, its port, its takeover",
    "test_system_machine": "its own embedded PostgreSQL and broker, the broker SIGKILLed mid-run",
    "test_quickstart": "the README's quick start, which runs on the embedded default",
    "test_quickstart_serve": "the README's quick start with `palimpsest serve` on the embedded default",
    "test_serve": "`palimpsest serve` as a user runs it, on the embedded default of a data folder of "
                  "its own",
}

_FIXTURE = type(pytest.fixture(lambda: None))


def suites() -> set[str]:
    return {path.stem for folder in ("integration", "stream") for path in (TESTS / folder).glob("test_*.py")}


def test_every_suite_runs_here_or_says_why_not() -> None:
    mirrored = {path.stem for path in HERE.glob("test_*.py")} - {Path(__file__).stem}
    assert suites() - mirrored - EMBEDDED_ONLY.keys() == set(), "add tests/containers/<suite>.py"
    assert mirrored - suites() == set(), "a suite gone from tests/integration is still mirrored"
    assert EMBEDDED_ONLY.keys() <= suites()
    assert not mirrored & EMBEDDED_ONLY.keys()


def test_the_integration_fixtures_are_all_given_here() -> None:
    wanted = {name for name, value in vars(integration).items() if isinstance(value, _FIXTURE)}
    given = {name for name, value in vars(containers).items() if isinstance(value, _FIXTURE)}
    assert {"pg_settings", "admin_db", "runtime_db", "broker", "app", "projector"} <= wanted
    assert wanted - given == set()
