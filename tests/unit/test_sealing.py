"""Personal fields are sealed in stored events under their unit's key; a destroyed key reads as
erased, and the rules still hold over what remains (DESIGN §7, decision 0012)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import pytest
from cryptography.exceptions import InvalidTag
from eventsourcing.persistence import StoredEvent

from domain.cards import same_value
from domain.erased import ERASED, Erased, is_erased
from domain.event_card import EventCard
from domain.knowledge import KnowledgeCard
from domain.slot import Slot
from infra.keyring import Unit
from infra.sealing import PLAN, SEALED
from infra.settings import Settings
from services.command.commands import Remember, WriteResult
from services.command.memory import Palimpsest
from services.factory import create_app
from services.ingest.commands import IngestTurn
from tests.support import new_tenant, state

CANARY = "Zanzibar-canary-7f3a"


@pytest.fixture
def app() -> Palimpsest:
    return create_app(Settings(persistence="memory"))


def stored_states(app: Palimpsest) -> list[bytes]:
    return [n.state for n in app.recorder.select_notifications(start=1, limit=10_000)]


def forget(app: Palimpsest, tenant: str, unit: Unit) -> None:
    assert app.keyring is not None
    found = app.keyring.find(tenant, cards=[unit.id]) if unit.kind == "card" \
        else app.keyring.find(tenant, slots=[unit.id])
    assert found, f"no live key for {unit}"
    app.keyring.destroy(tenant, [f.key_id for f in found], uuid4())
    app.repository.cache.clear() if app.repository.cache else None


def slot_of(app: Palimpsest, tenant: str, written: WriteResult) -> Slot:
    assert written.aggregate_id is not None
    return app.load(tenant, written.aggregate_id, Slot)


def test_no_personal_text_is_stored_in_the_clear(app) -> None:
    tenant = new_tenant()
    app.remember(tenant, state(f"home {CANARY}", f"lives in {CANARY}", subject=f"{CANARY} person"))
    app.remember(tenant, Remember(kind="event", memory_type="event", content=f"met {CANARY}",
                                  tags=(CANARY.lower(),)))
    app.remember(tenant, Remember(kind="knowledge", memory_type="note", title=f"On {CANARY}",
                                  content=f"{CANARY} facts", tags=("canary",)))
    app.ingest_turn(tenant, IngestTurn(session_id="s-1", turn_id="1", role="user",
                                       text=f"I moved to {CANARY}", said_at=datetime.now(UTC),
                                       timezone="UTC"))
    stored = b"".join(stored_states(app))
    assert CANARY.encode() not in stored and CANARY.lower().encode() not in stored
    assert stored.count(SEALED.encode()) >= 8, "values, labels, subjects, tags, titles, a turn"


def test_sealed_fields_open_as_they_were_written(app) -> None:
    tenant = new_tenant()
    diet = app.remember(tenant, state("diet", "vegetarian"))
    written = app.remember(tenant, Remember(kind="knowledge", memory_type="note", title="Tea",
                                            content="oolong is partly oxidised", tags=("tea", "oolong")))
    app.repository.cache.clear() if app.repository.cache else None
    slot = slot_of(app, tenant, diet)
    assert slot.label == "diet" and slot.subject == "user"
    assert [c.value for c in slot.current_cards] == ["vegetarian"]
    note = app.load(tenant, written.card_id, KnowledgeCard)
    assert (note.title, note.body, list(note.tags)) == ("Tea", "oolong is partly oxidised", ["tea", "oolong"])


def test_a_destroyed_card_key_reads_as_erased_and_the_slot_still_decides(app) -> None:
    tenant = new_tenant()
    first = app.remember(tenant, state("home city", "Taipei"))
    forget(app, tenant, Unit("card", first.card_id))
    slot = slot_of(app, tenant, first)
    (card,) = slot.current_cards
    assert is_erased(card.value) and card.card_id == first.card_id
    assert slot.label == "home_city", "the slot's own key was not destroyed"
    # writing the erased value again is a new fact, not a verification of the tombstone
    again = app.remember(tenant, state("home city", "Taipei"))
    assert again.outcome != "verified" and again.card_id != first.card_id
    current = slot_of(app, tenant, first).current_cards
    assert [c.value for c in current] == ["Taipei"]


def test_an_erased_slot_key_forgets_its_label_and_subject(app) -> None:
    tenant = new_tenant()
    written = app.remember(tenant, state("blood type", "AB", subject="Mira"))
    assert written.aggregate_id is not None
    forget(app, tenant, Unit("slot", written.aggregate_id))
    slot = slot_of(app, tenant, written)
    assert is_erased(slot.label) and is_erased(slot.subject)


def test_erased_tags_read_as_none(app) -> None:
    tenant = new_tenant()
    written = app.remember(tenant, Remember(kind="event", memory_type="event",
                                            content="a trip", tags=("rome", "train")))
    forget(app, tenant, Unit("card", written.card_id))
    card = app.load(tenant, written.card_id, EventCard)
    assert not card.tags and is_erased(card.description)


def test_an_erased_value_equals_nothing_not_even_another_erased_value() -> None:
    assert not same_value(ERASED, ERASED) and not same_value(ERASED, "[erased]")
    assert same_value("Taipei ", "taipei")
    assert not is_erased("[erased]"), "a caller's text is never the marker"
    assert isinstance(ERASED, Erased) and repr(ERASED) == "ERASED"


def test_a_sealed_field_moved_to_another_tenant_does_not_open(app) -> None:
    tenant, other = new_tenant(), new_tenant()
    app.remember(tenant, state("home city", "Taipei"))
    mapper: Any = app.mapper
    (stored,) = [n for n in app.recorder.select_notifications(start=1, limit=100)
                 if n.topic.endswith("Slot.Remembered")]
    moved = json.loads(stored.state)
    moved["tenant_id"] = other
    forged = StoredEvent(originator_id=stored.originator_id, originator_version=stored.originator_version,
                          topic=stored.topic, state=json.dumps(moved).encode())
    with pytest.raises((InvalidTag, Exception)):
        mapper.to_domain_event(forged)


def test_every_planned_topic_names_an_event_class() -> None:
    from eventsourcing.utils import resolve_topic

    for topic, fields in PLAN.items():
        cls = resolve_topic(topic)
        names = set(getattr(cls, "__annotations__", {})) | {
            n for klass in cls.__mro__ for n in getattr(klass, "__annotations__", {})}
        assert set(fields.names) | set(fields.cards) <= names, topic
