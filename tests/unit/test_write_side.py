"""The write-side scenarios on the in-memory event store."""

import threading
from typing import Any

import pytest

from domain.slot import Slot
from infra.settings import Settings
from services.command.application import utc_now
from services.factory import create_app
from tests.scenarios import WriteSideScenarios
from tests.support import new_tenant, state


class TestInMemory(WriteSideScenarios):
    @pytest.fixture
    def make_app(self):  # type: ignore[no-untyped-def]
        return lambda clock: create_app(Settings(persistence="memory"), clock=clock)


def test_four_threads_hammering_one_slot_take_turns() -> None:
    """The in-memory store's process-local locks: no retry error reaches a caller."""
    app, tenant = create_app(Settings(persistence="memory"), clock=utc_now), new_tenant()
    start, results, errors = threading.Barrier(4), [], []  # type: ignore[var-annotated]

    def hammer(writer: int) -> None:
        start.wait(timeout=10)
        for i in range(10):
            try:
                results.append(app.remember(tenant, state("address", f"City {writer}-{i}")))
            except Exception as error:  # noqa: BLE001 - the test asserts there is none
                errors.append(error)

    threads: list[Any] = [threading.Thread(target=hammer, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    slot = app.load(tenant, results[0].aggregate_id, Slot)
    assert errors == [] and len(results) == 40
    assert len(slot.current_cards) == 1 and len(slot.pending) == 1
