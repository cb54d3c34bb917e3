"""A turn's extraction, cards and Applied in one save, and the turns of a round or of an ingest
call in one save, on the in-memory event store: the same decisions as one command a candidate,
each turn applied once, a refused candidate or turn leaving nothing half-written."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any
from uuid import UUID

import pytest

from domain.errors import InvalidKindError, InvalidTransitionError, StoreUnavailableError
from domain.event_card import EventCard
from domain.ingestion import Ingestion
from domain.knowledge import KnowledgeCard
from domain.rules.cardinality import normalise_label
from domain.slot import Slot
from domain.values import Scope
from infra.embedders import Embedder
from infra.settings import Settings
from services.command.commands import IngestTurn, Link
from services.command.keyed_ids import ids_key
from services.command.memory import Palimpsest
from services.factory import create_app
from services.ingest.admission import Admission, Admitted
from services.ingest.applying import turn_of
from services.ingest.candidates import Candidate
from services.ingest.catalogue import KnownSlot, Similarity
from services.ingest.extraction import Extraction, plan_commands
from services.ingest.records import TurnExtraction
from services.ingest.resolution import Thresholds
from services.ingest.rounds import RoundTurn
from services.ingest.worker import IngestWorker
from tests.fakes.openai_server import fake_vector
from tests.support import Clock, all_events, new_tenant, stored_count

TAIPEI = timezone(timedelta(hours=8))
SAID = datetime(2026, 5, 31, 22, tzinfo=TAIPEI)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def make_app(clock: Clock) -> Palimpsest:
    return create_app(Settings(persistence="memory"), clock=clock)


@pytest.fixture
def app(clock: Clock) -> Palimpsest:
    return make_app(clock)


def turn(session: str = "s-1", turn_id: str = "1", **extra: Any) -> IngestTurn:
    return IngestTurn(**{"session_id": session, "turn_id": turn_id, "role": "user",
                         "text": "I live in Taipei, no, Kaohsiung; we read about JWT and OAuth",
                         "said_at": SAID, "timezone": "Asia/Taipei", **extra})


def candidate(value: str, kind: str = "state", label: str = "city", at: datetime = SAID,
              **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "memory_type": "event" if kind == "event" else "fact", "subject": "user",
            "label": label, "value": value, "confidence": 0.8,
            "time": {"occurred_at": at.isoformat(), "source": "turn", "note": "the turn's time"},
            "cardinality": None, "tags": [], "title": extra.pop("title", None), "related": [],
            "hint": None, "existing_label": None, "resolution": {"grounding": "quoted"}, **extra}


CANDIDATES = [candidate("Taipei"), candidate("Kaohsiung"), candidate("moved", kind="event"),
              candidate("JWT are signed tokens", kind="knowledge", title="JWT"),
              candidate("OAuth delegates access", kind="knowledge", title="OAuth")]


@pytest.fixture
def saves(app: Palimpsest) -> Iterator[list[int]]:
    """How many events each transaction of the store held, from now on."""
    counted: list[int] = []
    insert = app.recorder.insert_events

    def counting(stored_events: Any, **kwargs: Any) -> Any:
        counted.append(len(stored_events))
        return insert(stored_events, **kwargs)

    app.recorder.insert_events = counting  # type: ignore[method-assign]
    yield counted


def slot(app: Palimpsest, tenant: str, label: str = "city") -> Slot:
    found = app.find(tenant, Slot.create_id(ids_key(app.keyring, tenant), tenant,
                                            Scope.parse("personal"), "user", normalise_label(label)), Slot)
    assert found is not None
    return found


def one_command_a_candidate(app: Palimpsest, tenant: str, ingestion_id: UUID,
                            candidates: list[dict[str, Any]]) -> None:
    """The way the worker applied a turn before: a transaction for the extraction, one for each
    candidate's command (with its receipt), one for each related_to link, one for Applied."""
    app.record_extraction(tenant, ingestion_id, candidates, "m", 1)
    ingestion = app.load(tenant, ingestion_id, Ingestion)
    results = [app.remember(tenant, c) for c in plan_commands(turn_of(ingestion), ingestion.candidates)]
    knowledge = [r.card_id for r, c in zip(results, candidates, strict=True) if c["kind"] == "knowledge"]
    for i, first in enumerate(knowledge):
        for second in knowledge[i + 1:]:
            assert first is not None and second is not None
            app.link(tenant, Link(card_id=first, edge="related_to", target_id=second,
                                  request_id=f"ingest:{ingestion_id}:related:{first}:{second}"))
    app.record_applied(tenant, ingestion_id, [r.card_id for r in results if r.card_id])


