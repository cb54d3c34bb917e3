"""A person's erasure reaches every turn they spoke (issue 35), on the in-memory store: Alice and
Bob talk in one session and Alice in a second, each turn extracted by the scripted model; erasing
the subject Alice forgets her turns (text, extraction record, event card) and every card the
model wrote from them — a fact about Bob included — while Bob's turns and cards stay. A decision's
note is sealed under its slot's key, so the slot's or its subject's erasure forgets it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest

from domain.arbitration import ArbitrationCase
from domain.erased import is_erased
from domain.event_card import EventCard
from domain.ingestion import UNNAMED_SPEAKER, Ingestion
from domain.slot import Slot
from infra.llm import OpenAIChatModel
from infra.settings import Settings
from services.command.commands import Arbitrate, Erase, ErasureResult, IngestTurn
from services.command.memory import Palimpsest
from services.factory import create_app
from services.ingest.extraction import Extractor
from services.ingest.worker import IngestWorker
from tests.fakes.openai_server import FakeOpenAIServer, Reply
from tests.support import Clock, all_events, new_tenant, state

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)


class Person:
    """A speaker whose every text holds a canary of theirs (``zq<name><hex><what>``)."""

    def __init__(self, name: str) -> None:
        self.prefix = f"zq{name}{uuid4().hex[:6]}"
        self.subject = self.prefix.capitalize()

    def canary(self, what: str) -> str:
        return f"{self.prefix}{what}"


def candidates(text: str) -> Reply:
    """The scripted model: of a turn ending in a canary, a fact of the speaker's and an event —
    and, when the turn speaks ``about`` someone, a fact of theirs — each quoting the canary."""
    word = text.rsplit(" ", 1)[-1].strip(".!")
    fact: dict[str, Any] = {
        "kind": "state", "memory_type": "fact", "subject": "user", "label": "favourite_dish",
        "value": f"{word}dish", "cardinality_hint": None, "tags": [], "occurred_at_hint": None,
        "confidence": 0.9, "title": None, "related_concepts": []}
    made = [fact, {**fact, "kind": "event", "memory_type": "event", "label": "log",
                   "value": f"cooked {word}event", "tags": [f"{word}tag"]}]
    if " about " in text:
        other = text.split(" about ", 1)[1].split(" ", 1)[0]
        made.append({**fact, "subject": other, "label": "hobby", "value": f"{word}hobby"})
    return Reply.json({"candidates": made})


@pytest.fixture
def llm() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        server.responder = candidates  # type: ignore[assignment]
        yield server


@pytest.fixture
def clock() -> Clock:
    return Clock(NOW)


@pytest.fixture
def app(clock: Clock) -> Palimpsest:
    return create_app(Settings(persistence="memory"), clock=clock)


@pytest.fixture
def worker(app: Palimpsest, llm: FakeOpenAIServer) -> Iterator[IngestWorker]:
    settings = Settings(persistence="memory", llm_base_url=llm.base_url, llm_model="scripted",
                        llm_retries=0, llm_timeout_seconds=5)
    made = IngestWorker(app, Extractor(OpenAIChatModel(model="scripted", base_url=llm.base_url,
                                                       timeout=5), settings))
    yield made
    made.close()


def say(app: Palimpsest, worker: IngestWorker, tenant: str, who: Person | None, session: str,
        turn: str, text: str) -> Ingestion:
    """A turn of ``who`` (None: no speaker named), extracted and applied."""
    received = app.ingest_turn(tenant, IngestTurn(
        session_id=session, turn_id=turn, role="user", text=text, timezone="UTC",
        said_at=NOW - timedelta(hours=1), speaker=who.subject if who else None))
    assert worker.handle(tenant, received.ingestion_id) == "applied"
    turn_now = app.load(tenant, received.ingestion_id, Ingestion)
    assert len(turn_now.card_ids) >= 2, "the model's fact and event were written"
    return turn_now


def erase(app: Palimpsest, tenant: str, **unit: Any) -> ErasureResult:
    return app.erase(tenant, Erase(basis="gdpr-17", requested_by="dpo", **unit))


def texts(app: Palimpsest, tenant: str, turn: Ingestion) -> list[Any]:
    """Every text the turn left as the store reads it now: its own, its extraction record, its
    event card's, and the text of each card written from it."""
    ingestion = app.load(tenant, turn.id, Ingestion)
    card = app.load(tenant, turn.event_card_id, EventCard)
    return [ingestion.text, ingestion.candidates, card.description, card.tags,
            *(written(app, tenant, UUID(card_id)) for card_id in turn.card_ids)]


def written(app: Palimpsest, tenant: str, card_id: UUID) -> Any:
    """A card's text: an event's description, or a state card's value in its slot."""
    event = app.find(tenant, card_id, EventCard)
    if event is not None:
        return event.description
    return slot_of(app, tenant, card_id).cards[card_id].value


def slot_of(app: Palimpsest, tenant: str, card_id: UUID) -> Slot:
    (slot_id,) = {e.originator_id for e in all_events(app)
                  if getattr(getattr(e, "card", None), "card_id", None) == card_id}
    return app.load(tenant, slot_id, Slot)


