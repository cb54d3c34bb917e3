"""The consumers' low-water marks on the embedded PostgreSQL: the projection's stops before the
first event it has not applied (a parked one does not hold it), moves on as the rest is applied
and only forward; the extraction workers' stops before the first turn with no later event; a relay
whose broker lost its messages republishes from the mark, not the whole log."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from infra.broker import EmbeddedBroker
from infra.postgres import Database, projector_database
from infra.relay import INGEST_EVENTS, Relay
from infra.settings import Settings
from projections.lowwater import (
    LowWaterKeeper,
    extraction_mark,
    handled_up_to,
    log_position,
    projection_mark,
)
from projections.projector import decode
from services.command.commands import IngestTurn, Remember
from tests.poison import MARK, stored_as, undecodable
from tests.support import new_tenant, state

pytestmark = pytest.mark.integration


def head(app: Any) -> int:
    return app.recorder.max_notification_id() or 0


def delivered(app: Any, after: int, until: int | None = None) -> list[Any]:
    """The log's events after ``after`` (up to ``until``), decoded for the projector."""
    found = app.recorder.select_notifications(start=after + 1, limit=10_000, stop=until)
    return [decode(app.mapper, n) for n in found]


def handled(admin_db: Database, settings: Settings, projector: Any, after: int) -> int:
    with projector_database(admin_db, settings).connect(autocommit=True) as conn:
        return handled_up_to(conn, settings.event_schema, settings.read_schema, projector.name,
                             after)


def test_the_mark_stops_before_the_first_unapplied_event(
        app: Any, projector: Any, admin_db: Database, pg_settings: Settings) -> None:
    tenant, before = new_tenant(), head(app)
    for label in ("address", "employer", "skills"):
        app.remember(tenant, state(label, "one"))
        app.remember(tenant, state(label, "two"))
    events = delivered(app, before)
    assert len(events) >= 6
    projector.apply_batch(events[:3])
    assert handled(admin_db, pg_settings, projector, before) == events[3].notification_id - 1
    projector.apply_batch(events[3:])
    assert handled(admin_db, pg_settings, projector, before) == head(app)


def test_a_parked_event_does_not_hold_the_mark(
        app: Any, projector: Any, admin_db: Database, pg_settings: Settings) -> None:
    tenant, before = new_tenant(), head(app)
    with stored_as(app, undecodable):
        app.remember(tenant, Remember(kind="knowledge", memory_type="note", title="Lost",
                                      content=MARK))
    app.remember(tenant, state("address", "Taipei"))
    projector.apply_batch(delivered(app, before))
    assert projector.parked == 1
    assert handled(admin_db, pg_settings, projector, before) == head(app)


def test_the_keeper_stores_the_mark_and_never_moves_it_back(
        app: Any, projector: Any, admin_db: Database, pg_settings: Settings) -> None:
    import threading

    tenant, before = new_tenant(), head(app)
    app.remember(tenant, state("address", "Kyoto"))
    projector.apply_batch(delivered(app, before))
    db = projector_database(admin_db, pg_settings)
    keeper = LowWaterKeeper(db, pg_settings.event_schema, pg_settings.read_schema, projector.name,
                            threading.Event())
    keeper.position = before  # what the session's other tests left unprojected lies before it
    reached = keeper.once()
    assert reached == head(app)
    with db.connect(autocommit=True) as conn:
        assert log_position(conn, pg_settings.read_schema, projector.name) == reached
    app.remember(tenant, state("address", "Nara"))  # not applied: the mark stays
    assert keeper.once() == reached
    assert projection_mark(db, pg_settings) == reached


def test_the_extraction_mark_stops_before_a_turn_still_waiting(
        app: Any, admin_db: Database, pg_settings: Settings) -> None:
    tenant = new_tenant()
    received = app.ingest_turn(tenant, IngestTurn(session_id="s", turn_id="1", role="user",
                                                   text="I moved to Kyoto",
                                                   said_at=app.test_clock()))
    db = projector_database(admin_db, pg_settings)
    mark = extraction_mark(db, pg_settings, INGEST_EVENTS)
    assert mark < received.position, "a turn no worker has handled holds the mark"


@pytest.fixture
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    embedded = EmbeddedBroker(tmp_path_factory.mktemp("lowwater-kafka"))
    embedded.start()
    yield embedded
    embedded.stop()


def test_a_relay_whose_broker_lost_its_messages_republishes_from_the_mark(
        app: Any, broker: EmbeddedBroker, pg_settings: Settings) -> None:
    tenant = new_tenant()
    for number in range(5):
        app.remember(tenant, state(f"label-{number}", "value"))
    mark = head(app) - 2  # the consumers handled all but the last two events
    relay = Relay(app.recorder, broker.bootstrap, topic=f"lowwater-{tenant}", name=f"lw-{tenant}",
                  schema=pg_settings.event_schema, resume_from=lambda: mark)
    try:
        while relay.position < head(app):
            relay.run_once(timeout=0.5)
        broker.restart()  # every topic and message gone
        assert relay.check() is True
        assert relay.position == mark, "republished from the consumers' mark"
        while relay.position < head(app):
            assert relay.run_once(timeout=0.5) <= 2 or relay.position == head(app)
        assert relay.state.published == 2
    finally:
        relay.close()
