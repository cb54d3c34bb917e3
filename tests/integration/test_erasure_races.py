"""A destroyed key is never re-made (DESIGN §7, decision 0012), on the embedded PostgreSQL, with
two command applications on one store as two processes are: an extraction in flight when its turn
is erased writes nothing and its ingestion says ``erased``, whether the erasure lands while the
model answers or between the save's sealing and its insert; and a write decided and sealed in one
process before another erased its unit, stored after, is refused whole and stores nothing: the
key table refuses it in its own transaction, and the command, decided again on what the store
holds now, is refused as erased (a revision) or opens the slot anew (a new value). A parked event
retried after its slot was erased projects tombstones."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import pytest
from psycopg import sql

from domain.erased import is_erased
from domain.errors import CardNotFoundError
from domain.ingestion import Ingestion
from infra.llm import OpenAIChatModel
from infra.settings import Settings
from projections.failures import retry
from projections.replay import catch_up
from services.command.commands import Erase, IngestTurn, Revise
from services.command.memory import Palimpsest
from services.ingest.extraction import Extractor
from services.ingest.worker import IngestWorker
from tests.fakes.openai_server import FakeOpenAIServer, Reply, fake_llm_fixture  # noqa: F401
from tests.integration.test_erasure_processes import decoded
from tests.poison import failures, handler_bug, write_world
from tests.support import all_events, new_tenant, state

pytestmark = pytest.mark.integration

CANARY = "quaycanary57"


def topics(app: Palimpsest, tenant: str) -> list[str]:
    return [type(event).__qualname__ for event in all_events(app)
            if getattr(event, "tenant_id", None) == tenant]


def worker_of(app: Palimpsest, fake_llm: FakeOpenAIServer, settings: Settings) -> IngestWorker:
    settings = settings.model_copy(update={
        "llm_base_url": fake_llm.base_url, "llm_model": "scripted", "llm_retries": 1,
        "llm_backoff_seconds": 0.01, "llm_backoff_max_seconds": 0.02, "llm_timeout_seconds": 30})
    model = OpenAIChatModel(model="scripted", base_url=fake_llm.base_url, timeout=30)
    return IngestWorker(app, Extractor(model, settings))


def candidates() -> Reply:
    """What the scripted model makes of the turn: a fact and a note, both quoting it."""
    fact: dict[str, Any] = {
        "kind": "state", "memory_type": "fact", "subject": "user", "label": "home port",
        "value": f"{CANARY} harbour", "cardinality_hint": None, "tags": [],
        "occurred_at_hint": None, "confidence": 0.9, "title": None, "related_concepts": []}
    note = {**fact, "kind": "knowledge", "memory_type": "note", "label": None,
            "title": f"{CANARY} harbour", "tags": ["harbours"]}
    return Reply.json({"candidates": [fact, note]})


@pytest.mark.parametrize("lands", ["while the model answers", "after the save is sealed"])
def test_an_extraction_in_flight_when_its_turn_is_erased_writes_nothing(
        processes: Callable[[], Palimpsest], fake_llm: FakeOpenAIServer, pg_settings: Settings,
        monkeypatch: pytest.MonkeyPatch, lands: str) -> None:
    eraser, working = processes(), processes()
    tenant = new_tenant()
    turn = eraser.ingest_turn(tenant, IngestTurn(
        session_id="s-harbour", turn_id="1", role="user", text=f"I keep my boat at {CANARY} harbour",
        said_at=datetime(2026, 5, 31, 9, tzinfo=UTC), timezone="UTC"))
    asked, erased = threading.Event(), threading.Event()

    def erase() -> None:
        eraser.erase(tenant, Erase(unit="session", session_id="s-harbour"))
        erased.set()

    def answer(text: str) -> Reply:
        asked.set()
        assert erased.wait(30), "the erasure landed"
        return candidates()

    if lands == "while the model answers":
        fake_llm.responder = answer
    else:  # the worker's save has sealed its events under live keys; the erasure, then the insert
        fake_llm.responder = lambda text: candidates()
        ring: Any = working.keyring
        take_made = ring.take_made

        def erase_then_take(*tenant: str) -> Any:
            if not erased.is_set():
                erase()
            return take_made(*tenant)

        monkeypatch.setattr(ring, "take_made", erase_then_take)
    worker = worker_of(working, fake_llm, pg_settings)
    statuses: list[str] = []
    handling = threading.Thread(target=lambda: statuses.append(worker.handle(tenant, turn.ingestion_id)))
    handling.start()
    if lands == "while the model answers":
        assert asked.wait(30), "the model was asked"
        erase()
    handling.join(60)

    assert statuses == ["erased"] and worker.erased == 1 and worker.applied == 0
    fresh = processes()
    ingestion = fresh.load(tenant, turn.ingestion_id, Ingestion)
    assert ingestion.status == "received" and ingestion.card_ids == () and is_erased(ingestion.text)
    assert not {"Extracted", "Applied", "DeadLettered"} & {t.split(".")[-1] for t in topics(fresh, tenant)}
    assert not any(t.startswith(("Slot.", "KnowledgeCard.")) for t in topics(fresh, tenant))
    assert CANARY not in decoded(fresh, tenant)
    assert worker.handle(tenant, turn.ingestion_id) == "erased"  # delivered again: still nothing


def test_a_write_sealed_before_an_erasure_elsewhere_and_stored_after_it_is_refused(
        processes: Callable[[], Palimpsest], monkeypatch: pytest.MonkeyPatch) -> None:
    eraser, other = processes(), processes()
    tenant = new_tenant()
    first = eraser.remember(tenant, state("home port", f"{CANARY} quay", subject="Wren"))
    assert first.card_id is not None and first.aggregate_id is not None
    slot_id: UUID = first.aggregate_id
    ring: Any = other.keyring
    take_made = ring.take_made

    def erase_then_take(*tenant_of_save: str) -> Any:  # the revision is sealed: now the erasure
        monkeypatch.setattr(ring, "take_made", take_made)
        eraser.erase(tenant, Erase(unit="slot", slot_id=slot_id))
        return take_made(*tenant_of_save)

    monkeypatch.setattr(ring, "take_made", erase_then_take)
    before = len(all_events(eraser))
    with pytest.raises(CardNotFoundError, match="erased"):  # refused, decided again: erased
        other.revise(tenant, slot_id, Revise(card_id=first.card_id, content=f"{CANARY} pier"))
    fresh = processes()
    assert [type(e).__qualname__ for e in all_events(fresh)[before:]] == ["Erasure.Erased"]
    assert CANARY not in decoded(fresh, tenant)
    # a write decided after it, in the process that was refused, opens the slot anew
    again = other.remember(tenant, state("home port", "harbour nine", subject="Wren"))
    assert again.aggregate_id != slot_id
    assert "harbour nine" in decoded(processes(), tenant)


def test_a_parked_event_retried_after_its_slot_was_erased_projects_tombstones(
        app: Palimpsest, projector: Any, admin_db: Any, pg_settings: Settings,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A retry of a parked event writes nothing under the erased unit: it decodes the event as
    the log holds it now, the erased text as erased."""
    handler_bug(monkeypatch)
    world = write_world(app)
    catch_up(projector, app)
    acme = next(f for f in failures(admin_db, pg_settings.read_schema, world.a)
                if f["reason"] == "projection")
    app.erase(world.a, Erase(unit="slot", slot_id=world.employer))
    catch_up(projector, app)
    monkeypatch.undo()  # the fix
    (retried,) = retry(projector, app, acme["notification_id"])
    assert retried.parked is False
    with admin_db.connect() as conn:
        employer = conn.execute(sql.SQL(
            "SELECT content, erased_at IS NOT NULL FROM {}.cards WHERE tenant_id = %s "
            "AND aggregate_id = %s").format(sql.Identifier(pg_settings.read_schema)),
            (world.a, world.employer)).fetchall()
    assert employer and all(content is None and erased for content, erased in employer), employer
