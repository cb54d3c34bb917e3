"""Consolidation on the embedded PostgreSQL (DESIGN rule 10): cards written through the commands,
projected, embedded by the offline model; a scan records proposals and nothing else, proposes each
pair once, never an event card; accepting runs the ordinary command, rejecting stores only the
rejection; a tenant sees only its own proposals; a rebuild builds the same proposal rows."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest
from psycopg import sql
from psycopg.rows import dict_row

from domain.errors import CardNotFoundError, InvalidTransitionError
from domain.knowledge import KnowledgeCard
from domain.proposal import Proposal
from domain.slot import Slot
from infra.embedders import UniversalSentenceEmbedder, content_hash
from infra.postgres import Database
from infra.settings import Settings
from projections.consolidation_sql import tenants_with_cards
from projections.embeddings import EMBEDDED_TEXT
from projections.replay import catch_up, rebuild
from services.command.commands import Arbitrate, Remember
from services.command.consolidation import ConsolidationWorker, Consolidator
from services.query.queries import Queries
from services.query.readmodels import ReadModels
from tests.support import new_tenant, state, stored_count

pytestmark = pytest.mark.integration

REBUILT = "palimpsest_read_consolidation"


@pytest.fixture(scope="module")
def embedder() -> UniversalSentenceEmbedder:
    return UniversalSentenceEmbedder()


@pytest.fixture
def reads(runtime_db: Database, pg_settings: Settings) -> Iterator[ReadModels]:
    models = ReadModels(runtime_db, pg_settings.read_schema)
    yield models
    models.close()


@pytest.fixture
def consolidator(reads: ReadModels, app: Any, pg_settings: Settings) -> Consolidator:
    return Consolidator(reads, app, pg_settings)


def queries(reads: ReadModels, settings: Settings) -> Queries:
    """The query side's proposal listing (it needs no retriever)."""
    return Queries(reads, None, settings, lambda: None)  # type: ignore[arg-type]


def embed(admin_db: Database, schema: str, tenant: str, embedder: UniversalSentenceEmbedder) -> None:
    """What the embedding projection does, for this tenant's cards only (other tests' cards keep
    their own vectors): each card's embedded text, through the offline model."""
    s = sql.Identifier(schema)
    with admin_db.connect() as conn, conn.transaction():
        conn.execute("SELECT set_config('palimpsest.tenant', %s, true)", (tenant,))
        rows = conn.execute(sql.SQL("SELECT c.card_id, " + EMBEDDED_TEXT + " FROM {s}.cards c "
                                    "WHERE c.tenant_id = %s").format(s=s), (tenant,)).fetchall()
        vectors = embedder.embed([text for _, text in rows])
        for (card_id, text), vector in zip(rows, vectors, strict=True):
            conn.execute(sql.SQL(
                "INSERT INTO {s}.card_embeddings (tenant_id, card_id, model, content_hash, embedding) "
                "VALUES (%s, %s, %s, %s, %s::vector) ON CONFLICT (tenant_id, card_id) DO UPDATE SET "
                "model = excluded.model, content_hash = excluded.content_hash, "
                "embedding = excluded.embedding").format(s=s),
                (tenant, card_id, embedder.model, content_hash(text), str(list(vector))))


def knowledge(app: Any, title: str, body: str, tenant: str) -> UUID:
    card_id = app.remember(tenant, Remember(kind="knowledge", memory_type="note", title=title,
                                            content=body, tags=("auth",))).card_id
    assert card_id is not None
    return card_id


def event_card(app: Any, tenant: str, text: str) -> UUID:
    card_id = app.remember(tenant, Remember(kind="event", memory_type="event", content=text)).card_id
    assert card_id is not None
    return card_id


def new_events(app: Any, since: int) -> list[str]:
    """The names of the events stored after notification ``since``."""
    notifications = app.recorder.select_notifications(start=since + 1, limit=100_000)
    return [type(app.mapper.to_domain_event(n)).__qualname__ for n in notifications]


