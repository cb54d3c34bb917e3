"""The extraction worker's rounds on the embedded PostgreSQL: the turns of several sessions taken
a round at a time, a round's cards saved in one transaction of the event store, a session's
second turn resolved against the slot its first opened (the read models waited for between
rounds), and the sessions' earlier turns read for a round in one query."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from psycopg import sql

from domain.ingestion import Ingestion
from infra.embedders import UniversalSentenceEmbedder
from infra.llm import OpenAIChatModel
from infra.postgres import EVENTS_TABLE
from infra.settings import Settings
from projections.replay import catch_up
from services.command.commands import IngestTurn
from services.ingest.admission import Admission
from services.ingest.catalogue import ReadModelCatalogue, Similarity
from services.ingest.extraction import Extractor, Shown
from services.ingest.resolution import Thresholds
from services.ingest.worker import IngestWorker
from services.query.readmodels import ReadModels
from tests.fakes.openai_server import FakeOpenAIServer, Reply, fake_llm_fixture  # noqa: F401
from tests.integration.test_ingest import candidate
from tests.integration.test_ingest_slots import ProjectedCatalogue
from tests.support import new_tenant

pytestmark = pytest.mark.integration

BERLIN = ZoneInfo("Europe/Berlin")
SPEAKERS = ("ada", "bo", "cy")


def make_worker(app: Any, projector: Any, runtime_db: Any, fake_llm: FakeOpenAIServer,
                pg_settings: Settings, concurrency: int) -> IngestWorker:
    settings = pg_settings.model_copy(update={"llm_base_url": fake_llm.base_url, "llm_retries": 0})
    admission = Admission(Similarity(UniversalSentenceEmbedder()),
                          Thresholds(settings.ingest_label_reuse, settings.ingest_label_near),
                          settings.ingest_grounding_floor)
    return IngestWorker(app, Extractor(OpenAIChatModel(model="scripted", base_url=fake_llm.base_url,
                                                       timeout=2), settings),
                        catalogue=ProjectedCatalogue(ReadModels(runtime_db, pg_settings.read_schema),
                                                     projector, app),
                        admission=admission, shown=Shown.from_settings(settings),
                        concurrency=concurrency)


@pytest.fixture
def worker(app, projector, runtime_db, fake_llm: FakeOpenAIServer, pg_settings: Settings):  # type: ignore[no-untyped-def]
    """One round at a time."""
    made = make_worker(app, projector, runtime_db, fake_llm, pg_settings, concurrency=1)
    yield made
    made.close()


def diet(text: str) -> Reply:
    """vegetarian under the label diet; vegan under eating habits (a drifting label)."""
    value, label = ("vegan", "eating habits") if "vegan" in text else ("vegetarian", "diet")
    return Reply.json({"candidates": [candidate(value, label=label)]})


def transactions_since(admin_db: Any, schema: str, position: int) -> int:
    query = sql.SQL("SELECT count(DISTINCT xmin::text) FROM {}.{} WHERE notification_id > %s").format(
        sql.Identifier(schema), sql.Identifier(EVENTS_TABLE))
    with admin_db.connect(autocommit=True) as conn:
        return int(conn.execute(query, (position,)).fetchone()[0])


def speak(app: Any, tenant: str, speakers: tuple[str, ...]) -> list[tuple[str, str, Any]]:
    """Two turns of each speaker's session (vegetarian, then vegan), handed over in the order
    said: what one message of the ingest topic hands the worker."""
    said, handed = app.test_clock.now - timedelta(hours=1), []
    for n, text in enumerate(["I'm vegetarian these days", "ok I went fully vegan"]):
        for speaker in speakers:
            received = app.ingest_turn(tenant, IngestTurn(
                session_id=f"chat-{speaker}", turn_id=str(n), role="user", text=text,
                said_at=said + timedelta(minutes=n), timezone="Europe/Berlin", speaker=speaker))
            handed.append((tenant, f"chat-{speaker}", received.ingestion_id))
    return handed


def resolved_against_the_first(app: Any, tenant: str, handed: list[Any],
                               speakers: tuple[str, ...], fake_llm: FakeOpenAIServer) -> None:
    """Every turn applied; each second turn shown its speaker's diet and resolved to it."""
    for *_, ingestion_id in handed:
        assert app.load(tenant, ingestion_id, Ingestion).status == "applied"
    for n, speaker in enumerate(speakers):
        (resolved,) = app.load(tenant, handed[len(speakers) + n][2], Ingestion).candidates
        assert (resolved["subject"], resolved["label"]) == (speaker, "diet"), resolved
    asked = [request["messages"][-1]["content"] for request in fake_llm.chat_requests]
    later = [prompt for prompt in asked if "fully vegan" in prompt.split("<turn>")[-1]]
    assert len(later) == len(speakers) and all(
        '"label": "diet"' in prompt and "I'm vegetarian" in prompt for prompt in later)