def test_a_turns_extraction_cards_and_applied_are_one_save(app, saves) -> None:
    tenant = new_tenant()
    ingestion_id = app.ingest_turn(tenant, turn()).ingestion_id
    result = app.apply_extraction(tenant, ingestion_id, CANDIDATES, "m", 1)
    assert result.outcome == "applied" and len(saves) == 2, "the turn's arrival, then its cards"
    events = all_events(app)[-saves[-1]:]
    assert [type(e).__qualname__ for e in events[-2:]] == ["Ingestion.Extracted", "Ingestion.Applied"]
    assert result.position == stored_count(app)
    ingestion = app.load(tenant, ingestion_id, Ingestion)
    assert len(ingestion.card_ids) == 5 and len(ingestion.candidates) == 5
    assert [c.value for c in slot(app, tenant).live_cards if c.current] == ["Kaohsiung"]


def test_the_cards_are_those_one_command_a_candidate_made(clock) -> None:
    """The same turn applied both ways, on two stores at the same time: the same slot history
    (ids derived from the request ids included), event, concepts and links."""
    before, after, tenant = make_app(clock), make_app(clock), new_tenant()
    old = before.ingest_turn(tenant, turn()).ingestion_id
    new = after.ingest_turn(tenant, turn()).ingestion_id
    one_command_a_candidate(before, tenant, old, CANDIDATES)
    after.apply_extraction(tenant, new, CANDIDATES, "m", 1)
    assert [(c.card_id, c.value, c.valid_from, c.valid_to, c.retracted_at)
            for c in slot(before, tenant).cards.values()] == \
        [(c.card_id, c.value, c.valid_from, c.valid_to, c.retracted_at)
         for c in slot(after, tenant).cards.values()]
    was, now = (app.load(tenant, i, Ingestion) for app, i in ((before, old), (after, new)))
    assert (was.candidates, was.status, len(was.card_ids)) == (now.candidates, now.status,
                                                                len(now.card_ids))

    def made(app: Palimpsest, ingestion: Ingestion) -> list[Any]:
        cards: list[Any] = [app.find(tenant, UUID(i), EventCard)
                            or app.find(tenant, UUID(i), KnowledgeCard) for i in ingestion.card_ids]
        return [(type(c).__name__, getattr(c, "description", None) or c.body,
                 sorted(edge for edge, _ in c.links)) for c in cards if c is not None]

    assert made(before, was) == made(after, now) and len(made(after, now)) == 3


def test_the_turns_of_a_round_are_one_save_and_see_each_others_cards(clock, app, saves) -> None:
    tenant, sequential = new_tenant(), make_app(clock)
    turns = [turn(session=f"s-{i}", said_at=SAID + timedelta(hours=i)) for i in range(3)]
    ids = [app.ingest_turn(tenant, t).ingestion_id for t in turns]
    alone = [sequential.ingest_turn(tenant, t).ingestion_id for t in turns]
    cities = ["Taipei", "Tainan", "Taichung"]
    extractions = [TurnExtraction(i, (candidate(city, at=SAID + timedelta(hours=n)),), "m", 1)
                   for n, (i, city) in enumerate(zip(ids, cities, strict=True))]
    del saves[:]
    results = app.apply_extractions(tenant, extractions)
    assert len(saves) == 1 and [r.outcome for r in results] == ["applied"] * 3
    assert len({r.position for r in results}) == 1
    for n, i in enumerate(alone):
        sequential.apply_extraction(tenant, i, [candidate(cities[n], at=SAID + timedelta(hours=n))],
                                    "m", 1)
    assert [(c.card_id, c.value, c.valid_to) for c in slot(app, tenant).cards.values()] == \
        [(c.card_id, c.value, c.valid_to) for c in slot(sequential, tenant).cards.values()]
    assert [c.value for c in slot(app, tenant).cards.values() if c.current] == ["Taichung"]


def test_a_refused_candidate_is_left_out_and_leaves_nothing_half_written(app) -> None:
    tenant = new_tenant()
    ingestion_id = app.ingest_turn(tenant, turn()).ingestion_id
    future = SAID + timedelta(days=3)  # beyond the clock-skew tolerance: refused by the slot
    result = app.apply_extraction(tenant, ingestion_id, [
        candidate("Taipei"), candidate("Tainan", at=future), candidate("a/b", label="x/y")], "m", 1)
    assert result.outcome == "applied"
    ingestion = app.load(tenant, ingestion_id, Ingestion)
    assert len(ingestion.candidates) == 3 and len(ingestion.card_ids) == 1
    assert [c.value for c in slot(app, tenant).cards.values()] == ["Taipei"]


def test_a_turn_applied_already_is_answered_where_it_stands(app, saves) -> None:
    tenant = new_tenant()
    ingestion_id = app.ingest_turn(tenant, turn()).ingestion_id
    app.apply_extraction(tenant, ingestion_id, [candidate("Taipei")], "m", 1)
    count = stored_count(app)
    again = app.apply_extraction(tenant, ingestion_id, [candidate("Tainan")], "m", 1)
    assert (again.outcome, again.position, stored_count(app)) == ("applied", None, count)
    with pytest.raises(InvalidTransitionError, match="is applied, not extracted"):
        app.apply_extracted(tenant, ingestion_id)


