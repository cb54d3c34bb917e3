"""``services.command.failures``: parked events as one tenant's use cases (what REST and the console
call), in an HTTP process's shape: the list read as the tenant-bound HTTP role, a retry or a skip
recorded as a request that ``serve``'s own process carries out (``projections.requests``). A
tenant sees and asks for only its own; listing needs ``memory:read``, requests ``memory:admin``; a
skip needs a reason; a request of one tenant naming another's parked event is refused where it is
carried out too."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from domain.errors import InvalidCommandError, PermissionDeniedError
from infra.postgres import Database, http_database, projector_database
from infra.settings import Settings
from projections.failures import ParkedEventNotFoundError
from projections.replay import catch_up, make_projector
from projections.requests import REFUSED, RETRY, RequestKeeper, ask
from services.command.failures import (
    parked_events,
    parked_requests,
    request_retry,
    request_skip,
)
from services.keys import Principal
from services.query.readmodels import ReadModels
from tests.poison import handler_bug, write_world

pytestmark = pytest.mark.integration


def principal(tenant: str, *scopes: str) -> Principal:
    return Principal(tenant, frozenset(scopes or ("memory:admin",)), "key_test")


@pytest.fixture
def read(pg_settings: Settings, admin_db: Database) -> Iterator[ReadModels]:
    """The read models as an HTTP process holds them: as the tenant-bound HTTP role."""
    made = ReadModels(http_database(admin_db, pg_settings), pg_settings.read_schema, pool_size=2)
    yield made
    made.close()


def keeper(app: Any, admin_db: Database, settings: Settings) -> RequestKeeper:
    """What ``serve``'s own process runs: the requests carried out as the projector role."""
    import threading

    monitor = projector_database(admin_db, settings)
    return RequestKeeper(monitor, settings.read_schema, app,
                         lambda: make_projector(settings, app, projector_db=monitor),
                         threading.Event())


def test_a_tenant_lists_and_asks_for_only_its_own_parked_events(  # type: ignore[no-untyped-def]
        app, projector, admin_db, pg_settings, read, monkeypatch) -> None:
    handler_bug(monkeypatch)
    world = write_world(app)
    catch_up(projector, app)
    a, b = principal(world.a), principal(world.b)
    carried = keeper(app, admin_db, pg_settings)

    listed = parked_events(read, principal(world.a, "memory:read"))
    assert [e.reason for e in listed] == ["projection", "undecodable", "waiting"]
    assert parked_events(read, b) == []
    acme, lost = listed[0], listed[1]

    with pytest.raises(ParkedEventNotFoundError):  # another tenant's: not found
        request_retry(read, b, acme.notification_id, "b")
    with pytest.raises(ParkedEventNotFoundError):
        request_skip(read, b, lost.notification_id, "not mine", "b")
    with pytest.raises(PermissionDeniedError):
        request_retry(read, principal(world.a, "memory:read", "memory:write"),
                      acme.notification_id, "a")
    with pytest.raises(InvalidCommandError):
        request_skip(read, a, lost.notification_id, "  ", "alice")
    with read.tenant(world.b) as conn:  # past the use case's check: refused where carried out
        forged = ask(conn, read.schema, world.b, acme.notification_id, RETRY, "b")
    assert carried.once() == 1
    (refused,) = parked_requests(read, b, forged.request_id)
    assert refused.status == REFUSED, refused
    assert parked_events(read, a)[0].notification_id == acme.notification_id, "still parked"

    asked = request_skip(read, a, lost.notification_id, "a card nobody can read", "alice (key_1)")
    assert asked.status == "requested"
    again = request_skip(read, a, lost.notification_id, "clicked twice", "alice (key_1)")
    assert again.request_id == asked.request_id, "one request while it waits"
    assert [e.requested for e in parked_events(read, a)] == [None, "skip", None]
    assert carried.once() == 1
    (skipped,) = parked_requests(read, a, asked.request_id)
    assert (skipped.status, skipped.outcome) == ("done", "skipped: 0 later event(s) applied")

    monkeypatch.undo()  # the fix
    asked = request_retry(read, a, acme.notification_id, "alice (key_1)")
    assert carried.once() == 1 and carried.once() == 0
    (retried,) = parked_requests(read, a, asked.request_id)
    assert (retried.status, retried.outcome) == ("done", "retried: 2 event(s) applied"), retried
    assert parked_events(read, a) == []
    assert {e.status for e in parked_events(read, a, resolved=True)} == {"retried", "skipped"}
    assert [r.request_id for r in parked_requests(read, a)][0] == asked.request_id
