"""A person's erasure reaches every turn they spoke (issue 35), on the embedded PostgreSQL: Alice
and Bob talk in one session and Alice in a second, extracted by the scripted model (a fact and an
event of each turn, and of Alice's first a fact about Bob, in Bob's slot); a case of Alice's is
decided with a note. Projected and embedded, then Alice is erased as a subject: no row of any
table of the read schema or the event schema holds her text, search finds none of her turns,
Bob's turns and facts are still found, her decision's note no longer opens, and a rebuild after
the erasure holds none of her text either."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest
from psycopg import sql

from domain.arbitration import ArbitrationCase
from domain.erased import is_erased
from domain.ingestion import Ingestion
from infra.keyring import KEY_TABLE, ensure_key_table
from infra.llm import OpenAIChatModel
from infra.settings import Settings
from projections.replay import rebuild
from services.command.commands import Arbitrate, Erase, IngestTurn
from services.command.retention import RetentionWorker, SetRetention
from services.ingest.extraction import Extractor
from services.ingest.worker import IngestWorker
from services.query.queries import Queries
from services.query.readmodels import ReadModels
from services.query.retrieval.retriever import Retriever
from tests.fakes.openai_server import FakeOpenAIServer
from tests.integration.test_erasure_readmodels import Words, drop, dump, found_cards, found_in, project
from tests.support import all_events, new_tenant, state
from tests.unit.test_erasure_speakers import Person, candidates

pytestmark = pytest.mark.integration


@pytest.fixture
def words() -> Words:
    return Words()


@pytest.fixture
def reads(runtime_db: Any, pg_settings: Settings) -> Iterator[ReadModels]:
    made = ReadModels(runtime_db, pg_settings.read_schema)
    yield made
    made.close()


@pytest.fixture
def queries(runtime_db: Any, pg_settings: Settings, words: Words, app: Any) -> Iterator[Queries]:
    reads = ReadModels(runtime_db, pg_settings.read_schema)
    retriever = Retriever(reads, pg_settings.read_schema, pg_settings.retrieval, words)
    yield Queries(reads, retriever, pg_settings, app.test_clock)
    reads.close()


@pytest.fixture
def worker(app: Any, pg_settings: Settings) -> Iterator[IngestWorker]:
    with FakeOpenAIServer() as llm:
        llm.responder = candidates  # type: ignore[assignment]
        settings = pg_settings.model_copy(update={
            "llm_base_url": llm.base_url, "llm_model": "scripted", "llm_retries": 0,
            "llm_timeout_seconds": 5})
        made = IngestWorker(app, Extractor(OpenAIChatModel(model="scripted", base_url=llm.base_url,
                                                           timeout=5), settings))
        yield made
        made.close()


def say(app: Any, worker: IngestWorker, tenant: str, who: Person, session: str, turn: str,
        text: str) -> Ingestion:
    app.test_clock.advance(minutes=1)
    received = app.ingest_turn(tenant, IngestTurn(
        session_id=session, turn_id=turn, role="user", text=text, timezone="UTC",
        said_at=app.test_clock.now - timedelta(seconds=30), speaker=who.subject))
    assert worker.handle(tenant, received.ingestion_id) == "applied"
    return app.load(tenant, received.ingestion_id, Ingestion)


def decided_note(app: Any, tenant: str, who: Person) -> UUID:
    """A case of ``who``'s queued (a fourth change in days) and decided with a note: the case."""
    case_id = None
    for n in (1, 2, 3, 4):
        app.test_clock.advance(days=1)
        written = app.remember(tenant, state("clinic", who.canary(f"clinic{n}"), subject=who.subject))
        case_id = written.case_id or case_id
    assert case_id is not None, "a write was queued"
    app.arbitrate(tenant, Arbitrate(case_id=case_id, decision="both_valid", decided_by="reviewer",
                                    note=who.canary("note")))
    return case_id


def notes(app: Any, case_id: UUID) -> list[Any]:
    return [e.note for e in all_events(app)
            if isinstance(e, ArbitrationCase.Decided) and e.originator_id == case_id]


def test_a_speaker_erased_leaves_none_of_their_turns_and_the_other_stays_searchable(
        pg_settings, admin_db, app, projector, queries, words, worker) -> None:
    tenant, alice, bob = new_tenant(), Person("alice"), Person("bob")
    session = f"s-{uuid4().hex[:8]}"
    bobs_own = app.remember(tenant, state("hobby", bob.canary("own"), subject=bob.subject))
    hers = [say(app, worker, tenant, alice, session, "1",
                f"{alice.subject} talked about {bob.subject} {alice.canary('turn1')}"),
            say(app, worker, tenant, alice, f"{session}-b", "1",
                f"{alice.subject}: {alice.canary('turn3')}")]
    his = say(app, worker, tenant, bob, session, "2", f"{bob.subject}: {bob.canary('turn2')}")
    case_id = decided_note(app, tenant, alice)
    project(pg_settings, admin_db, app, projector, words)
    schemas = (pg_settings.read_schema, pg_settings.event_schema)
    said = [alice.canary(name) for name in ("turn1", "turn1dish", "turn1event", "turn1tag",
                                            "turn1hobby", "turn3", "turn3dish", "turn3event")]
    assert found_in(dump(admin_db, (pg_settings.read_schema,)), said) == said, "projected"
    assert hers[0].event_card_id in found_cards(queries, tenant, alice.canary("turn1"))
    assert notes(app, case_id) == [alice.canary("note")]

    app.erase(tenant, Erase(unit="subject", subject=alice.subject, basis="gdpr-17",
                            requested_by="dpo"))
    project(pg_settings, admin_db, app, projector, words)

    dumped = dump(admin_db, schemas)
    canaries = [alice.subject.lower(), *said, alice.canary("note"), alice.canary("clinic4")]
    assert found_in(dumped, canaries) == [], "none of her text in any table"
    kept = [bob.canary(name) for name in ("own", "turn2", "turn2dish", "turn2event")]
    assert found_in(dump(admin_db, (pg_settings.read_schema,)), kept) == kept, "his stay"
    for turn in hers:
        for name in ("turn1", "turn3", "turn1hobby", "turn3event"):
            found = found_cards(queries, tenant, alice.canary(name))
            assert not found & {turn.event_card_id, *map(UUID, turn.card_ids)}, name
    assert his.event_card_id in found_cards(queries, tenant, bob.canary("turn2"))
    assert bobs_own.card_id in found_cards(queries, tenant, bob.canary("own"))
    assert [is_erased(note) for note in notes(app, case_id)] == [True], "the note went too"
    rebuilt = f"palimpsest_read_speakers_{uuid4().hex[:6]}"
    try:  # a replay reads the destroyed keys as erased: the same tombstones
        rebuild(pg_settings, app, into=rebuilt, workers=2)
        assert found_in(dump(admin_db, (rebuilt,)), canaries) == []
        assert found_in(dump(admin_db, (rebuilt,)), kept) == kept
    finally:
        drop(admin_db, rebuilt)


