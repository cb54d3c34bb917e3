"""Slot resolution at ingest on the embedded PostgreSQL (DESIGN rule 12): a scripted model whose
labels drift, the worker reading the tenant's slots and the session's earlier turns from the read
models (projected between turns), the offline embedder for grounding and closeness."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import pytest

from domain.ingestion import Ingestion
from domain.proposal import Proposal
from infra.embedders import UniversalSentenceEmbedder
from infra.llm import OpenAIChatModel
from infra.settings import Settings
from projections.replay import catch_up
from services.command.commands import IngestTurn
from services.ingest.admission import Admission
from services.ingest.catalogue import KnownSlot, ReadModelCatalogue, Similarity
from services.ingest.extraction import Extractor, Shown
from services.ingest.resolution import Thresholds
from services.ingest.worker import IngestWorker
from services.query.readmodels import ReadModels
from tests.fakes.openai_server import FakeOpenAIServer, Reply, fake_llm_fixture  # noqa: F401
from tests.integration.test_ingest import candidate, slot_cards
from tests.support import new_tenant

pytestmark = pytest.mark.integration

BERLIN = ZoneInfo("Europe/Berlin")
SAID = datetime(2026, 3, 2, 9, 0, tzinfo=BERLIN)


class ProjectedCatalogue(ReadModelCatalogue):
    """The read models, brought up to the log before each read (``serve`` has its projector
    running; here the test's projector catches up, for one of the worker's rounds at a time)."""

    def __init__(self, read: ReadModels, projector: Any, app: Any) -> None:
        super().__init__(read)
        self.projector, self.app = projector, app
        self._lock = threading.Lock()

    def wait_for(self, tenant_id: str, position: int, timeout: float) -> None:
        with self._lock:
            catch_up(self.projector, self.app)


@pytest.fixture(scope="module")
def similarity() -> Similarity:
    return Similarity(UniversalSentenceEmbedder())


@pytest.fixture
def worker(app, projector, runtime_db, fake_llm: FakeOpenAIServer, pg_settings: Settings,  # type: ignore[no-untyped-def]
           similarity: Similarity):
    settings = pg_settings.model_copy(update={"llm_base_url": fake_llm.base_url, "llm_retries": 0})
    read = ReadModels(runtime_db, pg_settings.read_schema)
    admission = Admission(similarity, Thresholds(settings.ingest_label_reuse, settings.ingest_label_near),
                          settings.ingest_grounding_floor)
    made = IngestWorker(app, Extractor(OpenAIChatModel(model="scripted", base_url=fake_llm.base_url,
                                                       timeout=2), settings),
                        catalogue=ProjectedCatalogue(read, projector, app), admission=admission,
                        shown=Shown.from_settings(settings))
    yield made
    made.close()


def say(app: Any, worker: IngestWorker, tenant: str, turn: str, text: str, said_at: datetime,
        live: bool = True) -> Ingestion:
    """The turn, handed over as it is said (``live``), or months later (a backfill)."""
    if live:
        app.test_clock.now = said_at + timedelta(seconds=5)
    received = app.ingest_turn(tenant, IngestTurn(session_id="s1", turn_id=turn, role="user",
                                                  text=text, said_at=said_at, timezone="Europe/Berlin"))
    assert worker.handle(tenant, received.ingestion_id) == "applied"
    loaded: Ingestion = app.load(tenant, received.ingestion_id, Ingestion)
    return loaded


def current(app: Any, tenant: str, label: str) -> list[str]:
    """The slot's values valid now."""
    return [card.value for card in slot_cards(app, tenant, label) if card.current]


def answer(*cards: dict[str, Any]) -> Reply:
    return Reply.json({"candidates": list(cards)})


def test_a_drifting_label_lands_in_the_slot_the_attribute_already_has(app, worker, fake_llm) -> None:  # type: ignore[no-untyped-def]
    tenant = new_tenant()
    fake_llm.script(answer(candidate("vegetarian", label="diet")),
                    answer(candidate("vegan", label="eating habits", subject="I")))
    say(app, worker, tenant, "1", "I'm vegetarian these days", SAID)
    second = say(app, worker, tenant, "2", "ok I went fully vegan", SAID + timedelta(days=20))
    (resolved,) = second.candidates
    assert (resolved["subject"], resolved["label"]) == ("user", "diet")
    assert resolved["resolution"]["decision"] == "reused"
    assert resolved["resolution"]["proposed"] == {"subject": "I", "label": "eating habits"}
    assert current(app, tenant, "diet") == ["vegan"]  # vegetarian superseded
    shown = fake_llm.chat_requests[1]["messages"][-1]["content"]
    assert '"label": "diet"' in shown.split("</catalogue>")[0] and "vegetarian" in shown