@pytest.fixture
def history(app: Any, projector: Any, admin_db: Database, pg_settings: Settings,
            embedder: UniversalSentenceEmbedder) -> dict[str, Any]:
    """Near-duplicate knowledge cards, twin event cards, an unrelated card, a slot settled
    both_valid and a second label for the same thing: written, projected, embedded."""
    tenant, clock = new_tenant(), app.test_clock
    ids: dict[str, Any] = {"tenant": tenant}
    ids["jwt"] = knowledge(app, "JSON Web Tokens", "A JWT carries signed claims; the server "
                           "checks the signature with its key.", tenant)
    clock.advance(days=1)
    ids["tokens"] = knowledge(app, "JSON web tokens", "A JWT carries signed claims, and the "
                              "server checks the signature with its key.", tenant)
    ids["refresh"] = knowledge(app, "Refresh tokens", "Refresh tokens are long-lived and kept "
                               "on the server.", tenant)
    ids["events"] = [event_card(app, tenant, "We discussed JSON web tokens with the team.")
                     for _ in range(2)]
    taipei = app.remember(tenant, state("address", "Taipei", valid_from=clock.now - timedelta(days=10)))
    osaka = app.remember(tenant, state("address", "Osaka", valid_from=clock.now - timedelta(days=60)))
    assert osaka.outcome == "queued"
    app.arbitrate(tenant, Arbitrate(case_id=osaka.case_id, decision="both_valid", decided_by="u"))
    clock.advance(days=1)
    kyoto = app.remember(tenant, state("home_city", "Kyoto"))
    ids.update(taipei=taipei.card_id, osaka=osaka.card_id, kyoto=kyoto.card_id,
               slot=taipei.aggregate_id)
    catch_up(projector, app)
    embed(admin_db, pg_settings.read_schema, tenant, embedder)
    return ids


def by_pair(rows: list[Any]) -> dict[frozenset[UUID], Any]:
    return {frozenset((r.src_id, r.dst_id)): r for r in rows}


def test_a_scan_proposes_and_changes_nothing_else_then_reviews_run_the_ordinary_commands(
        app: Any, projector: Any, reads: ReadModels, consolidator: Consolidator,
        pg_settings: Settings, history: dict[str, Any]) -> None:
    tenant, clock = history["tenant"], app.test_clock
    before = stored_count(app)
    created = consolidator.scan(tenant)
    assert len(created) == 3
    assert new_events(app, before) == ["Proposal.Proposed"] * 3, "only Proposed events were added"
    catch_up(projector, app)
    listed = queries(reads, pg_settings).proposals(tenant, review="pending")
    assert {r.proposal_id for r in listed} == set(created)
    pairs = by_pair(listed)
    merge = pairs[frozenset((history["jwt"], history["tokens"]))]
    assert (merge.kind, merge.edge, merge.src_id, merge.dst_id) == (
        "duplicate", "merge", history["tokens"], history["jwt"])
    assert merge.score >= 0.92 and "near-identical" in merge.rationale
    both = pairs[frozenset((history["osaka"], history["taipei"]))]
    assert (both.kind, both.edge, both.src_id) == ("contradiction", "supersedes", history["osaka"])
    assert "both_valid" in both.rationale
    labels = pairs[frozenset((history["taipei"], history["kyoto"]))]
    assert (labels.kind, labels.src_id, labels.dst_id) == (
        "contradiction", history["taipei"], history["kyoto"])
    assert "residence" in labels.rationale and 0 < labels.score <= 1
    touched = {card_id for pair in pairs for card_id in pair}
    assert not touched & {*history["events"], history["refresh"]}, "event cards are never proposed"

    count = stored_count(app)
    assert consolidator.scan(tenant) == [] and stored_count(app) == count, "each pair once"

    clock.advance(hours=1)
    accepted = consolidator.review(tenant, merge.proposal_id, "accept", "henry", "one concept")
    assert accepted.review == "accepted" and accepted.applied is not None
    assert accepted.applied.outcome == "merged"
    made = new_events(app, count)
    assert "KnowledgeCard.Merged" in made and made[-1] == "Proposal.Accepted"
    assert app.load(tenant, history["tokens"], KnowledgeCard).merged_into == history["jwt"]
    with pytest.raises(InvalidTransitionError, match="already accepted"):
        consolidator.review(tenant, merge.proposal_id, "reject", "ann")

    count = stored_count(app)
    rejected = consolidator.review(tenant, both.proposal_id, "reject", "henry", "both held")
    assert rejected.review == "rejected" and rejected.applied is None
    assert new_events(app, count) == ["Proposal.Rejected"], "a rejection stores only itself"

    superseded = consolidator.review(tenant, labels.proposal_id, "accept", "henry")
    assert superseded.applied is not None and superseded.applied.outcome == "superseded"
    slot = app.load(tenant, history["slot"], Slot)
    assert [c.value for c in slot.current_cards] == ["Kyoto"]

    catch_up(projector, app)
    reviewed = by_pair(queries(reads, pg_settings).proposals(tenant))
    row = reviewed[frozenset((history["jwt"], history["tokens"]))]
    assert (row.review, row.reviewed_by, row.note, row.reviewed_at) == (
        "accepted", "henry", "one concept", clock.now)
    assert reviewed[frozenset((history["osaka"], history["taipei"]))].review == "rejected"
    assert queries(reads, pg_settings).proposals(tenant, review="pending") == []
    assert [c.content for c in reads.current(tenant, subject="user") if c.label == "address"] == [
        "Kyoto"]
    embed_and_scan_again = consolidator.scan(tenant)
    assert embed_and_scan_again == [], "a rejected or settled pair is not proposed again"