def test_a_speakers_erasure_after_retention_forgets_the_cards_made_of_their_turns(
        pg_settings, admin_db, app, projector, reads, queries, words, worker) -> None:
    """Retention erases Rita's old turn as its event card and keeps the cards made of it (a fact
    about Sam among them); erasing Rita then forgets those cards everywhere, found by the speaker
    their keys name, while Sam's slot and his own cards stay searchable."""
    tenant, rita, sam = new_tenant(), Person("rita"), Person("sam")
    sams = app.remember(tenant, state("hobby", sam.canary("own"), subject=sam.subject))
    sams_city = app.remember(tenant, state("city", sam.canary("city"), subject=sam.subject))
    turn = say(app, worker, tenant, rita, f"s-{uuid4().hex[:8]}", "1",
               f"{rita.subject} talked about {sam.subject} {rita.canary('turn1')}")
    app.set_retention(tenant, SetRetention(turn_days=1, set_by="dpo"))
    app.test_clock.advance(days=2)
    project(pg_settings, admin_db, app, projector, words)
    assert RetentionWorker(app, reads, interval=3600).apply(tenant) == 1
    project(pg_settings, admin_db, app, projector, words)
    made = [rita.canary(name) for name in ("turn1dish", "turn1event", "turn1hobby")]
    assert found_in(dump(admin_db, (pg_settings.read_schema,)), made) == made, "retention kept them"
    assert UUID(turn.card_ids[-1]) in found_cards(queries, tenant, rita.canary("turn1hobby"))

    erased = app.erase(tenant, Erase(unit="subject", subject=rita.subject, basis="gdpr-17",
                                     requested_by="dpo"))
    project(pg_settings, admin_db, app, projector, words)

    assert set(map(UUID, turn.card_ids)) <= set(erased.card_ids)
    assert not {sams.card_id, sams_city.card_id} & set(erased.card_ids)
    canaries = [rita.canary("turn1"), *made]
    dumped = dump(admin_db, (pg_settings.read_schema, pg_settings.event_schema))
    assert found_in(dumped, canaries) == [], "none of her text in any table"
    for name in ("turn1dish", "turn1hobby", "turn1event"):
        assert not found_cards(queries, tenant, rita.canary(name)) & set(map(UUID, turn.card_ids))
    kept = [sam.subject.lower(), sam.canary("own"), sam.canary("city")]
    assert found_in(dump(admin_db, (pg_settings.read_schema,)), kept) == kept, "Sam's slots stay"
    assert sams.card_id in found_cards(queries, tenant, sam.canary("own"))
    assert sams_city.card_id in found_cards(queries, tenant, sam.canary("city"))


def test_a_key_table_made_before_speakers_gets_them_from_the_live_turns(
        pg_settings, admin_db, app, worker) -> None:
    """A store bootstrapped before card keys named their speaker: the bootstrap adds the column
    and fills it for the live card keys of live turns (run twice: idempotent)."""
    tenant, rita = new_tenant(), Person("rita")
    turn = say(app, worker, tenant, rita, f"s-{uuid4().hex[:8]}", "1",
               f"{rita.subject}: {rita.canary('turn1')}")
    table = sql.Identifier(pg_settings.event_schema, KEY_TABLE)
    speakers = sql.SQL("SELECT c.unit_id, c.said_by = t.subject_ref FROM {t} c JOIN {t} t ON "
                       "t.tenant_id = c.tenant_id AND t.kind = 'turn' AND t.unit_id = %s "
                       "WHERE c.tenant_id = %s AND c.kind = 'card'").format(t=table)
    written = {UUID(card_id) for card_id in turn.card_ids}
    with admin_db.connect() as conn, conn.transaction(force_rollback=True):
        assert dict(conn.execute(speakers, (turn.id, tenant)).fetchall()).items() >= {
            (card_id, True) for card_id in written}, "stored with their speaker"
        conn.execute(sql.SQL("ALTER TABLE {} DROP COLUMN said_by").format(table))
        for _ in (1, 2):
            ensure_key_table(conn, pg_settings.event_schema, pg_settings.runtime_role)
        said = dict(conn.execute(speakers, (turn.id, tenant)).fetchall())
    assert {card_id: said[card_id] for card_id in written} == dict.fromkeys(written, True)
