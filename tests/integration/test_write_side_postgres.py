"""The write-side scenarios on the embedded PostgreSQL, plus what only a real database shows:
racing writers, the append-only event table and the runtime role's privileges."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from domain.arbitration import ArbitrationCase
from domain.errors import StaleCardError
from domain.slot import Slot
from infra.postgres import EVENTS_TABLE, Database, bootstrap
from infra.settings import Settings
from services.command.application import utc_now
from services.command.commands import Revise
from services.command.memory import Palimpsest
from services.factory import create_app
from tests.scenarios import WriteSideScenarios
from tests.support import Clock, new_tenant, state

pytestmark = pytest.mark.integration


@pytest.fixture
def make_app(pg_settings: Settings, admin_db: Database):  # type: ignore[no-untyped-def]
    apps: list[Palimpsest] = []

    def make(clock: Clock, app_class: type[Palimpsest] = Palimpsest) -> Palimpsest:
        app = create_app(pg_settings, clock=clock, app_class=app_class)
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.close()


class TestOnPostgres(WriteSideScenarios):
    pass


class RacingApp(Palimpsest):
    """Holds its first save until the other writer has decided too. Without the aggregate locks
    (which would make the other writer wait for this one instead): what these tests show is that
    the store's version check settles a race the locks did not prevent."""

    barrier: threading.Barrier

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs, conflict_lock=False)

    def _save(self, aggregates: Any) -> Any:
        if not getattr(self, "_raced", False):
            self._raced = True
            self.barrier.wait(timeout=30)
        return super()._save(aggregates)


def race(make_app, clock, tenant, commands) -> tuple[list[Any], list[BaseException]]:  # type: ignore[no-untyped-def]
    barrier = threading.Barrier(len(commands))
    results: list[Any] = []
    errors: list[BaseException] = []

    def write(app: RacingApp, command: Any) -> None:
        app.barrier = barrier
        try:
            results.append(command(app))
        except BaseException as error:  # noqa: BLE001 - the test inspects what each writer got
            errors.append(error)

    apps = [make_app(clock, RacingApp) for _ in commands]  # made here: the test races writes only
    threads = [threading.Thread(target=write, args=(a, c)) for a, c in zip(apps, commands, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results, errors


def versions(app: Palimpsest, slot_id: Any) -> list[int]:
    return [e.originator_version for e in app.events.get(slot_id)]


class TestConcurrentWriters:
    def test_two_revisions_of_one_card_one_wins_one_conflicts(self, make_app) -> None:
        clock, tenant = Clock(), new_tenant()
        app = make_app(clock)
        first = app.remember(tenant, state("address", "Taipei"))
        clock.advance(days=1)
        revise = [
            lambda a, v=value: a.revise(
                tenant, first.aggregate_id, Revise(card_id=first.card_id, content=v)
            )
            for value in ("Kyoto", "Osaka")
        ]
        results, errors = race(make_app, clock, tenant, revise)
        assert len(results) == 1 and results[0].outcome == "superseded", errors
        assert len(errors) == 1 and isinstance(errors[0], StaleCardError)
        slot = app.load(tenant, first.aggregate_id, Slot)
        assert len(slot.current_cards) == 1
        assert versions(app, first.aggregate_id) == [1, 2, 3]

    def test_two_remembers_race_and_the_loser_reloads_and_decides_again(self, make_app) -> None:
        clock, tenant = Clock(), new_tenant()
        app = make_app(clock)
        first = app.remember(tenant, state("address", "Taipei"))
        clock.advance(days=1)
        remember = [
            lambda a, v=value: a.remember(tenant, state("address", v))
            for value in ("Kyoto", "Osaka")
        ]
        results, errors = race(make_app, clock, tenant, remember)
        assert errors == [] and sorted(r.outcome for r in results) == ["superseded", "superseded"]
        slot = app.load(tenant, first.aggregate_id, Slot)
        assert len(slot.current_cards) == 1
        chain = list(slot.cards.values())  # in the order the events stored them
        assert len(chain) == 3, "the chain never forks: each write revises the one before it"
        assert [c.edge_target for c in chain[1:]] == [c.card_id for c in chain[:-1]]
        assert versions(app, first.aggregate_id) == [1, 2, 3, 4]


class TestHammeredSlot:
    """RELIABILITY: four writers hammering one slot → no retry error reaches a caller; one pending
    arbitration case per slot, not one per write."""

    def test_four_writers_ten_writes_each(self, make_app) -> None:
        tenant, writers, writes = new_tenant(), 4, 10
        apps = [make_app(utc_now) for _ in range(writers)]  # one each, as separate workers
        start = threading.Barrier(writers)
        results: list[Any] = []
        errors: list[BaseException] = []

        def hammer(app: Palimpsest, writer: int) -> None:
            start.wait(timeout=30)
            for i in range(writes):
                try:
                    results.append(app.remember(tenant, state("address", f"City {writer}-{i}")))
                except BaseException as error:  # noqa: BLE001 - the test asserts there is none
                    errors.append(error)

        threads = [threading.Thread(target=hammer, args=(app, w)) for w, app in enumerate(apps)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert errors == [] and len(results) == writers * writes
        slot = apps[0].load(tenant, results[0].aggregate_id, Slot)
        assert len(slot.current_cards) == 1
        assert len(slot.pending) <= 1
        queued = [r for r in results if r.outcome == "queued"]
        assert {r.case_id for r in queued} == set(slot.pending)
        if queued:
            case = apps[0].load(tenant, queued[0].case_id, ArbitrationCase)
            assert len(case.proposals) == len(queued) == len(next(iter(slot.pending.values())))


class TestEventTable:
    def test_runtime_role_cannot_update_delete_or_truncate(self, make_app, runtime_db) -> None:
        make_app(Clock()).remember(new_tenant(), state("address", "Taipei"))
        table = f"palimpsest.{EVENTS_TABLE}"
        for statement in (
            f"UPDATE {table} SET topic = 'x'",
            f"DELETE FROM {table}",
            f"TRUNCATE {table}",
        ):
            with runtime_db.connect() as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)

    def test_even_the_owner_cannot_rewrite_the_log(self, make_app, admin_db) -> None:
        make_app(Clock()).remember(new_tenant(), state("address", "Taipei"))
        for statement in (
            f"UPDATE palimpsest.{EVENTS_TABLE} SET topic = 'x'",
            f"DELETE FROM palimpsest.{EVENTS_TABLE}",
            f"TRUNCATE palimpsest.{EVENTS_TABLE}",
        ):
            with (
                admin_db.connect() as conn,
                pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"),
            ):
                conn.execute(statement)

    def test_bootstrap_runs_again_without_harm(self, make_app, admin_db, pg_settings) -> None:
        tenant = new_tenant()
        first = make_app(Clock()).remember(tenant, state("address", "Taipei"))
        bootstrap(admin_db, pg_settings)
        slot = make_app(Clock()).load(tenant, first.aggregate_id, Slot)
        assert [c.value for c in slot.current_cards] == ["Taipei"]