def forgotten(value: Any) -> bool:
    return is_erased(value) or value in ((), [])


def test_erasing_a_speaker_forgets_every_turn_they_spoke_and_what_was_made_of_it(app, worker) -> None:
    tenant, alice, bob = new_tenant(), Person("alice"), Person("bob")
    bob_says = app.remember(tenant, state("hobby", bob.canary("own"), subject=bob.subject))
    hers = [say(app, worker, tenant, alice, "s1", "1",
                f"{alice.subject} talked about {bob.subject} {alice.canary('turn1')}"),
            say(app, worker, tenant, alice, "s2", "1", f"{alice.subject}: {alice.canary('turn3')}")]
    his = say(app, worker, tenant, bob, "s1", "2", f"{bob.subject}: {bob.canary('turn2')}")
    about_bob = slot_of(app, tenant, UUID(hers[0].card_ids[-1]))
    assert about_bob.id == bob_says.aggregate_id, "Alice's words about Bob are in Bob's slot"
    parked = app.ingest_turn(tenant, IngestTurn(
        session_id="s3", turn_id="1", role="user", text=f"I said {alice.canary('turn4')}",
        timezone="UTC", said_at=NOW - timedelta(hours=1), speaker=alice.subject))
    app.record_dead_letter(tenant, parked.ingestion_id, f"failed on {alice.canary('error')}", 3)

    erased = erase(app, tenant, unit="subject", subject=alice.subject)

    for turn in hers:
        assert all(forgotten(text) for text in texts(app, tenant, turn)), texts(app, tenant, turn)
        assert {turn.event_card_id, *map(UUID, turn.card_ids)} <= set(erased.card_ids)
    dead = app.load(tenant, parked.ingestion_id, Ingestion)
    assert is_erased(dead.text) and is_erased(dead.error), "a dead letter's error goes too"
    assert is_erased(app.load(tenant, parked.event_card_id, EventCard).description)
    kept = texts(app, tenant, his)
    assert not any(forgotten(text) for text in kept), kept
    assert all(bob.canary("turn2") in str(text) for text in kept if text != ["conversation", "user"])
    assert not {his.event_card_id, *map(UUID, his.card_ids)} & set(erased.card_ids)
    bobs = app.load(tenant, about_bob.id, Slot)
    assert bobs.label == "hobby" and bobs.cards[bob_says.card_id].value == bob.canary("own")


def test_a_turn_without_a_speaker_is_the_user_subjects(app, worker) -> None:
    tenant, bob = new_tenant(), Person("bob")
    unnamed = say(app, worker, tenant, None, "s1", "1", f"I said {uuid4().hex[:6]}")
    his = say(app, worker, tenant, bob, "s1", "2", f"{bob.subject}: {bob.canary('turn2')}")
    erase(app, tenant, unit="subject", subject=UNNAMED_SPEAKER)
    assert all(forgotten(text) for text in texts(app, tenant, unnamed))
    assert not any(forgotten(text) for text in texts(app, tenant, his))


def test_a_turn_sealed_before_cards_named_their_turn_is_reached_through_the_turns_key(
        app, worker, monkeypatch) -> None:
    """Events stored by the release before: a turn's event card under a key naming only its
    session — its speaker's erasure finds it through the turn's key, which names the card."""
    tenant, alice = new_tenant(), Person("alice")
    monkeypatch.setattr("infra.sealing.said_in", lambda tenant_id, provenance: ())
    turn = say(app, worker, tenant, alice, "s1", "1", f"{alice.subject}: {alice.canary('turn1')}")
    monkeypatch.undo()
    erased = erase(app, tenant, unit="subject", subject=alice.subject)
    assert turn.event_card_id in erased.card_ids
    assert is_erased(app.load(tenant, turn.event_card_id, EventCard).description)
    assert is_erased(app.load(tenant, turn.id, Ingestion).text)


def test_erasing_a_turns_card_leaves_the_cards_made_from_it(app, worker) -> None:
    """A card's erasure (retention shreds raw turns so) reaches no card written from it."""
    tenant, alice = new_tenant(), Person("alice")
    turn = say(app, worker, tenant, alice, "s1", "1", f"{alice.subject}: {alice.canary('turn1')}")
    erased = erase(app, tenant, unit="card", card_id=turn.event_card_id)
    assert is_erased(app.load(tenant, turn.event_card_id, EventCard).description)
    assert not set(map(UUID, turn.card_ids)) & set(erased.card_ids)
    made = [written(app, tenant, UUID(card_id)) for card_id in turn.card_ids]
    assert all(alice.canary("turn1") in text for text in made), made


