"""Ingesting conversation turns on the in-memory event store: a turn becomes its event card and
``Ingestion.Received`` in one save, a turn sent twice is stored once, what is refused stores
nothing, and the ingestion moves only along its states."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from eventsourcing.utils import get_topic

from domain.errors import (
    CardNotFoundError,
    ContentTooLargeError,
    EmptyContentError,
    FutureTimeError,
    InvalidCommandError,
    InvalidKindError,
    InvalidTextError,
    InvalidTimeError,
    InvalidTransitionError,
)
from domain.event_card import EventCard
from domain.ingestion import Ingestion, IngestStatus
from domain.values import ScopeKind, Source
from infra.relay import INGEST_EVENTS
from infra.settings import Settings
from projections.cards import operations
from projections.ops import RECORDS
from projections.sinks import MemorySink
from services.command.commands import IngestTurn
from services.command.memory import Palimpsest
from services.factory import create_app
from services.ingest.commands import MAX_ERROR_CHARS, event_card_id
from tests.support import Clock, all_events, new_tenant, stored_count

TAIPEI = timezone(timedelta(hours=8))


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def app(clock: Clock) -> Palimpsest:
    return create_app(Settings(persistence="memory"), clock=clock)


def turn(turn_id: str = "1", **extra: Any) -> IngestTurn:
    fields: dict[str, Any] = {
        "session_id": "s-1", "turn_id": turn_id, "role": "user",
        "text": "I moved to Kyoto yesterday", "said_at": datetime(2026, 5, 31, 22, tzinfo=TAIPEI),
        "timezone": "Asia/Taipei", **extra}
    return IngestTurn(**fields)


def received(app: Palimpsest, tenant: str, **extra: Any) -> Any:
    return app.ingest_turn(tenant, turn(**extra))


# ---- a turn in ---------------------------------------------------------------------------


def test_a_turn_is_stored_as_its_event_card_and_received_in_one_save(app, clock) -> None:
    tenant, before = new_tenant(), stored_count(app)
    result = app.ingest_turn(tenant, turn(agent_id="agent-7"))
    assert not result.replayed and result.position == before + 2, "two events, one save"
    card = app.load(tenant, result.event_card_id, EventCard)
    assert card.description == "I moved to Kyoto yesterday"
    assert card.occurred_at == datetime(2026, 5, 31, 22, tzinfo=TAIPEI)
    assert list(card.tags) == ["conversation", "user"] and card.scope.kind is ScopeKind.PERSONAL
    assert card.provenance.source is Source.USER_STATED
    assert (card.provenance.agent_id, card.provenance.session_id, card.provenance.turn_id) == (
        "agent-7", "s-1", "1")
    ingestion = app.load(tenant, result.ingestion_id, Ingestion)
    assert ingestion.status is IngestStatus.RECEIVED and str(ingestion.status) == "received"
    assert (ingestion.event_card_id, ingestion.role, ingestion.timezone, ingestion.received_at) == (
        result.event_card_id, "user", "Asia/Taipei", clock.now)
    assert result.ingestion_id == Ingestion.create_id(tenant, "s-1", "1")
    assert result.event_card_id == event_card_id(tenant, "s-1", "1")


@pytest.mark.parametrize("role", ["assistant", "system", "tool"])
def test_what_the_user_did_not_say_is_imported(app, role) -> None:
    tenant = new_tenant()
    card = app.load(tenant, received(app, tenant, role=role).event_card_id, EventCard)
    assert card.provenance.source is Source.IMPORTED and list(card.tags) == ["conversation", role]


def test_a_turn_sent_twice_is_stored_once(app) -> None:
    tenant = new_tenant()
    first = received(app, tenant)
    count = stored_count(app)
    again = received(app, tenant, text="something else entirely")
    assert again.replayed and again.position is None
    assert (again.ingestion_id, again.event_card_id) == (first.ingestion_id, first.event_card_id)
    assert stored_count(app) == count, "nothing stored"
    other_session = received(app, tenant, session_id="s-2")
    other_tenant = received(app, new_tenant())
    assert len({first.ingestion_id, other_session.ingestion_id, other_tenant.ingestion_id}) == 3


def test_a_duplicate_that_loses_the_race_finds_the_winner(app, monkeypatch) -> None:
    """Decided as new (the winner saved after it looked), refused by the store's version check,
    decided again: the winner's ids."""
    tenant = new_tenant()
    first = received(app, tenant)
    count, real_find, blind = stored_count(app), app.find, [True]

    def find_late(tenant_id: str, aggregate_id: Any, cls: Any) -> Any:
        if cls is Ingestion and blind:
            blind.pop()
            return None
        return real_find(tenant_id, aggregate_id, cls)

    monkeypatch.setattr(app, "find", find_late)
    again = received(app, tenant)
    assert again.replayed and again.ingestion_id == first.ingestion_id and not blind
    assert stored_count(app) == count


