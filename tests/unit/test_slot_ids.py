"""Slot ids only the key holder can compute (``services.command.keyed_ids``), and a store whose
slots were opened under the legacy unkeyed ids: it is read, written and erased as before."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from itertools import islice
from uuid import UUID

import pytest

from domain.base import derived_id
from domain.erased import is_erased
from domain.erasure import Erasure
from domain.slot import Slot
from domain.values import Scope
from infra.settings import Settings
from services.command.commands import Erase, WriteResult
from services.command.keyed_ids import (
    forget_checks,
    has_legacy_slots,
    ids_key,
    session_target,
    slot_generations,
)
from services.command.memory import Palimpsest
from services.factory import create_app
from services.ingest.commands import IngestTurn
from tests.support import all_events, new_tenant, state

PERSONAL = Scope.parse("personal")


@pytest.fixture
def app() -> Palimpsest:
    return create_app(Settings(persistence="memory"))


def slot_id(written: WriteResult) -> UUID:
    assert written.aggregate_id is not None
    return written.aggregate_id


def values(app: Palimpsest, tenant: str, written: WriteResult) -> list[object]:
    slot = app.load(tenant, slot_id(written), Slot)
    return [c.value for c in sorted(slot.cards.values(), key=lambda c: c.recorded_at)]


def test_a_slot_id_is_a_keyed_hash_that_needs_the_tenants_key(app) -> None:
    tenant = new_tenant()
    written = slot_id(app.remember(tenant, state("clinic", "Dr Ruiz", subject="alice")))
    key = ids_key(app.keyring, tenant)
    assert key is not None and written == Slot.create_id(key, tenant, PERSONAL, "alice", "clinic")
    assert written.version == 8
    assert written != Slot.legacy_id(tenant, PERSONAL, "alice", "clinic")
    assert written != derived_id("slot", tenant, PERSONAL.key, "alice", "clinic")
    other = create_app(Settings(persistence="memory"))  # another ring: another tenant key
    assert slot_id(other.remember(tenant, state("clinic", "Dr Ruiz", subject="alice"))) != written


def test_the_derived_key_is_kept_per_tenant_and_follows_its_data_key(app) -> None:
    first, second = new_tenant(), new_tenant()
    app.remember(first, state("clinic", "Dr Ruiz", subject="alice"))
    key = ids_key(app.keyring, first)
    assert key is ids_key(app.keyring, first), "derived once per tenant key"
    assert key != ids_key(app.keyring, second)
    app.erase(first, Erase(unit="tenant", reason="offboarding", requested_by="dpo"))
    try:
        after = ids_key(app.keyring, first)
    except Exception:  # an erased tenant's key is not made again
        after = None
    assert after != key, "a destroyed tenant key derives nothing any more"


def test_without_a_key_ring_slot_ids_stay_unkeyed() -> None:
    app = create_app(Settings(persistence="memory", seal_events=False))
    tenant = new_tenant()
    written = slot_id(app.remember(tenant, state("clinic", "Dr Ruiz", subject="alice")))
    assert written == Slot.legacy_id(tenant, PERSONAL, "alice", "clinic")


def test_an_erased_session_is_named_by_a_keyed_hash(app) -> None:
    tenant = new_tenant()
    app.ingest_turn(tenant, IngestTurn(session_id="alice-at-the-clinic", turn_id="1", role="user",
                                       text="my doctor is Dr Ruiz", said_at=datetime.now(UTC)))
    erased = app.erase(tenant, Erase(unit="session", session_id="alice-at-the-clinic"))
    event = app.load(tenant, erased.erasure_id, Erasure, "erasure")
    assert event.target == session_target(app.keyring, tenant, "alice-at-the-clinic")
    assert "alice" not in event.target


# ---- a store written before slot ids were keyed ------------------------------------------------


@contextmanager
def legacy(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Inside, slots are opened under the unkeyed id, as they were before ids were keyed; after,
    the process knows nothing of the tenants' legacy slots (as one started after the upgrade)."""
    with monkeypatch.context() as patched:
        patched.setattr(Slot, "create_id", staticmethod(
            lambda key, tenant_id, scope, subject, label, generation=0:
            Slot.legacy_id(tenant_id, scope, subject, label, generation)))
        yield
    forget_checks()