@pytest.mark.parametrize("first", ["card", "session"])
def test_a_speakers_erasure_reaches_the_cards_made_of_a_turn_erased_before(app, worker, first) -> None:
    """Retention erases a turn's event card and keeps the cards made of it (so does erasing the
    card, or the session while a card of it lives on in another): the speaker's erasure still
    finds each of those cards by the speaker its key names — a fact about Sam included —, and
    only them: Sam's slot and his other cards stay."""
    tenant, rita, sam = new_tenant(), Person("rita"), Person("sam")
    sams = app.remember(tenant, state("hobby", sam.canary("own"), subject=sam.subject))
    sams_other = app.remember(tenant, state("city", sam.canary("city"), subject=sam.subject))
    turn = say(app, worker, tenant, rita, "s1", "1",
               f"{rita.subject} talked about {sam.subject} {rita.canary('turn1')}")
    about_sam = UUID(turn.card_ids[-1])
    assert slot_of(app, tenant, about_sam).id == sams.aggregate_id
    if first == "card":
        erase(app, tenant, unit="card", card_id=turn.event_card_id)
    else:  # the turn's key and event card go with the session; a card made of it is kept alive
        assert app.keyring is not None
        kept = {f.key_id for f in app.keyring.find(tenant, sessions=["s1"])
                if f.kind == "card" and f.unit_id in set(map(UUID, turn.card_ids))}
        turn_keys = [f.key_id for f in app.keyring.find(tenant, sessions=["s1"]) if f.key_id not in kept]
        app.keyring.destroy(tenant, turn_keys, uuid4())
    made = [written(app, tenant, UUID(card_id)) for card_id in turn.card_ids]
    assert all(rita.canary("turn1") in text for text in made), "kept by the first erasure"

    erased = erase(app, tenant, unit="subject", subject=rita.subject)

    assert set(map(UUID, turn.card_ids)) <= set(erased.card_ids)
    gone = [written(app, tenant, UUID(card_id)) for card_id in turn.card_ids]
    assert all(forgotten(text) for text in gone), gone
    assert not {sams.card_id, sams_other.card_id} & set(erased.card_ids)
    slot = app.load(tenant, sams.aggregate_id, Slot)
    assert (slot.subject, slot.label) == (sam.subject, "hobby")
    assert slot.cards[sams.card_id].value == sam.canary("own")
    assert slot.cards[about_sam].value != sam.canary("own") and forgotten(slot.cards[about_sam].value)
    city = app.load(tenant, sams_other.aggregate_id, Slot)
    assert city.cards[sams_other.card_id].value == sam.canary("city")


def decided_case(app: Palimpsest, clock: Clock, tenant: str, who: Person) -> tuple[UUID, UUID]:
    """A case of ``who``'s queued (a fourth change in days) and decided with a note: (its slot,
    the case)."""
    case_id = None
    for n in (1, 2, 3, 4):
        clock.advance(days=1)
        written_ = app.remember(tenant, state("clinic", who.canary(f"clinic{n}"), subject=who.subject))
        case_id = written_.case_id or case_id
    assert case_id is not None and written_.aggregate_id is not None, "a write was queued"
    app.arbitrate(tenant, Arbitrate(case_id=case_id, decision="both_valid", decided_by="reviewer",
                                    note=who.canary("note")))
    return written_.aggregate_id, case_id


def notes(app: Palimpsest, case_id: UUID) -> list[Any]:
    return [e.note for e in all_events(app)
            if isinstance(e, ArbitrationCase.Decided) and e.originator_id == case_id]


@pytest.mark.parametrize("unit", ["slot", "subject"])
def test_a_decisions_note_is_forgotten_with_its_slot(app, clock, unit) -> None:
    tenant, alice = new_tenant(), Person("alice")
    slot_id, case_id = decided_case(app, clock, tenant, alice)
    other_slot, other_case = decided_case(app, clock, tenant, bob := Person("bob"))
    assert notes(app, case_id) == [alice.canary("note")]
    erase(app, tenant, **({"unit": "slot", "slot_id": slot_id} if unit == "slot"
                          else {"unit": "subject", "subject": alice.subject}))
    assert [is_erased(note) for note in notes(app, case_id)] == [True]
    assert notes(app, other_case) == [bob.canary("note")]


def test_a_note_decided_before_it_named_its_slot_still_opens(app, clock) -> None:
    """A ``Decided`` of the release before (no ``slot_id``) is sealed under its case's key."""
    tenant, alice = new_tenant(), Person("alice")
    _, case_id = decided_case(app, clock, tenant, alice)
    (stored,) = [e for e in all_events(app) if isinstance(e, ArbitrationCase.Decided)]
    old = object.__new__(ArbitrationCase.Decided)
    object.__setattr__(old, "__dict__", {**vars(stored), "slot_id": None, "note": "an old note"})
    sealed = app.mapper.to_stored_event(old)
    assert app.keyring is not None and app.keyring.ever_made(tenant, "case", case_id)
    as_stored = app.mapper.transcoder.decode(sealed.state)
    del as_stored["slot_id"]
    as_stored["class_version"] = 2  # as the release before stored it
    opened = app.mapper.to_domain_event(replace(sealed, state=app.mapper.transcoder.encode(as_stored)))
    assert (opened.note, opened.slot_id) == ("an old note", None)