def test_concurrent_copies_of_one_turn_store_it_once(app) -> None:
    tenant, start = new_tenant(), threading.Barrier(4)
    results: list[Any] = []

    def send() -> None:
        start.wait(timeout=10)
        results.append(received(app, tenant))

    threads = [threading.Thread(target=send) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(results) == 4 and sum(not r.replayed for r in results) == 1
    assert len({r.ingestion_id for r in results}) == 1
    assert [type(e).__qualname__ for e in all_events(app)].count("Ingestion.Received") == 1


def test_a_request_id_answers_a_retry_from_its_receipt(app) -> None:
    tenant = new_tenant()
    first = received(app, tenant, request_id="r-1")
    again = received(app, tenant, request_id="r-1")
    assert again.replayed and again.ingestion_id == first.ingestion_id


def test_a_backfill_of_last_year_keeps_its_times(app, clock) -> None:
    tenant, said = new_tenant(), clock.now - timedelta(days=400)
    result = received(app, tenant, said_at=said.astimezone(TAIPEI))
    card = app.load(tenant, result.event_card_id, EventCard)
    ingestion = app.load(tenant, result.ingestion_id, Ingestion)
    assert card.occurred_at == said == ingestion.said_at
    assert ingestion.received_at == clock.now, "learned now, said then"


@pytest.mark.parametrize(("extra", "error", "says"), [
    ({"timezone": "Mars/Olympus"}, InvalidTimeError, "unknown time zone"),
    ({"timezone": "America"}, InvalidTimeError, "IANA"),
    ({"timezone": "../etc/passwd"}, InvalidTimeError, "IANA"),
    ({"timezone": "localtime"}, InvalidTimeError, "IANA"),
    ({"said_at": datetime(2026, 5, 31, 22)}, InvalidTimeError, "said_at needs a time zone"),
    ({"said_at": datetime(2026, 6, 2, tzinfo=UTC)}, FutureTimeError, "said_at"),
    ({"role": "narrator"}, InvalidKindError, "unknown role 'narrator'"),
    ({"text": "   "}, EmptyContentError, "text is empty"),
    ({"text": "x" * 8_001}, ContentTooLargeError, "text has 8001 characters"),
    ({"text": "bell \x07"}, InvalidTextError, "text holds the control character"),
])
def test_a_bad_turn_is_refused_and_nothing_is_stored(app, extra, error, says) -> None:
    tenant, before = new_tenant(), stored_count(app)
    with pytest.raises(error, match=says):
        received(app, tenant, **extra)
    assert stored_count(app) == before


# ---- where it goes from there --------------------------------------------------------------


def test_a_turn_goes_received_extracted_applied(app) -> None:
    tenant = new_tenant()
    ingestion_id = received(app, tenant).ingestion_id
    candidates = [{"kind": "state", "value": "Kyoto", "time": {"at": "2026-05-30T16:00:00+00:00"}}]
    extracted = app.record_extraction(tenant, ingestion_id, candidates, "model-x", 2)
    assert extracted.outcome == "extracted" and extracted.position is not None
    loaded = app.load(tenant, ingestion_id, Ingestion)
    assert loaded.candidates == tuple(candidates) and (loaded.model, loaded.attempts) == ("model-x", 2)
    card = app.load(tenant, received(app, tenant, turn_id="2").event_card_id, EventCard)
    assert app.record_applied(tenant, ingestion_id, [card.id]).outcome == "applied"
    loaded = app.load(tenant, ingestion_id, Ingestion)
    assert loaded.status is IngestStatus.APPLIED and loaded.card_ids == (str(card.id),)


def test_refused_moves_store_nothing(app) -> None:
    tenant = new_tenant()
    ingestion_id = received(app, tenant).ingestion_id
    before = stored_count(app)
    with pytest.raises(InvalidTransitionError,
                       match="cannot record applied cards: .* is received, not extracted"):
        app.record_applied(tenant, ingestion_id, [])
    with pytest.raises(InvalidTransitionError, match="cannot re-run the turn: .* not dead_letter"):
        app.ingest_rerun(tenant, ingestion_id, "ops")
    app.record_extraction(tenant, ingestion_id, [], "m", 1)
    with pytest.raises(InvalidTransitionError):
        app.record_extraction(tenant, ingestion_id, [], "m", 1)
    with pytest.raises(InvalidTransitionError):
        app.record_dead_letter(tenant, ingestion_id, "late", 3)
    app.record_applied(tenant, ingestion_id, [])
    for move in (lambda: app.record_applied(tenant, ingestion_id, []),
                 lambda: app.ingest_rerun(tenant, ingestion_id, "ops")):
        with pytest.raises(InvalidTransitionError, match="is applied, not"):
            move()
    assert stored_count(app) == before + 2


def test_a_dead_letter_is_rerun_only_from_there(app) -> None:
    tenant = new_tenant()
    ingestion_id = received(app, tenant).ingestion_id
    parked = app.record_dead_letter(tenant, ingestion_id, "timeout \x1b[31mred\x1b[0m" + "x" * 5_000, 4)
    assert parked.outcome == "dead_letter"
    loaded = app.load(tenant, ingestion_id, Ingestion)
    assert loaded.error is not None and len(loaded.error) == MAX_ERROR_CHARS
    assert loaded.error.startswith("timeout \ufffd[31mred") and loaded.attempts == 4
    with pytest.raises(InvalidTransitionError):
        app.record_dead_letter(tenant, ingestion_id, "again", 4)
    with pytest.raises(InvalidTransitionError):
        app.record_extraction(tenant, ingestion_id, [], "m", 1)
    assert app.ingest_rerun(tenant, ingestion_id, "ops").outcome == "received"
    loaded = app.load(tenant, ingestion_id, Ingestion)
    assert (loaded.status, loaded.error, loaded.attempts) == (IngestStatus.RECEIVED, None, 0)
    app.record_extraction(tenant, ingestion_id, [{"kind": "event"}], "m", 1)
    assert app.load(tenant, ingestion_id, Ingestion).status is IngestStatus.EXTRACTED


def test_model_output_is_recorded_printable(app) -> None:
    tenant = new_tenant()
    ingestion_id = received(app, tenant).ingestion_id
    app.record_extraction(tenant, ingestion_id, [{"value": "a\x00b", "tags": ["c\x1fd"]}], "m", 1)
    (candidate,) = app.load(tenant, ingestion_id, Ingestion).candidates
    assert candidate == {"value": "a\ufffdb", "tags": ["c\ufffdd"]}


def test_another_tenants_ingestion_is_not_found(app) -> None:
    tenant = new_tenant()
    ingestion_id = received(app, tenant).ingestion_id
    with pytest.raises(CardNotFoundError, match="no ingested turn"):
        app.record_dead_letter(new_tenant(), ingestion_id, "x", 1)
    with pytest.raises(CardNotFoundError):
        app.ingest_rerun(new_tenant(), ingestion_id, "ops")


# ---- what the relay and the projection see -----------------------------------------------


def test_the_ingest_relay_selects_only_the_turns_handed_over(app) -> None:
    tenant = new_tenant()
    first = received(app, tenant).ingestion_id
    app.record_dead_letter(tenant, first, "x", 1)
    app.ingest_rerun(tenant, first, "ops")
    received(app, tenant, turn_id="2")
    assert (get_topic(Ingestion.Received), get_topic(Ingestion.RerunRequested)) == INGEST_EVENTS
    selected = app.recorder.select_notifications(start=1, limit=100, topics=INGEST_EVENTS)
    names = [type(app.mapper.to_domain_event(n)).__qualname__ for n in selected]
    assert names == ["Ingestion.Received", "Ingestion.RerunRequested", "Ingestion.Received"]


def test_the_projection_keeps_one_row_per_turn(app, clock) -> None:
    tenant = new_tenant()
    said = clock.now - timedelta(days=3)
    ingestion_id = received(app, tenant, said_at=said, agent_id="a").ingestion_id
    clock.advance(minutes=1)
    app.record_dead_letter(tenant, ingestion_id, "boom", 3)
    clock.advance(minutes=1)
    app.ingest_rerun(tenant, ingestion_id, "ops")
    clock.advance(minutes=1)
    app.record_extraction(tenant, ingestion_id, [{"k": 1}, {"k": 2}], "m", 1)
    sink = MemorySink()
    for event in all_events(app):
        sink.apply_all(operations(event))
    row = sink.records["ingestions"][(tenant, ingestion_id)]
    assert set(row) == set(RECORDS["ingestions"][1])
    assert (row["status"], row["attempts"], row["error"], row["candidates"], row["card_ids"]) == (
        "extracted", 1, None, 2, None)
    assert row["said_at"] == said and row["received_at"] == clock.now - timedelta(minutes=3)
    assert row["updated_at"] == clock.now and row["agent_id"] == "a" and row["role"] == "user"
    clock.advance(minutes=1)
    app.record_applied(tenant, ingestion_id, [ingestion_id])
    sink.apply_all(operations(all_events(app)[-1]))
    assert row["card_ids"] == [str(ingestion_id)] and row["status"] == "applied"


def test_an_extraction_recorded_before_rejections_were_kept_reads_with_none(app) -> None:
    """``Extracted`` v1 (stored before candidates were checked against the turn) is upcast."""
    tenant = new_tenant()
    ingestion_id = received(app, tenant).ingestion_id
    app.record_extraction(tenant, ingestion_id, [{"kind": "event"}], "m", 1,
                          rejected=[{"value": "x", "rejected": "no support"}])
    stored = app.recorder.select_events(ingestion_id)[-1]
    state = app.mapper.transcoder.decode(stored.state)
    assert set(state.pop("rejected")) == {"_sealed_"}, "what was rejected is sealed like the rest"
    state.pop("class_version", None)
    old = type(stored)(originator_id=stored.originator_id,
                       originator_version=stored.originator_version, topic=stored.topic,
                       state=app.mapper.transcoder.encode(state))
    event = app.mapper.to_domain_event(old)
    assert tuple(event.rejected) == () and list(event.candidates) == [{"kind": "event"}]
    assert list(app.load(tenant, ingestion_id, Ingestion).rejected) == [
        {"value": "x", "rejected": "no support"}]


# ---- who speaks ----------------------------------------------------------------------------


def test_a_turn_keeps_its_speaker_and_refuses_one_that_names_no_subject(app) -> None:
    tenant = new_tenant()
    result = received(app, tenant, speaker="ada-7")
    assert app.load(tenant, result.ingestion_id, Ingestion).speaker == "ada-7"
    assert app.load(tenant, received(app, tenant, turn_id="2").ingestion_id, Ingestion).speaker is None
    before = stored_count(app)
    for bad in ("a/b", "   ", "x\x00"):
        with pytest.raises(InvalidCommandError, match="speaker"):
            received(app, tenant, turn_id="3", speaker=bad)
    assert stored_count(app) == before


def test_the_speaker_sees_their_own_slots_as_the_user_and_no_one_elses() -> None:
    from services.ingest.catalogue import CatalogueSlot
    from services.ingest.extraction import as_speaker, speaker_view

    slots = [CatalogueSlot("user", "city", "single_value", ("Taipei",)),
             CatalogueSlot("ada", "city", "single_value", ("Paris",)),
             CatalogueSlot("Mia", "job", "single_value", ("nurse",))]
    assert speaker_view(slots, "user") == slots
    seen = speaker_view(slots, "ada")
    assert [(s.subject, s.values) for s in seen] == [("user", ("Paris",)), ("Mia", ("nurse",))]
    assert (as_speaker("user", "ada"), as_speaker("Mia", "ada")) == ("ada", "Mia")