def test_another_tenant_sees_and_reviews_none_of_them(
        app: Any, projector: Any, reads: ReadModels, consolidator: Consolidator,
        pg_settings: Settings, history: dict[str, Any]) -> None:
    created = consolidator.scan(history["tenant"])
    catch_up(projector, app)
    other = new_tenant()
    app.remember(other, state("address", "Lisbon"))
    catch_up(projector, app)
    assert queries(reads, pg_settings).proposals(other) == []
    assert consolidator.scan(other) == []
    with pytest.raises(CardNotFoundError):
        consolidator.review(other, created[0], "accept", "eve")
    assert app.load(history["tenant"], created[0], Proposal).pending


def test_accepting_a_both_valid_contradiction_rewrites_history_through_arbitration(
        app: Any, projector: Any, consolidator: Consolidator, history: dict[str, Any]) -> None:
    tenant = history["tenant"]
    created = consolidator.scan(tenant)
    (both,) = [p for p in (app.load(tenant, i, Proposal) for i in created)
               if p.src_id == history["osaka"]]
    result = consolidator.review(tenant, both.id, "accept", "henry", "never lived in Osaka")
    assert result.applied is not None and result.applied.outcome == "queued", \
        "Taipei over Osaka's stretch rewrites 60 days: a person decides, as for any write"
    assert app.load(tenant, history["slot"], Slot).pending


def test_knowledge_at_odds_or_restating_a_value_is_linked_when_accepted(
        app: Any, projector: Any, reads: ReadModels, consolidator: Consolidator,
        admin_db: Database, pg_settings: Settings, embedder: UniversalSentenceEmbedder) -> None:
    # a card restating a value with its title reaches 0.918 with the offline model: a setting
    settings = pg_settings.model_copy(update={"consolidation_similarity": 0.9})
    consolidator = Consolidator(reads, app, settings)
    tenant = new_tenant()
    use = knowledge(app, "Sessions", "Use server-side sessions for the admin console.", tenant)
    app.test_clock.advance(hours=1)  # the newer of the two is the one linked from
    dont = knowledge(app, "Sessions", "Do not use server-side sessions for the admin console.",
                     tenant)
    note = app.remember(tenant, Remember(kind="knowledge", memory_type="fact",
                                         content="user address: Taipei")).card_id
    value = app.remember(tenant, state("address", "Taipei"))
    catch_up(projector, app)
    embed(admin_db, pg_settings.read_schema, tenant, embedder)
    proposals = {p.edge: p for p in (app.load(tenant, i, Proposal) for i in consolidator.scan(tenant))}
    assert set(proposals) == {"contradicts", "related_to"}
    assert (proposals["contradicts"].src_id, proposals["contradicts"].dst_id) == (dont, use)
    assert (proposals["related_to"].src_id, proposals["related_to"].dst_id) == (note, value.card_id)
    for proposal in proposals.values():
        assert consolidator.review(tenant, proposal.id, "accept", "henry").applied is not None
    catch_up(projector, app)
    with reads.tenant(tenant) as conn:
        edges = conn.execute(sql.SQL("SELECT src_id, dst_id, edge FROM {}.card_relations").format(
            sql.Identifier(pg_settings.read_schema))).fetchall()
    assert {(e["src_id"], e["dst_id"], e["edge"]) for e in edges} == {
        (dont, use, "contradicts"), (note, value.aggregate_id, "related_to")}
    assert consolidator.scan(tenant) == []


