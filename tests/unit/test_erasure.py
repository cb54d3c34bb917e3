"""Erasure as a command and an event: each unit forgets what it names and nothing else; an
erasure is audited without personal text; another tenant's ids are refused like missing ones."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import pytest

from domain.erased import is_erased
from domain.erasure import Erasure
from domain.errors import CardNotFoundError, InvalidCommandError
from domain.event_card import EventCard
from domain.knowledge import KnowledgeCard
from domain.slot import Slot
from infra.settings import Settings
from services.command.commands import Erase, Remember, WriteResult
from services.command.memory import Palimpsest
from services.factory import create_app
from services.ingest.commands import IngestTurn
from tests.support import new_tenant, state


@pytest.fixture
def app() -> Palimpsest:
    return create_app(Settings(persistence="memory"))


def slot(app: Palimpsest, tenant: str, written: WriteResult) -> Slot:
    assert written.aggregate_id is not None
    return app.load(tenant, written.aggregate_id, Slot)


def values(app: Palimpsest, tenant: str, written: WriteResult) -> list[Any]:
    return [c.value for c in sorted(slot(app, tenant, written).cards.values(), key=lambda c: c.recorded_at)]


def note(app: Palimpsest, tenant: str, title: str) -> WriteResult:
    return app.remember(tenant, Remember(kind="knowledge", memory_type="note", title=title,
                                         content=f"about {title}", tags=("kept",)))


def test_erasing_a_card_forgets_only_that_card(app) -> None:
    tenant = new_tenant()
    old = app.remember(tenant, state("home city", "Taipei"))
    new = app.remember(tenant, state("home city", "Kyoto"))
    kept = note(app, tenant, "Tea")
    result = app.erase(tenant, Erase(unit="card", card_id=old.card_id, reason="asked",
                                     requested_by="user"))
    assert result.keys_destroyed >= 1 and old.card_id in result.card_ids
    cards = slot(app, tenant, new).cards
    assert is_erased(cards[old.card_id].value) and cards[new.card_id].value == "Kyoto"
    assert app.load(tenant, kept.card_id, KnowledgeCard).title == "Tea"


def test_the_rules_still_hold_in_a_slot_with_an_erased_card(app) -> None:
    tenant = new_tenant()
    first = app.remember(tenant, state("diet", "vegetarian"))
    app.erase(tenant, Erase(unit="card", card_id=first.card_id))
    second = app.remember(tenant, state("diet", "vegan"))
    assert second.outcome in ("superseded", "written", "created", "recorded") or second.card_id
    again = app.remember(tenant, state("diet", "vegan"))
    assert again.card_id == second.card_id, "the same value again verifies the live card"
    current = slot(app, tenant, second).current_cards
    assert [c.value for c in current] == ["vegan"]


def test_erasing_a_slot_forgets_its_label_subject_and_every_value(app) -> None:
    tenant = new_tenant()
    first = app.remember(tenant, state("blood type", "AB", subject="Mira"))
    app.remember(tenant, state("blood type", "O", subject="Mira"))
    other = app.remember(tenant, state("city", "Oslo", subject="Mira"))
    app.erase(tenant, Erase(unit="slot", subject="Mira", label="blood type"))
    forgotten = slot(app, tenant, first)
    assert is_erased(forgotten.label) and is_erased(forgotten.subject)
    assert all(is_erased(v) for v in values(app, tenant, first))
    assert values(app, tenant, other) == ["Oslo"]


def test_erasing_a_subject_forgets_every_slot_of_theirs_and_no_one_else(app) -> None:
    tenant = new_tenant()
    mira = [app.remember(tenant, state(label, value, subject="Mira"))
            for label, value in (("city", "Oslo"), ("job", "nurse"))]
    user = app.remember(tenant, state("city", "Lima"))
    result = app.erase(tenant, Erase(unit="subject", subject="mira"))
    assert "Mira" not in result.model_dump_json() and "mira" not in result.model_dump_json()
    for written in mira:
        assert all(is_erased(v) for v in values(app, tenant, written))
    assert values(app, tenant, user) == ["Lima"]


def test_erasing_a_session_forgets_its_turns(app) -> None:
    tenant = new_tenant()
    turns = [app.ingest_turn(tenant, IngestTurn(session_id=session, turn_id="1", role="user",
                                                text=f"I moved to {city}", said_at=datetime.now(UTC),
                                                timezone="UTC"))
             for session, city in (("s-gone", "Quito"), ("s-kept", "Perth"))]
    app.erase(tenant, Erase(unit="session", session_id="s-gone"))
    gone, kept = (app.load(tenant, t.event_card_id, EventCard) for t in turns)
    assert is_erased(gone.description) and kept.description == "I moved to Perth"


def test_erasing_a_tenant_forgets_everything_of_it_and_nothing_of_another(app) -> None:
    tenant, other = new_tenant(), new_tenant()
    mine = app.remember(tenant, state("city", "Oslo"))
    theirs = app.remember(other, state("city", "Oslo"))
    app.erase(tenant, Erase(unit="tenant", basis="offboarding"))
    assert all(is_erased(v) for v in values(app, tenant, mine))
    assert values(app, other, theirs) == ["Oslo"]


def test_another_tenants_card_is_refused_like_a_missing_one_and_nothing_is_erased(app) -> None:
    tenant, other = new_tenant(), new_tenant()
    theirs = app.remember(other, state("city", "Oslo"))
    for card_id in (theirs.card_id, uuid4()):
        with pytest.raises(CardNotFoundError, match="no card"):
            app.erase(tenant, Erase(unit="card", card_id=card_id))
    assert values(app, other, theirs) == ["Oslo"]


def test_an_erasure_is_an_audited_event_without_personal_text_and_is_idempotent(app) -> None:
    tenant = new_tenant()
    written = app.remember(tenant, state("city", "Oslo", subject="Mira"))
    command = Erase(unit="subject", subject="Mira", basis="gdpr-17", reason="asked by email",
                    requested_by="dpo", request_id="erase-1")
    first = app.erase(tenant, command)
    again = app.erase(tenant, command)
    assert again.replayed and again.erasure_id == first.erasure_id and again.keys_destroyed == 0
    erasure = app.load(tenant, first.erasure_id, Erasure, "erasure")
    assert (erasure.basis, erasure.reason, erasure.requested_by) == ("gdpr-17", "asked by email", "dpo")
    assert erasure.card_ids == (written.card_id,)
    stored = b"".join(n.state for n in app.recorder.select_notifications(start=1, limit=1000))
    assert b"Mira" not in stored and b"asked by email" not in stored
    later = app.erase(tenant, Erase(unit="subject", subject="Mira"))
    assert later.keys_destroyed == 0, "forgotten before: nothing left to destroy"


@pytest.mark.parametrize("fields", [{"unit": "card"}, {"unit": "slot"}, {"unit": "subject"},
                                    {"unit": "session"}, {"unit": "galaxy"}])
def test_an_erasure_missing_what_it_names_is_refused(app, fields) -> None:
    with pytest.raises(InvalidCommandError):
        app.erase(new_tenant(), Erase(**fields))


def test_an_erased_card_is_never_written_again(app) -> None:
    from services.command.commands import CorrectEvent, Rename, Revise

    tenant = new_tenant()
    item = app.remember(tenant, state("hobbies", "chess", cardinality="multi_value"))
    trip = app.remember(tenant, Remember(kind="event", memory_type="event", content="a trip"))
    tea = note(app, tenant, "Tea")
    for written in (item, trip, tea):
        app.erase(tenant, Erase(unit="card", card_id=written.card_id))
    assert item.aggregate_id is not None
    with pytest.raises(CardNotFoundError, match="was erased"):
        app.revise(tenant, item.aggregate_id, Revise(card_id=item.card_id, content="go"))
    with pytest.raises(CardNotFoundError, match="was erased"):
        app.correct(tenant, CorrectEvent(card_id=trip.card_id, description="a walk", reason="typo"))
    with pytest.raises(CardNotFoundError, match="was erased"):
        app.rename(tenant, Rename(card_id=tea.card_id, title="Coffee"))


def test_a_request_id_of_an_erased_card_confirms_no_guess_of_its_text(app) -> None:
    """The same request id with the erased text or with another gets the same refusal: comparing
    the body first would replay the right guess and refuse the wrong one."""
    from domain.errors import IdempotencyKeyReusedError
    from infra.keyring import UnitErasedError

    tenant = new_tenant()
    secret = state("diagnosis", "hepatitis", subject="tom", request_id="oracle-1")
    written = app.remember(tenant, secret)
    assert app.remember(tenant, secret).replayed, "before the erasure the same body replays"
    with pytest.raises(IdempotencyKeyReusedError):
        app.remember(tenant, state("diagnosis", "flu", subject="tom", request_id="oracle-1"))
    app.erase(tenant, Erase(unit="subject", subject="tom", requested_by="dpo"))
    for guess in ("hepatitis", "flu"):
        with pytest.raises(UnitErasedError) as refused:
            app.remember(tenant, state("diagnosis", guess, subject="tom", request_id="oracle-1"))
        assert refused.value.unit == (tenant, "card", written.card_id)
