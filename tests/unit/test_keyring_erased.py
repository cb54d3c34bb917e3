"""A destroyed key is never re-made (``infra.keyring``, DESIGN §7): what every ring does with a
unit an erasure destroyed (``ErasedUnitBehaviour``) — run here on the memory ring, on PostgreSQL
by ``tests/integration/test_keyring_pg.py`` — and what a write under it meets: the command is
refused as erased, a group commit stores the others, the ingest worker says ``erased``."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any
from uuid import uuid4

import pytest
from eventsourcing.application import ProcessingEvent

from domain.errors import CardNotFoundError
from domain.ingestion import Ingestion
from infra.keyring import KeyRing, MemoryKeyRing, Unit, UnitErasedError, tenant_unit
from infra.settings import Settings
from services.command.commands import Erase, Revise
from services.command.commit import GroupCommit, _Entry
from services.command.memory import Palimpsest
from services.factory import create_app
from services.ingest.admission import Admitted
from services.ingest.applying import turn_of
from services.ingest.candidates import Candidate
from services.ingest.extraction import Extraction
from services.ingest.rounds import RoundTurn
from services.ingest.worker import IngestWorker
from tests.support import Clock, all_events, state
from tests.unit.test_ingest_apply import candidate, turn
from tests.unit.test_keyring import MASTER, new_tenant


class ErasedUnitBehaviour:
    """What every ring does once a unit's keys are destroyed. A subclass provides ``ring`` and
    ``reopen`` (another ring over the same rows: another process)."""

    def test_asking_for_an_erased_units_key_raises_and_makes_none(self, ring: KeyRing) -> None:
        tenant, card = new_tenant(), uuid4()
        key_id, _ = ring.data_key(tenant, Unit("card", card, session="s-1"))
        ring.destroy(tenant, [key_id], uuid4())
        with pytest.raises(UnitErasedError, match="erased") as refused:
            ring.data_key(tenant, Unit("card", card, session="s-1"))
        assert refused.value.unit == (tenant, "card", card)
        ring.flush()
        assert ring.find(tenant, cards=[card], sessions=["s-1"]) == []  # nothing made

    def test_a_new_key_of_an_erased_unit_is_refused_where_it_is_stored(
            self, ring: KeyRing, reopen: Callable[[bytes], KeyRing]) -> None:
        tenant, slot = new_tenant(), uuid4()
        key_id, _ = ring.data_key(tenant, Unit("slot", slot, subject="Mira"))
        ring.flush()
        other = reopen(MASTER)  # another process, reusing the derived id after the erasure
        ring.destroy(tenant, [key_id], uuid4())
        kept_id, kept_raw = other.data_key(tenant, Unit("card", uuid4()), new=True)
        with pytest.raises(UnitErasedError):
            other.data_key(tenant, Unit("slot", slot, subject="Mira"), new=True)
            other.flush()
        other.flush()  # the refused key is dropped; the others are stored
        assert ring.open_key(tenant, kept_id) == kept_raw
        with pytest.raises(UnitErasedError):  # known erased now: refused at once
            other.data_key(tenant, Unit("slot", slot), new=True)
        assert [f.key_id for f in ring.find(tenant, slots=[slot])] == []

    def test_a_unit_is_erased_whole_its_other_keys_too(
            self, ring: KeyRing, reopen: Callable[[bytes], KeyRing]) -> None:
        tenant, card = new_tenant(), uuid4()
        first, _ = ring.data_key(tenant, Unit("card", card))
        ring.flush()
        other = reopen(MASTER)
        second, _ = other.data_key(tenant, Unit("card", card), new=True)  # two makers at once
        other.flush()
        assert ring.destroy(tenant, [first], uuid4()) == 2
        assert ring.open_key(tenant, second) is None and other.open_key(tenant, first) is None

    def test_keys_stored_between_an_erasures_find_and_its_destruction_go_with_it(
            self, ring: KeyRing, reopen: Callable[[bytes], KeyRing]) -> None:
        tenant, slot, card = new_tenant(), uuid4(), uuid4()
        ring.data_key(tenant, Unit("slot", slot, subject="Wren"))
        ring.data_key(tenant, Unit("card", card, slot_id=slot))
        found = ring.find(tenant, slots=[slot])
        writer = reopen(MASTER)  # a write under way in another process
        late_card, _ = writer.data_key(tenant, Unit("card", uuid4(), slot_id=slot), new=True)
        quoting, _ = writer.data_key(tenant, Unit("proposal", uuid4(), cards=(card,)), new=True)
        writer.flush()  # stored after the erasure found the slot's keys, before it destroyed them
        assert ring.destroy(tenant, [f.key_id for f in found], uuid4()) == len(found) + 2
        fresh = reopen(MASTER)  # the writer's cache still holds the keys it made
        assert fresh.open_key(tenant, late_card) is None and fresh.open_key(tenant, quoting) is None

    def test_the_tenants_own_key_is_made_again(self, ring: KeyRing) -> None:
        tenant = new_tenant()
        unit = Unit("tenant", tenant_unit(tenant))
        key_id, raw = ring.data_key(tenant, unit)
        ring.destroy(tenant, [key_id], uuid4())
        again, again_raw = ring.data_key(tenant, unit)
        assert again != key_id and again_raw != raw

    def test_the_stored_keys_a_seal_used_are_checked_live(self, ring: KeyRing) -> None:
        tenant, card, slot = new_tenant(), uuid4(), uuid4()
        slot_key, _ = ring.data_key(tenant, Unit("slot", slot))
        ring.flush()
        with ring.sealing() as used:
            ring.data_key(tenant, Unit("slot", slot))
            ring.data_key(tenant, Unit("tenant", tenant_unit(tenant)))
            ring.data_key(tenant, Unit("card", card, slot_id=slot), new=True)
        assert slot_key in used
        ring.flush()
        ring.check_live(used)  # all live
        ring.destroy(tenant, [slot_key], uuid4())
        with pytest.raises(UnitErasedError) as refused:
            ring.check_live(used)
        # the slot's key, or the card's (a memory ring stores it at once), destroyed with its slot
        assert refused.value.unit in {(tenant, "slot", slot), (tenant, "card", card)}
        outside, _ = ring.data_key(tenant, Unit("card", uuid4()))
        assert outside not in used  # collected only inside


class TestMemoryErasedUnits(ErasedUnitBehaviour):
    @pytest.fixture
    def ring(self) -> MemoryKeyRing:
        return MemoryKeyRing(MASTER)

    @pytest.fixture
    def reopen(self, ring: MemoryKeyRing) -> Callable[[bytes], KeyRing]:
        return ring.reopened


@pytest.fixture
def app() -> Palimpsest:
    return create_app(Settings(persistence="memory"), clock=Clock())


def test_a_group_commit_refused_under_an_erased_unit_stores_the_other_decisions_alone() -> None:
    kept, erased = object(), object()
    good: ProcessingEvent[Any] = ProcessingEvent()
    bad: ProcessingEvent[Any] = ProcessingEvent()
    good.events.append(kept)  # type: ignore[arg-type]
    bad.events.append(erased)  # type: ignore[arg-type]
    batches: list[int] = []

    def record(decision: ProcessingEvent[Any]) -> list[Any]:
        batches.append(len(decision.events))
        if erased in decision.events:
            raise UnitErasedError("t", "slot", uuid4())
        return [SimpleNamespace(domain_event=event) for event in decision.events]

    entries = [_Entry(good), _Entry(bad)]
    GroupCommit(record)._save_all(entries)
    assert batches == [2, 1, 1]
    assert entries[0].recordings is not None and entries[0].recordings[0].domain_event is kept
    assert isinstance(entries[1].error, UnitErasedError)


def test_a_revision_of_an_erased_slot_is_refused_and_stores_nothing(app: Any) -> None:
    tenant = new_tenant()
    first = app.remember(tenant, state("blood type", "AB", subject="Mira"))
    app.erase(tenant, Erase(unit="slot", slot_id=first.aggregate_id))
    stored = app.recorder.max_notification_id()
    with pytest.raises(CardNotFoundError, match="erased"):
        app.revise(tenant, first.aggregate_id, Revise(card_id=first.card_id, content="0"))
    assert app.recorder.max_notification_id() == stored
    with pytest.raises(UnitErasedError):  # under the ring the command refuses it first
        app.keyring.data_key(tenant, Unit("card", uuid4(), slot_id=first.aggregate_id), new=True)


def test_an_extraction_saved_after_its_turn_was_erased_writes_nothing_and_says_erased(
        app: Palimpsest) -> None:
    tenant = new_tenant()
    ingestion_id = app.ingest_turn(tenant, turn(session="s-gone")).ingestion_id
    worker = IngestWorker(app, extractor=None, sleep=lambda pause: False)  # type: ignore[arg-type]
    ingestion = app.load(tenant, ingestion_id, Ingestion)  # as the worker loaded it, text and all
    item = RoundTurn(tenant, ingestion_id, ingestion, turn_of(ingestion))
    item.extraction = Extraction([Candidate.from_stored(candidate("Taipei"))], "m", 1, "json_schema")
    item.admitted = Admitted(candidates=list(item.extraction.candidates))
    app.erase(tenant, Erase(unit="session", session_id="s-gone"))  # while the model answered
    stored = len(all_events(app))
    worker._save_together([item])
    assert item.retried and not item.status
    worker._settle(item)
    assert item.status == "erased" and worker.erased == 1 and worker.applied == 0
    assert len(all_events(app)) == stored  # no Extracted, no card, no Applied
    assert worker.handle(tenant, ingestion_id) == "erased"  # delivered again: the model is not asked


def test_a_dead_lettered_turn_erased_is_not_handed_to_the_worker_again(app: Palimpsest) -> None:
    tenant = new_tenant()
    ingestion_id = app.ingest_turn(tenant, turn(session="s-gone")).ingestion_id
    app.record_dead_letter(tenant, ingestion_id, "the model failed", 3)
    app.erase(tenant, Erase(unit="session", session_id="s-gone"))
    stored = len(all_events(app))
    with pytest.raises(UnitErasedError, match="erased"):
        app.ingest_rerun(tenant, ingestion_id, "key k1")
    assert len(all_events(app)) == stored