def test_items_of_a_multi_value_slot_in_the_same_words_are_revised_alike(
        app: Any, projector: Any, reads: ReadModels, consolidator: Consolidator) -> None:
    tenant = new_tenant()
    first = app.remember(tenant, state("skills", "Python programming", item_key="py"))
    app.test_clock.advance(days=1)
    second = app.remember(tenant, state("skills", "python programming!", item_key="python"))
    catch_up(projector, app)
    (proposal_id,) = consolidator.scan(tenant)  # no embeddings: the same words alone
    result = consolidator.review(tenant, proposal_id, "accept", "henry")
    assert result.applied is not None and result.applied.outcome == "updated"
    slot = app.load(tenant, first.aggregate_id, Slot)
    assert slot.card(second.card_id).value == "Python programming"


def test_the_worker_scans_every_tenant_with_cards_and_logs_its_counts(
        app: Any, projector: Any, consolidator: Consolidator, admin_db: Database,
        pg_settings: Settings, history: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    from infra.postgres import projector_database

    monitor = projector_database(admin_db, pg_settings)
    assert history["tenant"] in tenants_with_cards(monitor, pg_settings.read_schema)
    empty = new_tenant()
    worker = ConsolidationWorker(consolidator, lambda: [history["tenant"], empty], 60)
    caplog.set_level(logging.INFO, logger="services.command.consolidation")
    counts = worker.scan_all()
    assert (counts["scanned"], counts["duplicate"], counts["contradiction"]) == (2, 1, 2)
    assert "scanned 2 tenants (0 unchanged, 0 failed)" in caplog.text
    assert "3 new proposals (1 duplicate, 2 contradiction)" in caplog.text
    assert worker.scan_all()["unchanged"] == 2, "nothing projected or embedded since: skipped"
    catch_up(projector, app)  # the proposals themselves: one more scan, which finds nothing new
    again = worker.scan_all()
    assert (again["scanned"], again["unchanged"], again["duplicate"] + again["contradiction"]) == (
        1, 1, 0)
    worker.start()
    worker.stop(timeout=10)
    assert worker._thread is not None and not worker._thread.is_alive()


def test_a_rebuild_builds_the_same_proposal_rows(
        app: Any, projector: Any, consolidator: Consolidator, admin_db: Database,
        pg_settings: Settings, history: dict[str, Any]) -> None:
    tenant = history["tenant"]
    first, second, *_ = consolidator.scan(tenant)
    app.test_clock.advance(minutes=5)
    consolidator.review(tenant, first, "reject", "henry", "no")
    consolidator.review(tenant, second, "accept", "ann")
    catch_up(projector, app)
    rebuild(pg_settings, app, into=REBUILT, workers=1)

    def rows(schema: str) -> list[dict[str, Any]]:
        with admin_db.connect(row_factory=dict_row) as conn:
            return conn.execute(sql.SQL("SELECT * FROM {}.proposals WHERE tenant_id = %s "
                                        "ORDER BY proposal_id").format(sql.Identifier(schema)),
                                (tenant,)).fetchall()

    try:
        live = rows(pg_settings.read_schema)
        assert sorted(r["review"] or "pending" for r in live) == ["accepted", "pending", "rejected"]
        assert rows(REBUILT) == live
    finally:
        with admin_db.connect(autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(REBUILT)))
