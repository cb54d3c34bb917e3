"""The guessing test: a dump of every table of every schema (event bytes included) holds no slot id
that anyone without the tenant's key computes from a guessed subject and label (DESIGN §7,
decision 0012) — not the legacy unkeyed id, nor an HMAC under a key anyone could make; and a store
whose slots were opened under the legacy ids keeps working after the upgrade."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from itertools import product
from uuid import NAMESPACE_URL, UUID, uuid5

import pytest
from psycopg import sql

from domain.base import NAMESPACE, derived_id, keyed_id
from domain.erased import is_erased
from domain.erasure import Erasure
from domain.slot import Slot
from domain.values import Scope
from infra.postgres import Database
from projections.replay import catch_up
from services.command.commands import Erase, IngestTurn, WriteResult
from services.command.keyed_ids import KEYED_IDS_INFO, forget_checks, has_legacy_slots, ids_key
from services.factory import create_app
from tests.support import new_tenant, state

SUBJECTS = ("alice", "bob", "user", "Alice", "carol")
LABELS = ("clinic", "address", "diagnosis", "home city", "doctor")
SCOPES = (Scope.parse("personal"),)
WRITTEN = (("alice", "clinic"), ("alice", "address"), ("alice", "diagnosis"), ("bob", "clinic"),
           ("bob", "address"))


def dump(admin: Database) -> tuple[str, list[bytes]]:
    """Every row of every table of every schema but the catalogue's, as text, and every bytea
    value as stored (the events' states, the keys' material …)."""
    texts: list[str] = []
    blobs: list[bytes] = []
    with admin.connect() as conn:
        tables = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.tables WHERE table_type = "
            "'BASE TABLE' AND table_schema NOT IN ('pg_catalog', 'information_schema')").fetchall()
        for schema, table in tables:
            name = sql.Identifier(schema, table)
            texts += [row[0] for row in conn.execute(sql.SQL("SELECT t::text FROM {} t").format(name))]
            for (column,) in conn.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
                    "AND table_name = %s AND data_type = 'bytea'", (schema, table)).fetchall():
                blobs += [bytes(v) for (v,) in conn.execute(sql.SQL("SELECT {} FROM {}").format(
                    sql.Identifier(column), name)) if v is not None]
    assert {"palimpsest_events", "erasure_keys", "cards", "erasures"} <= {t for _, t in tables}
    return "\n".join(texts).lower(), blobs


def found(dumped: tuple[str, list[bytes]], ids: set[UUID]) -> set[UUID]:
    """The ids the dump holds: as text (with or without dashes) or as their 16 bytes."""
    text, blobs = dumped
    forms = {i: (str(i), i.hex) for i in ids}
    return {i for i, (dashed, bare) in forms.items()
            if dashed in text or bare in text
            or any(dashed.encode() in b or bare.encode() in b or i.bytes in b for b in blobs)}


def guessed(tenant: str) -> Iterator[UUID]:
    """Every id a guesser without the tenant's key computes from guessed (subject, label) pairs:
    the legacy derivation, its variants, and HMACs under keys anyone could make."""
    public_keys = (b"", tenant.encode(), hashlib.sha256(tenant.encode()).digest(),
                   hashlib.sha256(KEYED_IDS_INFO + b"\x1f" + tenant.encode()).digest(), KEYED_IDS_INFO)
    for scope, subject, label, generation in product(SCOPES, SUBJECTS, LABELS, range(3)):
        extra = (generation,) if generation else ()
        yield Slot.legacy_id(tenant, scope, subject, label, generation)
        yield derived_id(tenant, scope.key, subject, label, *extra)
        yield uuid5(NAMESPACE_URL, "\x1f".join(("slot", tenant, scope.key, subject, label)))
        yield uuid5(NAMESPACE, f"{tenant}/{subject}/{label}")
        for key in public_keys:
            yield keyed_id(key, "slot", tenant, scope.key, subject, label, *extra)


def remember(app, tenant: str, subject: str, label: str, value: str) -> UUID:  # type: ignore[no-untyped-def]
    written: WriteResult = app.remember(tenant, state(label, value, subject=subject))
    assert written.aggregate_id is not None
    return written.aggregate_id


def test_a_dump_confirms_no_guessed_subject_and_label(app, admin_db, projector) -> None:
    tenant = new_tenant()
    slots = {pair: remember(app, tenant, *pair, f"value of {pair[1]}") for pair in WRITTEN}
    remember(app, tenant, "alice", "clinic", "Dr Chen")  # a second card in one slot
    app.ingest_turn(tenant, IngestTurn(session_id="alice-clinic", turn_id="1", role="user",
                                       text="my clinic is on Rua Augusta", said_at=app.test_clock.now))
    erasures = [
        app.erase(tenant, Erase(unit="subject", subject="alice", requested_by="dpo")),
        app.erase(tenant, Erase(unit="slot", subject="bob", label="clinic", requested_by="bob")),
        app.erase(tenant, Erase(unit="session", session_id="alice-clinic", requested_by="dpo"))]
    reopened = remember(app, tenant, "alice", "clinic", "Dr Lima")  # the slot's next generation
    catch_up(projector, app)

    dumped = dump(admin_db)
    key = ids_key(app.keyring, tenant)
    assert key is not None
    assert slots[("alice", "clinic")] == Slot.create_id(key, tenant, SCOPES[0], "alice", "clinic")
    assert reopened == Slot.create_id(key, tenant, SCOPES[0], "alice", "clinic", 1)
    assert found(dumped, {*slots.values(), reopened}) == {*slots.values(), reopened}, \
        "the search finds the ids the store holds"
    assert found(dumped, set(guessed(tenant))) == set(), "no guess is confirmed"

    for erased in erasures:
        event = app.load(tenant, erased.erasure_id, Erasure, "erasure")
        named = {event.unit.value, event.target, event.basis, event.reason, event.requested_by,
                 *map(str, (*event.key_ids, *event.card_ids, *event.slot_ids, *event.aggregate_ids))}
        assert not {"alice", "clinic", "alice-clinic"} & named
        assert not any(name in value for value in named for name in ("alice", "clinic"))


def test_slots_under_legacy_ids_are_read_written_and_erased_after_the_upgrade(
        pg_settings, app, monkeypatch: pytest.MonkeyPatch) -> None:
    tenant = new_tenant()
    with monkeypatch.context() as before:  # the store as the unkeyed ids wrote it
        before.setattr(Slot, "create_id", staticmethod(
            lambda key, tenant_id, scope, subject, label, generation=0:
            Slot.legacy_id(tenant_id, scope, subject, label, generation)))
        old = remember(app, tenant, "alice", "clinic", "Dr Ruiz")
    assert old == Slot.legacy_id(tenant, SCOPES[0], "alice", "clinic")
    forget_checks()
    upgraded = create_app(pg_settings)  # a process started after the upgrade
    try:
        ring = upgraded.keyring
        assert ring is not None and has_legacy_slots(ring, tenant)
        assert not has_legacy_slots(ring, new_tenant())
        assert remember(upgraded, tenant, "alice", "clinic", "Dr Chen") == old, "the slot it had"
        assert [c.value for c in upgraded.load(tenant, old, Slot).current_cards] == ["Dr Chen"]
        fresh = remember(upgraded, tenant, "alice", "address", "Lisbon")
        assert fresh.version == 8, "a slot opened now is keyed"

        by_name = upgraded.erase(tenant, Erase(unit="slot", subject="alice", label="clinic",
                                               requested_by="alice"))
        assert upgraded.load(tenant, by_name.erasure_id, Erasure, "erasure").slot_ids == (old,)
        again = remember(upgraded, tenant, "alice", "clinic", "Dr Lima")
        assert again.version == 8 and again != old, "its next generation is keyed"
        subject = upgraded.erase(tenant, Erase(unit="subject", subject="alice", requested_by="dpo"))
        assert {fresh, again} <= set(upgraded.load(tenant, subject.erasure_id, Erasure, "erasure").slot_ids)
        for slot_id in (old, fresh, again):
            slot = upgraded.load(tenant, slot_id, Slot)
            assert is_erased(slot.label) and all(is_erased(c.value) for c in slot.cards.values())
    finally:
        upgraded.close()
