"""``services.command.failures``: parked events as one tenant's use cases (what the console's operations
page calls). A tenant sees and handles only its own; listing needs ``memory:read``, retry and skip
``memory:admin``; a skip needs a reason; retry after the fix and skip do what ``palimpsest
failures`` does."""

from __future__ import annotations

from typing import Any

import pytest

from domain.errors import InvalidCommandError, PermissionDeniedError
from infra.postgres import projector_database
from projections.failures import ParkedEventNotFoundError
from projections.replay import catch_up
from services.command.failures import parked_events, retry_parked, skip_parked
from services.keys import Principal
from tests.poison import handler_bug, write_world

pytestmark = pytest.mark.integration


def principal(tenant: str, *scopes: str) -> Principal:
    return Principal(tenant, frozenset(scopes or ("memory:admin",)), "key_test")


def test_a_tenant_lists_retries_and_skips_only_its_own_parked_events(  # type: ignore[no-untyped-def]
        app, projector, admin_db, pg_settings, monkeypatch) -> None:
    handler_bug(monkeypatch)
    world = write_world(app)
    catch_up(projector, app)
    monitor = projector_database(admin_db, pg_settings)
    a, b = principal(world.a), principal(world.b)
    parts: tuple[Any, ...] = (app, monitor, pg_settings)

    listed = parked_events(monitor, pg_settings, principal(world.a, "memory:read"))
    assert [e.reason for e in listed] == ["projection", "undecodable", "waiting"]
    assert parked_events(monitor, pg_settings, b) == []
    acme, lost = listed[0], listed[1]

    with pytest.raises(ParkedEventNotFoundError):  # another tenant's: not found
        retry_parked(*parts, b, acme.notification_id)
    with pytest.raises(ParkedEventNotFoundError):
        skip_parked(*parts, b, lost.notification_id, "not mine", "b")
    with pytest.raises(PermissionDeniedError):
        retry_parked(*parts, principal(world.a, "memory:read", "memory:write"),
                     acme.notification_id)
    with pytest.raises(InvalidCommandError):
        skip_parked(*parts, a, lost.notification_id, "  ", "alice")

    done = skip_parked(*parts, a, lost.notification_id, "a card nobody can read", "alice (key_1)")
    assert done.originator_id == world.gone
    monkeypatch.undo()  # the fix
    (retried,) = retry_parked(*parts, a, acme.notification_id)
    assert (retried.applied, retried.parked) == (2, False), "Acme, then Globex"
    assert parked_events(monitor, pg_settings, a) == []
