"""A tenant's retention policy for raw conversation turns: set, changed, read; bad values refused."""

from __future__ import annotations

import pytest

from domain.errors import InvalidCommandError
from domain.retention import Retention
from infra.settings import Settings
from services.command.memory import Palimpsest
from services.command.retention import SetRetention
from services.factory import create_app
from tests.support import new_tenant


@pytest.fixture
def app() -> Palimpsest:
    return create_app(Settings(persistence="memory"))


def test_a_tenant_without_a_policy_keeps_every_turn(app) -> None:
    policy = app.retention(new_tenant())
    assert (policy.turn_days, policy.extracted) == (None, False)


def test_a_policy_is_set_then_changed_and_each_tenant_has_its_own(app) -> None:
    tenant, other = new_tenant(), new_tenant()
    app.set_retention(tenant, SetRetention(turn_days=30, set_by="admin"))
    app.set_retention(tenant, SetRetention(turn_days=7, extracted=True, set_by="dpo"))
    app.set_retention(other, SetRetention(turn_days=90))
    assert (app.retention(tenant).turn_days, app.retention(tenant).extracted) == (7, True)
    assert app.retention(other).turn_days == 90
    retention = app.load(tenant, Retention.create_id(tenant), Retention, "retention")
    assert retention.set_by == "dpo" and retention.version == 2
    assert set(app.retention_tenants()) >= {tenant, other}


@pytest.mark.parametrize("days", [0, -3, 40_000])
def test_a_policy_outside_the_range_is_refused_and_nothing_is_stored(app, days) -> None:
    tenant = new_tenant()
    with pytest.raises((InvalidCommandError, ValueError)):
        app.set_retention(tenant, SetRetention(turn_days=days))
    assert app.retention(tenant).turn_days is None