def test_a_turn_that_completes_an_earlier_one_is_read_with_it(app, worker, fake_llm) -> None:  # type: ignore[no-untyped-def]
    tenant = new_tenant()
    fake_llm.script(answer(), answer(candidate("Dresden", label="city")))
    say(app, worker, tenant, "1", "we move to Dresden on Friday, boxes everywhere", SAID)
    second = say(app, worker, tenant, "2", "settled in now!", SAID + timedelta(days=6))
    (moved,) = second.candidates
    assert moved["value"] == "Dresden" and "quoted from the text shown" in moved["resolution"]["grounding"]
    previous, this_turn = fake_llm.chat_requests[1]["messages"][-1]["content"].split("</previous_turns>")
    assert "we move to Dresden" in previous and "settled in now" in this_turn
    assert current(app, tenant, "city") == ["Dresden"]


def test_a_value_the_conversation_never_mentioned_is_rejected_and_recorded(app, worker, fake_llm) -> None:  # type: ignore[no-untyped-def]
    tenant = new_tenant()
    fake_llm.script(answer(candidate("Kaohsiung", label="city"), candidate("pasta", label="dinner")))
    turn = say(app, worker, tenant, "1", "we cooked pasta tonight", SAID)
    assert [c["value"] for c in turn.candidates] == ["pasta"]
    (rejected,) = turn.rejected
    assert rejected["value"] == "Kaohsiung" and "no word of the value" in rejected["rejected"]
    assert len(turn.card_ids) == 1


def test_a_near_twin_opens_its_slot_and_a_proposal(app, worker, fake_llm) -> None:  # type: ignore[no-untyped-def]
    class Near(Similarity):
        def closeness(self, label: str, value: str, slots: Sequence[KnownSlot]) -> dict[str, float]:
            return {slot.label: 0.5 for slot in slots}

    worker.admission.similarity = Near(worker.admission.similarity.embedder)  # type: ignore[union-attr]
    tenant = new_tenant()
    fake_llm.script(answer(candidate("3 sessions a week", label="training plan")),
                    answer(candidate("5 sessions a week", label="workout schedule")))
    say(app, worker, tenant, "1", "my training plan is 3 sessions a week", SAID)
    second = say(app, worker, tenant, "2", "bumped my workout schedule to 5 sessions a week",
                 SAID + timedelta(days=3))
    assert second.candidates[0]["resolution"]["decision"] == "near_twin"
    assert current(app, tenant, "workout schedule") == ["5 sessions a week"]
    (older,) = slot_cards(app, tenant, "training plan")  # both stay valid until reviewed
    proposal = app.find(tenant, Proposal.create_id(tenant, "contradiction", older.card_id,
                                                   UUID(second.card_ids[0])), Proposal)
    assert proposal is not None and proposal.pending and proposal.edge == "supersedes"
    assert "beside user/training_plan" in proposal.rationale and proposal.score == 0.5


def test_a_backfilled_conversation_supersedes_as_it_was_said(app, worker, fake_llm) -> None:  # type: ignore[no-untyped-def]
    """Turns of last spring handed over in June: each change is judged as of its turn (rule 4),
    not queued as a rewrite of history months back."""
    tenant, said = new_tenant(), app.test_clock.now - timedelta(days=120)
    fake_llm.script(answer(candidate("Leipzig", label="city")),
                    answer(candidate("Dresden", label="residence")))
    say(app, worker, tenant, "1", "I live in Leipzig", said, live=False)
    moved = say(app, worker, tenant, "2", "moved to Dresden this week", said + timedelta(days=40),
                live=False)
    assert moved.candidates[0]["label"] == "city"
    assert current(app, tenant, "city") == ["Dresden"]


def test_an_assistants_turn_is_context_not_a_source_of_facts(app, worker, fake_llm) -> None:  # type: ignore[no-untyped-def]
    tenant = new_tenant()
    fake_llm.script(answer(candidate("Dresden", label="city")))
    suggested = app.ingest_turn(tenant, IngestTurn(session_id="s1", turn_id="1", role="assistant",
                                                   text="you could move to Munich", said_at=SAID,
                                                   timezone="Europe/Berlin"))
    app.test_clock.now = SAID + timedelta(minutes=1)
    assert worker.handle(tenant, suggested.ingestion_id) == "applied"
    assert fake_llm.chat_requests == [] and app.load(tenant, suggested.ingestion_id, Ingestion).card_ids == ()
    said = say(app, worker, tenant, "2", "nah, Dresden it is", SAID + timedelta(minutes=2))
    assert [c["value"] for c in said.candidates] == ["Dresden"]
    assert "you could move to Munich" in fake_llm.chat_requests[0]["messages"][-1]["content"]
