"""Ingest end to end on the embedded PostgreSQL: turns in, cards out, through the real ``openai``
client against a scripted local server (tests.fakes.openai_server), the worker's rules (record the
extraction before any card, commands with derived request ids, dead letters and re-runs), and once
through the ingest relay, the broker and a consumer group."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import pytest

from domain.arbitration import ArbitrationCase
from domain.event_card import EventCard
from domain.ingestion import Ingestion
from domain.knowledge import KnowledgeCard
from domain.slot import Slot
from infra.llm import OpenAIChatModel
from infra.relay import Relay
from infra.settings import Settings
from services.command.commands import IngestTurn
from services.entrypoints.ingest import ingest_consumer
from services.ingest.extraction import Extractor
from services.ingest.worker import IngestWorker, turn_of
from tests.fakes.openai_server import FakeOpenAIServer, Reply, fake_llm_fixture  # noqa: F401
from tests.support import all_events, new_tenant

TAIPEI = ZoneInfo("Asia/Taipei")


def candidate(value: str, *, kind: str = "state", memory_type: str = "fact", label: str = "city",
              hint: str | None = None, subject: str = "user", **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "memory_type": memory_type, "subject": subject, "label": label,
            "value": value, "cardinality_hint": None, "tags": extra.pop("tags", []),
            "occurred_at_hint": hint, "confidence": extra.pop("confidence", 0.8),
            "title": extra.pop("title", None), "related_concepts": [], **extra}


def answer(*cards: dict[str, Any]) -> Reply:
    return Reply.json({"candidates": list(cards)})


@pytest.fixture
def worker(app, fake_llm: FakeOpenAIServer, pg_settings: Settings) -> IngestWorker:  # type: ignore[no-untyped-def]
    settings = pg_settings.model_copy(update={
        "llm_base_url": fake_llm.base_url, "llm_model": "scripted", "llm_retries": 2,
        "llm_backoff_seconds": 0.01, "llm_backoff_max_seconds": 0.02, "llm_timeout_seconds": 2})
    model = OpenAIChatModel(model="scripted", base_url=fake_llm.base_url, timeout=2)
    return IngestWorker(app, Extractor(model, settings))


def ingest(app: Any, tenant: str, text: str, said_at: datetime, *, session: str = "s1",
           turn: str = "1", zone: str = "Asia/Taipei") -> Any:
    return app.ingest_turn(tenant, IngestTurn(session_id=session, turn_id=turn, role="user",
                                              text=text, said_at=said_at, timezone=zone,
                                              agent_id="assistant-1"))


def slot_cards(app: Any, tenant: str, label: str, subject: str = "user") -> list[Any]:
    from domain.rules.cardinality import normalise_label
    from domain.values import Scope
    from services.command.keyed_ids import ids_key
    slot = app.find(tenant, Slot.create_id(ids_key(app.keyring, tenant), tenant, Scope.parse("personal"),
                                           subject, normalise_label(label)), Slot)
    assert slot is not None, f"no slot {subject}/{label}"
    return slot.live_cards


def test_yesterday_across_a_local_midnight_lands_on_the_local_day(app, worker, fake_llm) -> None:  # type: ignore[no-untyped-def]
    tenant = new_tenant()
    said = datetime(2026, 3, 2, 0, 30, tzinfo=TAIPEI)  # 2026-03-01 16:30 UTC: 昨天 is 03-01 local
    fake_llm.script(answer(candidate("高雄", hint="2026-03-01T10:00:00+08:00")))
    turn = ingest(app, tenant, "我昨天搬到高雄了", said)
    assert worker.handle(tenant, turn.ingestion_id) == "applied"
    (card,) = slot_cards(app, tenant, "city")
    assert card.value == "高雄" and card.valid_from == datetime(2026, 3, 1, 10, tzinfo=TAIPEI)
    assert card.provenance.source.value == "agent_inferred"
    assert card.provenance.inference_confidence == 0.8
    assert (card.provenance.session_id, card.provenance.turn_id, card.provenance.agent_id) == \
        ("s1", "1", "assistant-1")
    prompt = fake_llm.chat_requests[-1]["messages"][0]["content"]
    assert "<current_time>2026-03-02T00:30:00+08:00</current_time>" in prompt and "Asia/Taipei" in prompt


def test_a_hint_against_the_turns_own_words_loses_to_the_resolver(app, worker, fake_llm) -> None:  # type: ignore[no-untyped-def]
    tenant = new_tenant()
    said = datetime(2026, 5, 20, 15, tzinfo=TAIPEI)
    fake_llm.script(answer(candidate("去了淡水", kind="event", memory_type="event",
                                     hint="2026-05-20T09:00:00+08:00")))  # 三天前 is 05-17
    turn = ingest(app, tenant, "我三天前去了淡水", said)
    worker.handle(tenant, turn.ingestion_id)
    ingestion = app.load(tenant, turn.ingestion_id, Ingestion)
    (record,) = ingestion.candidates
    assert record["time"]["source"] == "resolver"
    (event,) = [app.load(tenant, UUID(i), EventCard) for i in ingestion.card_ids]
    assert event.occurred_at == datetime(2026, 5, 17, tzinfo=TAIPEI)


def test_a_hint_in_the_future_falls_back_to_the_turn(app, worker, fake_llm) -> None:  # type: ignore[no-untyped-def]
    tenant = new_tenant()
    said = datetime(2026, 5, 20, 15, tzinfo=TAIPEI)
    fake_llm.script(answer(candidate("Tainan", hint="2027-01-01T00:00:00+08:00")))
    turn = ingest(app, tenant, "I live in Tainan", said)
    worker.handle(tenant, turn.ingestion_id)
    (card,) = slot_cards(app, tenant, "city")
    assert card.valid_from == said
    assert app.load(tenant, turn.ingestion_id, Ingestion).candidates[0]["time"]["source"] == "turn"


def test_the_last_retry_failing_dead_letters_the_turn_and_a_rerun_succeeds(app, worker, fake_llm) -> None:  # type: ignore[no-untyped-def]
    tenant = new_tenant()
    fake_llm.script(Reply.text("not json"), Reply.error(500), Reply.text("{\"nope\": 1}"))
    turn = ingest(app, tenant, "I work at Acme", datetime(2026, 5, 1, 9, tzinfo=TAIPEI))
    assert worker.handle(tenant, turn.ingestion_id) == "dead_letter"
    parked = app.load(tenant, turn.ingestion_id, Ingestion)
    assert parked.status == "dead_letter" and parked.attempts == 3 and parked.error
    assert app.find(tenant, parked.event_card_id, EventCard) is not None  # the turn is kept
    app.ingest_rerun(tenant, turn.ingestion_id, "ops")
    fake_llm.script(answer(candidate("Acme", label="employer")))
    assert worker.handle(tenant, turn.ingestion_id) == "applied"
    assert [c.value for c in slot_cards(app, tenant, "employer")] == ["Acme"]


def test_a_timeout_then_success(app, worker, fake_llm) -> None:  # type: ignore[no-untyped-def]
    tenant = new_tenant()
    fake_llm.script(Reply.json({"candidates": []}, delay=3.0), answer(candidate("Hsinchu")))
    turn = ingest(app, tenant, "moved to Hsinchu", datetime(2026, 5, 1, 9, tzinfo=TAIPEI))
    assert worker.handle(tenant, turn.ingestion_id) == "applied"
    assert app.load(tenant, turn.ingestion_id, Ingestion).attempts == 2


def test_a_same_turn_correction_overwrites(app, worker, fake_llm) -> None:  # type: ignore[no-untyped-def]
    tenant = new_tenant()
    fake_llm.script(answer(candidate("Taipei"), candidate("Kaohsiung")))
    turn = ingest(app, tenant, "I live in Taipei — typo, Kaohsiung", datetime(2026, 5, 1, 9, tzinfo=TAIPEI))
    worker.handle(tenant, turn.ingestion_id)
    cards = slot_cards(app, tenant, "city")
    assert [c.value for c in cards if c.valid_to is None] == ["Kaohsiung"]


def test_a_flip_flop_reaches_arbitration(app, worker, fake_llm) -> None:  # type: ignore[no-untyped-def]
    tenant = new_tenant()
    start = app.test_clock.now - timedelta(days=20)
    cases = []
    for day, city in enumerate(["Taipei", "Tainan", "Taipei", "Tainan"]):
        app.test_clock.advance(minutes=1)
        fake_llm.script(answer(candidate(city)))
        turn = ingest(app, tenant, f"I live in {city}", start + timedelta(days=day * 4),
                      session=f"s{day}", turn="1")
        worker.handle(tenant, turn.ingestion_id)
        cases = [e for e in all_events(app) if isinstance(e, ArbitrationCase.Opened)
                 and e.tenant_id == tenant]
    assert len(cases) == 1, "the third change in 30 days is queued"


def test_knowledge_is_evidenced_by_the_turn_and_related(app, worker, fake_llm) -> None:  # type: ignore[no-untyped-def]
    tenant = new_tenant()
    fake_llm.script(answer(
        candidate("Short-lived JWTs signed with rotating keys", kind="knowledge", memory_type="note",
                  title="JWT signing", tags=["JWT"]),
        candidate("Refresh tokens are rotated on each use", kind="knowledge", memory_type="note",
                  title="Refresh rotation", tags=["oauth"])))
    turn = ingest(app, tenant, "We agreed: short-lived JWTs, rotate refresh tokens",
                  datetime(2026, 5, 1, 9, tzinfo=TAIPEI))
    worker.handle(tenant, turn.ingestion_id)
    first, second = [app.load(tenant, UUID(i), KnowledgeCard)
                     for i in app.load(tenant, turn.ingestion_id, Ingestion).card_ids]
    assert ("evidenced_by", turn.event_card_id) in first.links
    assert ("evidenced_by", turn.event_card_id) in second.links
    assert ("related_to", second.id) in first.links
    assert first.tags == ["json web token"]  # normalised: JWT = json web token


def test_a_backfill_of_last_year_keeps_its_times(app, worker, fake_llm) -> None:  # type: ignore[no-untyped-def]
    tenant = new_tenant()
    said = datetime(2025, 6, 10, 20, tzinfo=TAIPEI)
    fake_llm.script(answer(candidate("看了演唱會", kind="event", memory_type="event",
                                     hint="2025-06-09T19:30:00+08:00")))
    turn = ingest(app, tenant, "我昨天去看了演唱會", said)
    worker.handle(tenant, turn.ingestion_id)
    ingestion = app.load(tenant, turn.ingestion_id, Ingestion)
    assert app.load(tenant, ingestion.event_card_id, EventCard).occurred_at == said
    (event,) = [app.load(tenant, UUID(i), EventCard) for i in ingestion.card_ids]
    assert event.occurred_at == datetime(2025, 6, 9, 19, 30, tzinfo=TAIPEI)
    assert "<current_time>2025-06-10T20:00:00+08:00</current_time>" in \
        fake_llm.chat_requests[-1]["messages"][0]["content"]


def test_a_turn_handled_again_stores_nothing_new(app, worker, fake_llm) -> None:  # type: ignore[no-untyped-def]
    """A worker that died after recording the extraction applies the recorded candidates, without
    asking the model again; one that died after applying does nothing."""
    tenant = new_tenant()
    turn = ingest(app, tenant, "I live in Keelung", datetime(2026, 5, 1, 9, tzinfo=TAIPEI))
    fake_llm.script(answer(candidate("Keelung")))
    extraction = worker.extractor.extract(turn_of(app.load(tenant, turn.ingestion_id, Ingestion)))
    app.record_extraction(tenant, turn.ingestion_id, [c.stored() for c in extraction.candidates],
                          extraction.model, extraction.attempts)  # then the worker died
    asked = len(fake_llm.chat_requests)
    assert worker.handle(tenant, turn.ingestion_id) == "applied"
    assert len(fake_llm.chat_requests) == asked
    before = len(all_events(app))
    assert worker.handle(tenant, turn.ingestion_id) == "applied"
    app.ingest_turn(tenant, IngestTurn(session_id="s1", turn_id="1", role="user", text="again",
                                       said_at=datetime(2026, 5, 1, 9, tzinfo=TAIPEI)))
    assert len(all_events(app)) == before
    assert [c.value for c in slot_cards(app, tenant, "city")] == ["Keelung"]


def test_turns_reach_the_worker_through_the_ingest_topic(app, worker, fake_llm, broker, pg_settings) -> None:  # type: ignore[no-untyped-def]
    tenant = new_tenant()
    topic = f"ingest-{tenant}"
    settings = pg_settings.model_copy(update={"kafka_ingest_topic": topic, "ingest_group": topic,
                                              "kafka_session_timeout_ms": 6_000})
    fake_llm.responder = lambda text: answer(candidate(text.split()[-1], label=f"l-{text.split()[0]}"))
    turns = [ingest(app, tenant, f"t{i} city{i}", datetime(2026, 5, 1, 9, i, tzinfo=TAIPEI),
                    turn=str(i)) for i in range(5)]
    relay = Relay.for_ingest(app.recorder, settings, broker.bootstrap, name=f"ingest-{tenant}")
    stop = threading.Event()
    consumer = ingest_consumer(settings, broker.bootstrap)
    threads = [threading.Thread(target=relay.run, args=(stop,), daemon=True),
               threading.Thread(target=worker.run, args=(consumer, stop), daemon=True)]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(
                app.load(tenant, t.ingestion_id, Ingestion).status != "applied" for t in turns):
            time.sleep(0.2)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
        consumer.close()
        relay.close()
    assert all(app.load(tenant, t.ingestion_id, Ingestion).status == "applied" for t in turns)
    third = app.load(tenant, turns[3].ingestion_id, Ingestion)
    assert [c["value"] for c in third.candidates] == ["city3"], third.candidates
    assert [c.value for c in slot_cards(app, tenant, "l-t3")] == ["city3"]
