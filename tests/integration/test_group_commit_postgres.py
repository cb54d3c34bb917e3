"""Group commit (``services.command.commit``) on the PostgreSQL event store: concurrent commands
share one transaction and each gets its own position, the last of its own events in the log; a
race lost inside a batch makes the store refuse the batch, which is then saved one decision at a
time, so only the loser decides again."""

from __future__ import annotations

from typing import Any

import pytest

from domain.slot import Slot
from infra.postgres import Database
from infra.settings import Settings
from services.command.application import utc_now
from services.factory import create_app
from tests.support import new_tenant, state
from tests.unit.test_group_commit import HeldApp, run_all

pytestmark = pytest.mark.integration


def held_app(pg_settings: Settings, queued: int, **settings: Any) -> HeldApp:
    cls = type("Held", (HeldApp,), {"queued": queued})
    return create_app(pg_settings.model_copy(update=settings), clock=utc_now,  # type: ignore[return-value]
                      app_class=cls)


def positions(app: HeldApp, aggregate_id: Any) -> list[int]:
    """The log's notification ids of every event of ``aggregate_id``."""
    start, found = 1, []
    while batch := app.recorder.select_notifications(start=start, limit=10_000):
        found += [n.id for n in batch if n.originator_id == aggregate_id]
        start = batch[-1].id + 1
    return found


def test_concurrent_commands_share_one_postgres_transaction(admin_db: Database,
                                                            pg_settings: Settings) -> None:
    app, tenant = held_app(pg_settings, queued=5), new_tenant()
    try:
        first = run_all([lambda: app.remember(tenant, state("label-0", "value 0"))] + [
            lambda i=i: (app.first.wait(10), app.remember(tenant, state(f"label-{i}", f"value {i}")))[1]
            for i in range(1, 6)])
        results, errors = first
        assert errors == []
        assert len(app.transactions) == 2, app.transactions  # the held one, then the five together
        assert app.transactions[1] == 5 * app.transactions[0]
        for result in results:  # each answer's position is the last of its own events
            own = positions(app, result.aggregate_id)
            assert own and result.position == max(own)
        assert len({r.position for r in results}) == 6
    finally:
        app.close()


def test_a_race_lost_inside_a_postgres_batch_reaches_only_its_command(
        admin_db: Database, pg_settings: Settings) -> None:
    app, tenant = held_app(pg_settings, queued=0, conflict_retries=3), new_tenant()
    try:
        app.locks = None  # without the aggregate locks, two writers of one slot share a batch
        app.remember(tenant, state("address", "Taipei"))
        app.transactions.clear()
        app.queued = 4

        def after_the_first(command: Any) -> Any:  # queued behind the held transaction
            return lambda: (app.first.wait(10), app.remember(tenant, command))[1]

        results, errors = run_all(
            [after_the_first(state("address", "Tainan")),
             after_the_first(state("address", "Kaohsiung")),
             after_the_first(state("diet", "vegan")),
             after_the_first(state("employer", "Acme")),
             lambda: app.remember(tenant, state("city", "Hsinchu"))])
        assert errors == []
        held, batch, *alone = app.transactions
        # the city alone, then the four together refused, then each alone (the loser twice)
        assert held < batch and len(alone) >= 4, app.transactions
        address = app.load(tenant, results[0].aggregate_id, Slot)
        assert results[1].aggregate_id == address.id
        assert len(positions(app, address.id)) == address.version  # no event stored twice
        assert {card.value for card in address.cards.values()} >= {"Tainan", "Kaohsiung"}
        for result, label in zip(results[2:], ("diet", "employer", "city"), strict=True):
            slot = app.load(tenant, result.aggregate_id, Slot)  # stored once each
            assert slot.label == label and len(slot.current_cards) == 1
            assert len(positions(app, slot.id)) == slot.version
    finally:
        app.close()