def test_cards_of_a_recorded_extraction_are_written_once_with_the_receipts_before(app) -> None:
    """A worker of the release before recorded the extraction and applied the first candidate
    alone before it died: the rest are written, the first answered from its receipt."""
    tenant = new_tenant()
    ingestion_id = app.ingest_turn(tenant, turn()).ingestion_id
    app.record_extraction(tenant, ingestion_id, CANDIDATES[:3], "m", 1)
    ingestion = app.load(tenant, ingestion_id, Ingestion)
    first = app.remember(tenant, plan_commands(turn_of(ingestion), ingestion.candidates)[0])
    assert app.apply_extracted(tenant, ingestion_id).outcome == "applied"
    applied = app.load(tenant, ingestion_id, Ingestion)
    assert applied.card_ids[0] == str(first.card_id) and len(applied.card_ids) == 3
    assert [c.value for c in slot(app, tenant).cards.values()] == ["Taipei", "Kaohsiung"]
    recorded = [e for e in all_events(app) if type(e).__qualname__ == "EventCard.Recorded"
                and e.description == "moved"]
    assert len(recorded) == 1


# ---- the turns of one ingest call ----------------------------------------------------------


def test_the_turns_of_a_call_are_one_save(app, saves) -> None:
    tenant = new_tenant()
    calls = [turn(turn_id=str(i)) for i in range(4)]
    results = app.ingest_turns(tenant, [*calls, calls[1]])
    assert saves == [8], "four event cards and four Received, one transaction"
    assert [r.replayed for r in results] == [False] * 4 + [True]
    assert results[4].ingestion_id == results[1].ingestion_id and results[4].position is None
    assert {r.position for r in results[:4]} == {stored_count(app)}
    count = stored_count(app)
    again = app.ingest_turns(tenant, calls[:2])
    assert all(r.replayed for r in again) and stored_count(app) == count


def test_one_refused_turn_refuses_the_call(app) -> None:
    tenant, before = new_tenant(), stored_count(app)
    with pytest.raises(InvalidKindError):
        app.ingest_turns(tenant, [turn(turn_id="1"), turn(turn_id="2", role="narrator"),
                                  turn(turn_id="3")])
    assert stored_count(app) == before


# ---- the worker, when the store fails -----------------------------------------------------


def test_a_failed_save_keeps_the_answer_then_writes_the_cards(app, monkeypatch) -> None:
    """The round's save fails: the turn's answer is recorded alone, then its cards (the model is
    not asked again)."""
    tenant = new_tenant()
    ingestion_id = app.ingest_turn(tenant, turn()).ingestion_id
    worker = IngestWorker(app, extractor=None, sleep=lambda pause: False)  # type: ignore[arg-type]
    real, failures = app.apply_extractions, [StoreUnavailableError("the store is down")]

    def failing(*args: Any) -> Any:
        if failures:
            raise failures.pop()
        return real(*args)

    monkeypatch.setattr(app, "apply_extractions", failing)
    ingestion = app.load(tenant, ingestion_id, Ingestion)
    item = RoundTurn(tenant, ingestion_id, ingestion, turn_of(ingestion))
    item.extraction = Extraction([Candidate.from_stored(candidate("Taipei"))], "m", 1, "json_schema")
    item.admitted = Admitted(candidates=list(item.extraction.candidates))
    worker._save_together([item])
    assert item.retried and not item.status
    worker._settle(item)
    assert item.status == "applied"
    names = [type(e).__qualname__ for e in all_events(app)[-4:]]
    assert names == ["Ingestion.Extracted", "Slot.Opened", "Slot.Remembered", "Ingestion.Applied"]


# ---- what a round embeds at once ------------------------------------------------------------


class CountingEmbedder(Embedder):
    """Hashed vectors; every text it was asked for, call by call."""

    model, dimensions = "counting", 16

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [fake_vector(text, self.dimensions) for text in texts]


def test_a_round_embeds_at_once_what_slot_resolution_compares() -> None:
    embedder = CountingEmbedder()
    admission = Admission(Similarity(embedder), Thresholds(reuse=0.6, near=0.45), 0.25)
    catalogue = [KnownSlot("user", "diet", "single_value", ("vegetarian",)),
                 KnownSlot("user", "home city", "single_value", ()),
                 KnownSlot("Mia", "city", "single_value", ("Porto",))]
    drifted = Candidate.from_stored(candidate("vegan", label="eating habits", subject="I"))
    admission.prepare([([drifted], catalogue)])
    (batch,) = embedder.calls
    assert any("vegetarian" in text for text in batch) and any("vegan" in text for text in batch)
    assert not any("Porto" in text or text == "city" for text in batch), "Mia's slots: not compared"
    admitted = admission.admit([drifted], ["ok I went fully vegan"], catalogue)
    assert len(embedder.calls) == 1, "nothing embedded one text at a time"
    assert admitted.candidates[0].resolution is not None