def test_only_a_tenant_with_legacy_slots_looks_them_up(app, monkeypatch) -> None:
    keyed, old = new_tenant(), new_tenant()
    app.remember(keyed, state("clinic", "Dr Ruiz", subject="alice"))
    with legacy(monkeypatch):
        app.remember(old, state("clinic", "Dr Ruiz", subject="alice"))
    assert not has_legacy_slots(app.keyring, keyed) and has_legacy_slots(app.keyring, old)
    assert [len(ids) for ids in islice(slot_generations(app.keyring, keyed, PERSONAL, "a", "b"), 2)] == [1, 1]
    assert next(slot_generations(app.keyring, old, PERSONAL, "a", "b"))[1] == Slot.legacy_id(
        old, PERSONAL, "a", "b")


def test_a_slot_under_its_legacy_id_is_read_written_and_erased(app, monkeypatch) -> None:
    tenant = new_tenant()
    with legacy(monkeypatch):
        old = app.remember(tenant, state("clinic", "Dr Ruiz", subject="alice"))
    assert slot_id(old) == Slot.legacy_id(tenant, PERSONAL, "alice", "clinic")

    new = app.remember(tenant, state("clinic", "Dr Chen", subject="alice"))
    assert slot_id(new) == slot_id(old), "a write lands in the slot it always had"
    assert values(app, tenant, new) == ["Dr Ruiz", "Dr Chen"]
    assert app.live_slot(tenant, PERSONAL, "alice", "clinic")[0] == slot_id(old)
    fresh = app.remember(tenant, state("address", "Lisbon", subject="alice"))
    assert slot_id(fresh).version == 8, "a slot opened now is keyed"

    app.erase(tenant, Erase(unit="slot", subject="alice", label="clinic", requested_by="user"))
    assert all(is_erased(v) for v in values(app, tenant, old))
    again = app.remember(tenant, state("clinic", "Dr Lima", subject="alice"))
    key = ids_key(app.keyring, tenant)
    assert slot_id(again) == Slot.create_id(key, tenant, PERSONAL, "alice", "clinic", 1)
    assert values(app, tenant, again) == ["Dr Lima"], "the next generation, keyed"

    erased = app.erase(tenant, Erase(unit="subject", subject="alice", requested_by="user"))
    event = app.load(tenant, erased.erasure_id, Erasure, "erasure")
    assert {slot_id(again), slot_id(fresh)} <= set(event.slot_ids)
    assert is_erased(app.load(tenant, slot_id(again), Slot).label)


def test_erasing_a_slot_by_name_reaches_its_legacy_and_keyed_generations(app, monkeypatch) -> None:
    tenant = new_tenant()
    with legacy(monkeypatch):
        first = app.remember(tenant, state("clinic", "Dr Ruiz", subject="alice"))
        app.erase(tenant, Erase(unit="slot", slot_id=slot_id(first), requested_by="user"))
    second = app.remember(tenant, state("clinic", "Dr Chen", subject="alice"))
    assert slot_id(second) not in (slot_id(first), Slot.legacy_id(tenant, PERSONAL, "alice", "clinic", 1))

    erased = app.erase(tenant, Erase(unit="slot", subject="alice", label="clinic", requested_by="user"))
    event = app.load(tenant, erased.erasure_id, Erasure, "erasure")
    assert event.target == str(slot_id(second))
    assert is_erased(app.load(tenant, slot_id(second), Slot).label)
    assert any(e.originator_id == slot_id(first) for e in all_events(app)), "the log keeps it"