def test_the_sessions_of_a_batch_go_in_rounds_of_one_save(app, worker, fake_llm, admin_db,  # type: ignore[no-untyped-def]
                                                         pg_settings) -> None:
    tenant = new_tenant()
    fake_llm.responder = diet
    handed = speak(app, tenant, SPEAKERS)
    position = app.recorder.max_notification_id()
    worker.handle_all(handed)
    assert transactions_since(admin_db, pg_settings.event_schema, position) == 2, \
        "one save a round, each round the next turn of the three sessions"
    resolved_against_the_first(app, tenant, handed, SPEAKERS, fake_llm)


def test_two_rounds_side_by_side_keep_each_session_in_order(app, projector, runtime_db, fake_llm,  # type: ignore[no-untyped-def]
                                                           admin_db, pg_settings) -> None:
    speakers = ("ada", "bo", "cy", "dee")
    worker = make_worker(app, projector, runtime_db, fake_llm, pg_settings, concurrency=8)
    try:
        assert (worker.lanes, worker.calls) == (2, 4)
        tenant = new_tenant()
        fake_llm.responder = diet
        handed = speak(app, tenant, speakers)
        position = app.recorder.max_notification_id()
        worker.handle_all(handed)
        assert transactions_since(admin_db, pg_settings.event_schema, position) <= 4, \
            "two rounds side by side, two sessions each, one save a round"
        resolved_against_the_first(app, tenant, handed, speakers, fake_llm)
    finally:
        worker.close()


def test_the_earlier_turns_of_several_sessions_in_one_query(app, projector, runtime_db,  # type: ignore[no-untyped-def]
                                                           pg_settings) -> None:
    tenant, start = new_tenant(), datetime(2026, 3, 2, 9, 0, tzinfo=BERLIN)
    for session, count in (("a", 6), ("b", 2), ("c", 0)):
        for n in range(count):
            app.ingest_turn(tenant, IngestTurn(session_id=session, turn_id=str(n), role="user",
                                               text=f"{session} says {n}", timezone="Europe/Berlin",
                                               said_at=start + timedelta(minutes=n)))
    app.ingest_turn(tenant, IngestTurn(session_id="a", turn_id="same-time", role="assistant",
                                       text="a hears 3", said_at=start + timedelta(minutes=3)))
    catch_up(projector, app)
    catalogue = ReadModelCatalogue(ReadModels(runtime_db, pg_settings.read_schema))
    try:
        asked = [("a", start + timedelta(minutes=5)), ("b", start + timedelta(days=1)),
                 ("c", start), ("a", start), ("a", start + timedelta(minutes=4))]
        for limit in (0, 2, 4):
            assert catalogue.previous_turns_of(tenant, asked, limit) == [
                catalogue.previous_turns(tenant, session, at, limit) for session, at in asked]
        (earlier,) = catalogue.previous_turns_of(tenant, asked[:1], 3)
        assert [t.text for t in earlier] == ["a says 3", "a hears 3", "a says 4"], "oldest first"
    finally:
        catalogue.close()
