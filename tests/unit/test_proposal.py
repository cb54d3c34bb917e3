"""Consolidation proposals, in memory: the aggregate's rules, the commands that record them, a
review carried out through the ordinary commands, and the pure decisions of a scan."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import numpy as np
import pytest

from domain.errors import (
    CardNotFoundError,
    EmptyContentError,
    InvalidCommandError,
    InvalidKindError,
    InvalidTransitionError,
)
from domain.knowledge import KnowledgeCard
from domain.proposal import Proposal, ReviewDecision
from infra.settings import Settings
from projections.cards import project
from projections.ops import ChangeRecord, PutRecord
from services.command.commands import Remember, ReviewProposal
from services.command.consolidation import Consolidator, Propose
from services.command.consolidation_rules import find_candidates, near_pairs, negated, same_words
from services.factory import create_app
from tests.support import Clock, new_tenant, stored_count

NOW = datetime(2026, 6, 1, 9, tzinfo=UTC)
A, B = UUID(int=1), UUID(int=2)


def proposal(**extra: Any) -> Proposal:
    fields: dict[str, Any] = {"tenant_id": "t1", "kind": "duplicate", "src_id": A, "dst_id": B,
                              "edge": "merge", "rationale": "alike", "score": 0.97,
                              "timestamp": NOW}
    return Proposal.propose(**{**fields, **extra})


class TestTheAggregate:
    def test_one_pair_one_id_in_either_order_per_kind_and_tenant(self) -> None:
        assert Proposal.create_id("t1", "duplicate", A, B) == Proposal.create_id("t1", "duplicate", B, A)
        assert proposal().id == Proposal.create_id("t1", "duplicate", B, A)
        assert Proposal.create_id("t1", "contradiction", A, B) != proposal().id
        assert Proposal.create_id("t2", "duplicate", A, B) != proposal().id

    def test_proposed_holds_what_the_scan_found_and_is_pending(self) -> None:
        made = proposal()
        (event,) = made.collect_events()
        assert type(event).__name__ == "Proposed"
        assert (event.kind, event.src_id, event.dst_id, event.edge, event.score) == (
            "duplicate", A, B, "merge", 0.97)
        assert made.pending and made.review is None and made.proposed_at == NOW

    @pytest.mark.parametrize(("extra", "error"), [
        ({"kind": "similar"}, InvalidKindError),
        ({"edge": "contradicts"}, InvalidKindError),  # a duplicate does not contradict
        ({"kind": "contradiction", "edge": "merge"}, InvalidKindError),
        ({"dst_id": A}, InvalidCommandError),
        ({"score": 1.5}, InvalidCommandError),
        ({"score": -0.1}, InvalidCommandError),
        ({"rationale": "  "}, EmptyContentError),
    ])
    def test_a_malformed_proposal_is_refused(self, extra: dict[str, Any], error: type) -> None:
        with pytest.raises(error):
            proposal(**extra)

    @pytest.mark.parametrize(("first", "second"), [
        (ReviewDecision.ACCEPT, ReviewDecision.REJECT), (ReviewDecision.REJECT, ReviewDecision.ACCEPT),
        (ReviewDecision.ACCEPT, ReviewDecision.ACCEPT)])
    def test_a_proposal_is_reviewed_once(self, first: ReviewDecision, second: ReviewDecision) -> None:
        made = proposal()
        made.decide(first, "henry", "checked", NOW + timedelta(hours=1))
        assert not made.pending and made.reviewed_by == "henry"
        assert made.review == {"accept": "accepted", "reject": "rejected"}[first.value]
        with pytest.raises(InvalidTransitionError, match="reviewed once"):
            made.decide(second, "ann", "", NOW + timedelta(hours=2))
        assert [type(e).__name__ for e in made.collect_events()] == [
            "Proposed", "Accepted" if first is ReviewDecision.ACCEPT else "Rejected"]

    def test_a_review_names_its_reviewer(self) -> None:
        with pytest.raises(InvalidCommandError):
            proposal().decide(ReviewDecision.REJECT, " ", "", NOW)

    def test_the_projection_puts_a_row_and_records_its_review(self) -> None:
        made = proposal()
        made.decide(ReviewDecision.REJECT, "henry", "not the same", NOW + timedelta(hours=1))
        proposed, rejected = made.collect_events()
        (put,) = project(proposed)
        assert isinstance(put, PutRecord) and put.table == "proposals"
        assert put.row["review"] is None and put.row["proposed_at"] == NOW
        (change,) = project(rejected)
        assert isinstance(change, ChangeRecord) and change.record_id == made.id
        assert change.changes == {"review": "rejected", "reviewed_at": NOW + timedelta(hours=1),
                                  "reviewed_by": "henry", "note": "not the same"}


@pytest.fixture
def app():  # type: ignore[no-untyped-def]
    made = create_app(Settings(persistence="memory"), clock=Clock())
    yield made
    made.close()


def knowledge(app: Any, tenant: str, title: str) -> UUID:
    card_id = app.remember(tenant, Remember(kind="knowledge", memory_type="note", title=title,
                                            content=f"{title}: what it is.")).card_id
    assert card_id is not None
    return card_id


def propose(app: Any, tenant: str, src: UUID, dst: UUID, edge: str = "merge") -> Any:
    return app.propose(tenant, Propose(kind="duplicate", src_id=src, dst_id=dst, edge=edge,
                                       rationale="near-identical", score=0.95))


class TestTheCommands:
    def test_a_pair_is_proposed_once_in_either_order(self, app) -> None:  # type: ignore[no-untyped-def]
        tenant = new_tenant()
        jwt, tokens = knowledge(app, tenant, "JWT"), knowledge(app, tenant, "JSON web tokens")
        first = propose(app, tenant, tokens, jwt)
        count = stored_count(app)
        again, reverse = propose(app, tenant, tokens, jwt), propose(app, tenant, jwt, tokens)
        assert first.outcome == "proposed" and first.position == count
        assert again.outcome == reverse.outcome == "already_proposed"
        assert again.aggregate_id == reverse.aggregate_id == first.aggregate_id
        assert stored_count(app) == count, "nothing stored for a pair proposed before"

    def test_an_event_card_is_never_proposed_and_a_merge_pairs_knowledge(self, app) -> None:  # type: ignore[no-untyped-def]
        tenant = new_tenant()
        note = knowledge(app, tenant, "JWT")
        event = app.remember(tenant, Remember(kind="event", memory_type="event",
                                              content="We talked about JWT")).card_id
        count = stored_count(app)
        with pytest.raises(InvalidKindError, match="event cards are never proposed"):
            propose(app, tenant, event, note, edge="related_to")
        with pytest.raises(CardNotFoundError):
            propose(app, tenant, note, uuid4())
        assert stored_count(app) == count

    def test_another_tenant_cannot_review_a_proposal(self, app) -> None:  # type: ignore[no-untyped-def]
        tenant = new_tenant()
        made = propose(app, tenant, knowledge(app, tenant, "a"), knowledge(app, tenant, "b"))
        with pytest.raises(Exception, match="no proposal"):
            app.record_review(new_tenant(), ReviewProposal(
                proposal_id=made.aggregate_id, decision="reject", reviewed_by="eve"))

    def test_accepting_a_merge_runs_merge_then_records_it_and_a_second_review_is_refused(
            self, app) -> None:  # type: ignore[no-untyped-def]
        tenant = new_tenant()
        jwt, tokens = knowledge(app, tenant, "JWT"), knowledge(app, tenant, "JSON web tokens")
        made = propose(app, tenant, tokens, jwt)
        consolidator = Consolidator(None, app, Settings(persistence="memory"))  # type: ignore[arg-type]
        result = consolidator.review(tenant, made.aggregate_id, "accept", "henry", "same idea")
        assert result.review == "accepted" and result.applied is not None
        assert result.applied.outcome == "merged"
        assert app.load(tenant, tokens, KnowledgeCard).merged_into == jwt
        count = stored_count(app)
        with pytest.raises(InvalidTransitionError, match="already accepted by henry"):
            consolidator.review(tenant, made.aggregate_id, "reject", "ann")
        assert stored_count(app) == count

    def test_rejecting_stores_the_rejection_and_nothing_else(self, app) -> None:  # type: ignore[no-untyped-def]
        tenant = new_tenant()
        a, b = knowledge(app, tenant, "a"), knowledge(app, tenant, "b")
        made = propose(app, tenant, a, b, edge="related_to")
        count = stored_count(app)
        consolidator = Consolidator(None, app, Settings(persistence="memory"))  # type: ignore[arg-type]
        result = consolidator.review(tenant, made.aggregate_id, "reject", "henry", "unrelated")
        assert result.review == "rejected" and result.applied is None
        assert stored_count(app) == count + 1
        assert app.load(tenant, a, KnowledgeCard).links == {}

    def test_an_unknown_decision_is_refused_before_anything_runs(self, app) -> None:  # type: ignore[no-untyped-def]
        tenant = new_tenant()
        made = propose(app, tenant, knowledge(app, tenant, "a"), knowledge(app, tenant, "b"))
        count = stored_count(app)
        consolidator = Consolidator(None, app, Settings(persistence="memory"))  # type: ignore[arg-type]
        with pytest.raises(InvalidKindError):
            consolidator.review(tenant, made.aggregate_id, "maybe", "henry")
        assert stored_count(app) == count


# ---- the pure decisions of a scan ----------------------------------------------------------------


def card(kind: str = "knowledge", content: str = "", **extra: Any) -> dict[str, Any]:
    card_id = extra.pop("card_id", uuid4())
    return {"card_id": card_id, "aggregate_id": extra.pop("aggregate_id", card_id), "kind": kind,
            "memory_type": "note", "scope": "personal", "project_id": None, "group_id": None,
            "perspective": None, "subject": None, "label": None, "cardinality": None,
            "content": content, "title": None, "valid_from": NOW, "valid_to": None,
            "recorded_at": NOW, **extra}


def scan(similarity: float = 0.92, contradiction: float = 0.8, **rows: list[Any]) -> list[Any]:
    full = {"vectors": [], "items": [], "singles": [], "both_valid": [], "links": [], "proposed": [],
            **rows}
    full["cards"] = [*rows.get("cards", []), *full["vectors"], *full["items"], *full["singles"]]
    return find_candidates(full, similarity, contradiction)


def alike(a: dict[str, Any], b: dict[str, Any], similarity: float) -> list[dict[str, Any]]:
    """``a`` and ``b`` with embeddings at cosine ``similarity``."""
    return [{**a, "model": "m", "embedding": np.array([2.0, 0.0, 0.0])},
            {**b, "model": "m", "embedding": np.array([similarity, (1 - similarity ** 2) ** 0.5, 0])}]


class TestFinding:
    @pytest.mark.parametrize(("text", "expected"), [
        ("Use sessions for the console", False), ("Do not use sessions for the console", True),
        ("Don't use sessions", True), ("Never, not once", False), ("後台不要用 session", True),
        ("後台用 session", False)])
    def test_negation(self, text: str, expected: bool) -> None:
        assert negated(text) is expected

    def test_same_words_whatever_the_case_script_and_punctuation(self) -> None:
        assert same_words("Python, 臺北!", "python 台北") and not same_words("Python", "Python 3")

    def test_near_knowledge_merges_the_newer_into_the_older(self) -> None:
        old = card(content="JWT signs claims", title="JWT")
        new = card(content="JWT signs claims.", title="JWT", recorded_at=NOW + timedelta(days=1))
        (found,) = scan(vectors=alike(new, old, 0.97))
        assert (found.kind, found.edge, found.src_id, found.dst_id, found.score) == (
            "duplicate", "merge", new["card_id"], old["card_id"], 0.97)
        assert "near-identical (cosine 0.97)" in found.rationale

    def test_alike_knowledge_but_one_negated_contradicts_and_is_no_duplicate(self) -> None:
        use = card(content="Use server-side sessions for the console")
        dont = card(content="Do not use server-side sessions for the console",
                    recorded_at=NOW + timedelta(days=1))
        (found,) = scan(vectors=alike(use, dont, 0.95))
        assert (found.kind, found.edge, found.src_id) == ("contradiction", "contradicts", dont["card_id"])
        assert scan(vectors=alike(use, dont, 0.7)) == []

    def test_knowledge_near_a_slot_value_links_related_to(self) -> None:
        note = card(content="Henry lives in Taipei")
        value = card("state", "Taipei", subject="henry", label="address", cardinality="single_value",
                     aggregate_id=uuid4())
        (found,) = scan(vectors=alike(value, note, 0.93))
        assert (found.kind, found.edge, found.src_id, found.dst_id) == (
            "duplicate", "related_to", note["card_id"], value["card_id"])
        assert scan(vectors=alike(value, note, 0.9)) == []

    def test_items_of_a_multi_value_slot_in_the_same_words_update_the_newer(self) -> None:
        slot = uuid4()
        item = {"kind": "state", "subject": "user", "label": "skills", "cardinality": "multi_value",
                "aggregate_id": slot}
        python = card(content="Python", **item)
        again = card(content="python!", recorded_at=NOW + timedelta(days=2), **item)
        rust = card(content="Rust", **item)
        other = card(content="Python", **{**item, "aggregate_id": uuid4()})
        (found,) = scan(items=[python, again, rust, other])
        assert (found.edge, found.src_id, found.dst_id, found.score) == (
            "updates", again["card_id"], python["card_id"], 1.0)

    def test_two_slots_of_one_concept_with_different_values_contradict(self) -> None:
        single = {"kind": "state", "subject": "user", "cardinality": "single_value"}
        address = card(content="Taipei", label="address", aggregate_id=uuid4(), **single)
        city = card(content="Kyoto", label="home_city", aggregate_id=uuid4(),
                    recorded_at=NOW + timedelta(days=3), **single)
        same = card(content="Kyoto", label="location", aggregate_id=uuid4(),
                    recorded_at=NOW + timedelta(days=1), **single)
        editor = card(content="vim", label="editor", aggregate_id=uuid4(), **single)
        theirs = card(content="Osaka", label="address", aggregate_id=uuid4(),
                      **{**single, "subject": "ann"})
        found = scan(singles=[address, city, same, editor, theirs])
        pairs = {(f.src_id, f.dst_id) for f in found}
        assert pairs == {(address["card_id"], city["card_id"]), (address["card_id"], same["card_id"])}
        assert {(f.kind, f.edge) for f in found} == {("contradiction", "supersedes")}
        assert "residence" in found[0].rationale

    def test_a_slot_settled_both_valid_proposes_the_later_value_over_the_earlier(self) -> None:
        slot, single = uuid4(), {"kind": "state", "subject": "user", "label": "address",
                                 "cardinality": "single_value"}
        osaka = card(content="Osaka", aggregate_id=slot, valid_from=NOW - timedelta(days=60),
                     valid_to=NOW - timedelta(days=10), **single)
        taipei = card(content="Taipei", aggregate_id=slot, valid_from=NOW - timedelta(days=10),
                      **single)
        (found,) = scan(both_valid=[{"a_id": osaka["card_id"], "b_id": taipei["card_id"]}],
                        cards=[osaka, taipei])
        assert (found.kind, found.edge, found.src_id, found.dst_id) == (
            "contradiction", "supersedes", osaka["card_id"], taipei["card_id"])
        assert "settled both_valid" in found.rationale and found.score == 0.5

    def test_only_cards_of_one_model_and_scope_that_may_pair_are_compared(self) -> None:
        same = np.array([1.0, 0.0])
        slot = uuid4()
        item = {"kind": "state", "subject": "user", "label": "skills", "cardinality": "multi_value"}
        cards = [card(content="a"), card(content="b", scope="project", project_id="p"),
                 card(content="c", model="other"),
                 card(content="Python", aggregate_id=slot, **item),
                 card(content="Python coding", aggregate_id=slot, **item),
                 card(content="Rust", aggregate_id=uuid4(), **item)]
        vectors = [{"model": "m", **c, "embedding": same} for c in cards]
        found = {frozenset(c["content"] for c in cards if c["card_id"] in (p["a_id"], p["b_id"]))
                 for p in near_pairs(vectors, 0.92)}
        assert found == {frozenset(pair) for pair in (
            ("a", "Python"), ("a", "Python coding"), ("a", "Rust"), ("Python", "Python coding"))}

    def test_pairs_already_linked_or_proposed_are_left_alone(self) -> None:
        a, b, c = card(content="a"), card(content="b"), card(content="c")
        slot = uuid4()
        value = card("state", "x", subject="s", label="l", cardinality="single_value",
                     aggregate_id=slot)
        vectors = [{**x, "model": "m", "embedding": np.array([1.0, 0.0])} for x in (a, b, c, value)]
        found = scan(vectors=vectors,
                     links=[{"src_id": b["card_id"], "dst_id": a["card_id"]},
                            {"src_id": a["card_id"], "dst_id": slot},  # linked to its slot
                            {"src_id": b["card_id"], "dst_id": value["card_id"]},
                            {"src_id": c["card_id"], "dst_id": slot}],
                     proposed=[{"src_id": c["card_id"], "dst_id": b["card_id"]}])
        assert [f.pair for f in found] == [frozenset((a["card_id"], c["card_id"]))]
