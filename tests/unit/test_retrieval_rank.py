"""Ranking the loaded candidates: the order of its steps and the trace each one leaves."""

import math
from dataclasses import replace
from typing import Any
from uuid import UUID

import pytest

from services.query.retrieval.rank import overlay
from services.query.retrieval.scoring import Candidate, DecayPolicy, PendingWrite, Ranking, slot_key, type_key
from services.query.retrieval.tuning import Tuning
from tests.unit.retrieval_support import NOW, ago, by_id, card, event, flagged, ids, labelled, run

A, B, C, D, E, F = (UUID(int=n) for n in range(1, 7))
NEW, NEWER = UUID(int=100), UUID(int=101)


class TestFusion:
    def test_scores_are_rrf_when_nothing_decays_or_boosts(self) -> None:
        cards = by_id(labelled(A, scope="group", group_id="g"), labelled(B, scope="group", group_id="g"))
        outcome = run({"semantic": [A, B], "tags": [B]}, cards)
        assert outcome.chosen == [(B, pytest.approx(1 / 62 + 1 / 61)), (A, pytest.approx(1 / 61))]

    def test_rrf_k_comes_from_the_tuning(self) -> None:
        cards = by_id(labelled(A, scope="group", group_id="g"))
        outcome = run({"semantic": [A]}, cards, tuning=Tuning(rrf_k=1))
        assert outcome.chosen == [(A, pytest.approx(0.5))]

    def test_ids_a_route_found_but_the_loader_did_not_return_are_ignored(self) -> None:
        outcome = run({"semantic": [C, A]}, by_id(labelled(A)))
        assert ids(outcome) == [A]
        assert C not in outcome.trace

    def test_no_rankings_give_an_empty_outcome(self) -> None:
        outcome = run({}, by_id(labelled(A)))
        alerts = flagged({}, by_id(labelled(A)))
        assert (outcome.chosen, alerts.contradictions, alerts.aging_facts, alerts.stale_knowledge) == (
            [], [], [], [])


def fading(rate: float, days: float) -> float:
    return 0.5 + 0.5 * math.exp(-rate * days)


class TestDecay:
    def test_the_score_is_rrf_times_the_bounded_decay_factor(self) -> None:
        outcome = run({"semantic": [A]}, by_id(event(A, 10, scope="group", group_id="g")))
        assert outcome.chosen[0][1] == pytest.approx(1 / 61 * fading(0.01, 10))

    def test_the_valid_value_of_a_slot_is_not_decayed_for_its_age(self) -> None:
        """The measured cause: ×0.05 for a 150-day-old address sank it under fresh noise."""
        address = labelled(A, scope="group", group_id="g", valid_from=ago(150))
        outcome = run({"semantic": [A]}, by_id(address))
        assert outcome.chosen[0][1] == pytest.approx(1 / 61)
        assert outcome.trace[A]["decay"]["factor"] == 1.0
        assert outcome.trace[A]["decay"]["exempt"] == "the slot's valid value"

    def test_an_old_address_beats_a_fresher_weaker_event(self) -> None:
        cards = by_id(labelled(A, valid_from=ago(150)), event(B, 1))
        assert ids(run({"semantic": [A, B]}, cards)) == [A, B]

    def test_decay_never_buries_a_far_better_match(self) -> None:
        cards = by_id(event(A, 1000), event(B, 0))
        rankings = {"semantic": Ranking([A, B], [1.0, 0.4])}
        assert ids(run(rankings, cards)) == [A, B]  # 1.0 × 0.5 floor beats 0.4 fresh

    def test_recency_still_orders_events_of_equal_relevance(self) -> None:
        cards = by_id(event(A, 100), event(B, 1))
        assert ids(run({"semantic": Ranking([A, B], [1.0, 1.0])}, cards)) == [B, A]

    def test_decay_counts_from_the_reference_time_not_the_wall_clock(self) -> None:
        cards = by_id(event(A, 100), event(B, 0))
        outcome = run({"semantic": [A, B]}, cards, now=ago(100), as_of=True)
        assert ids(outcome) == [A, B]
        assert outcome.trace[A]["decay"]["days"] == 0
        assert outcome.trace[A]["decay"]["factor"] == 1

    def test_multi_value_cards_decay_by_their_own_rate(self) -> None:
        multi = labelled(B, cardinality="multi_value", valid_from=ago(50))
        cards = by_id(event(A, 50), multi)
        outcome = run({"semantic": [A, B]}, cards)
        assert ids(outcome) == [B, A]
        assert (outcome.trace[A]["decay"]["lambda"], outcome.trace[B]["decay"]["lambda"]) == (0.01, 0.005)

    def test_the_decay_policy_comes_from_the_tuning(self) -> None:
        cards = by_id(event(A, 10, scope="group", group_id="g"))
        outcome = run({"semantic": [A]}, cards, tuning=Tuning(decay=DecayPolicy(event=0.1, floor=0.0)))
        assert outcome.chosen[0][1] == pytest.approx(1 / 61 * math.exp(-1.0))

    def test_unbounded_decay_buries_the_old_address_as_it_used_to(self) -> None:
        cards = by_id(labelled(A, valid_from=ago(150)), event(B, 1))
        old = Tuning(decay=DecayPolicy(bounded=False))
        assert ids(run({"semantic": [A, B]}, cards, tuning=old)) == [B, A]


class TestStrengths:
    def test_a_route_s_strength_scales_its_contribution(self) -> None:
        cards = by_id(labelled(A, scope="group", group_id="g"), labelled(B, scope="group", group_id="g"))
        outcome = run({"tags": Ranking([A, B], [0.25, 1.0])}, cards)
        assert outcome.chosen == [(B, pytest.approx(1 / 62)), (A, pytest.approx(0.25 / 61))]

    def test_route_weights_come_from_the_tuning(self) -> None:
        cards = by_id(labelled(A, scope="group", group_id="g"), labelled(B, scope="group", group_id="g"))
        outcome = run({"graph": [A], "tags": [B]}, cards, tuning=Tuning(weights={"graph": 0.3}))
        assert outcome.chosen == [(B, pytest.approx(1 / 61)), (A, pytest.approx(0.3 / 61))]


class TestLeads:
    def test_the_named_slot_s_valid_card_leads_whatever_its_score(self) -> None:
        address = labelled(A, valid_from=ago(150))
        cards = by_id(address, event(B, 1), event(C, 2))
        outcome = run({"semantic": [B, C, A]}, cards, leads=[slot_key(address)])
        assert ids(outcome) == [A, B, C]
        assert outcome.led == {A}
        assert outcome.trace[A]["final"]["lead"] == "a slot the question names"

    def test_every_valid_item_of_a_named_multi_value_slot_leads_past_the_top_n(self) -> None:
        items = [card(UUID(int=10 + i), label="instruments", cardinality="multi_value", value=v)
                 for i, v in enumerate(("piano", "violin", "guitar"))]
        cards = by_id(*items, event(B, 1))
        slots = [c.card_id for c in items]  # the slot stage's ranking: what leads was found
        outcome = run({"semantic": [B], "slots": slots}, cards, top=2, leads=[slot_key(items[0])])
        assert set(ids(outcome)) == set(slots)

    def test_a_superseded_card_of_a_named_slot_does_not_lead(self) -> None:
        old = card(A, value="Kyoto", superseded=True, valid_to=NOW)
        cards = by_id(old, card(B), event(C, 1))
        assert ids(run({"semantic": [C, A, B]}, cards, leads=[slot_key(old)])) == [B, C]

    def test_a_named_memory_type_leads_with_its_cards(self) -> None:
        blocker = card(A, label=None, subject=None, cardinality="multi_value", memory_type="blocker")
        cards = by_id(blocker, event(B, 1))
        assert ids(run({"semantic": [B, A]}, cards, leads=[type_key("blocker")])) == [A, B]


class TestScopeBoost:
    def cards(self) -> dict[UUID, Candidate]:
        return by_id(labelled(A, scope="personal"), labelled(B, scope="project", project_id="fibon"))

    def test_the_current_project_outranks_a_better_ranked_personal_card(self) -> None:
        outcome = run({"semantic": [A, B]}, self.cards(), current_project="fibon")
        assert ids(outcome) == [B, A]
        assert outcome.chosen[0][1] == pytest.approx(1.2 / 62)

    def test_another_projects_card_stays_below_personal(self) -> None:
        assert ids(run({"semantic": [B, A]}, self.cards(), current_project="3ngram")) == [A, B]
        assert ids(run({"semantic": [B, A]}, self.cards(), current_project=None)) == [A, B]

    def test_personal_outranks_group_at_equal_rank(self) -> None:
        cards = by_id(labelled(A, scope="group", group_id="family"), labelled(B, scope="personal"))
        assert ids(run({"semantic": [A], "tags": [B]}, cards)) == [B, A]


class TestSuperseded:
    def cards(self) -> dict[UUID, Candidate]:
        return by_id(card(A, value="Kyoto", superseded=True, valid_to=NOW), card(B))

    def test_a_superseded_card_is_dropped_even_with_the_best_score(self) -> None:
        outcome = run({"semantic": [A, B], "tags": [A]}, self.cards())
        assert ids(outcome) == [B]
        assert outcome.trace[A]["superseded"] == "dropped"
        assert "final" not in outcome.trace[A]

    def test_as_of_keeps_it_in_first_place_and_says_why(self) -> None:
        outcome = run({"semantic": [A, B], "tags": [A]}, self.cards(), as_of=True)
        assert ids(outcome) == [A, B]
        assert outcome.trace[A]["superseded"] == "kept: the query is as-of"
        assert "superseded" not in outcome.trace[B]

    def test_a_superseded_card_does_not_take_a_top_n_place(self) -> None:
        cards = by_id(labelled(A, superseded=True), labelled(B), labelled(C))
        assert ids(run({"semantic": [A, B, C]}, cards, top=2)) == [B, C]


class TestOverlay:
    def test_a_pending_single_value_write_supersedes_its_slot_and_takes_the_best_score(self) -> None:
        cards = by_id(card(A, value="Kyoto"), card(B, value="Osaka"), labelled(C))
        new = card(NEW, value="Kaohsiung", valid_from=ago(-1))
        out_cards, scores, notes = overlay(cards, {A: 0.3, B: 0.5, C: 0.9}, [PendingWrite(7, new)])
        assert out_cards[A].superseded and out_cards[B].superseded
        assert out_cards[A].valid_to == out_cards[B].valid_to == new.valid_from
        assert out_cards[NEW] == new
        assert scores == {A: 0.3, B: 0.5, C: 0.9, NEW: 0.5}
        assert set(notes) == {A, B, NEW}
        assert str(NEW) in notes[A] and "7" in notes[NEW]
        assert out_cards[C] == cards[C]

    def test_the_inputs_are_not_changed(self) -> None:
        cards = by_id(card(A))
        scores = {A: 0.3}
        overlay(cards, scores, [PendingWrite(1, card(NEW, value="Kyoto"))])
        assert cards == by_id(card(A)) and scores == {A: 0.3}

    @pytest.mark.parametrize(
        "pending",
        [
            {"cardinality": "multi_value"},
            {"kind": "event", "cardinality": None, "occurred_at": NOW},
            {"kind": "knowledge", "cardinality": None},
        ],
    )
    def test_a_pending_write_that_is_not_a_single_value_state_changes_nothing(
            self, pending: dict[str, Any]) -> None:
        cards = by_id(card(A))
        assert overlay(cards, {A: 0.3}, [PendingWrite(1, card(NEW, value="Kyoto", **pending))]) == (
            cards, {A: 0.3}, {})

    @pytest.mark.parametrize(
        "elsewhere",
        [
            {"label": "job title"},
            {"subject": "wife"},
            {"scope": "project", "project_id": "fibon"},
            {"scope": "group", "group_id": "family"},
            {"cardinality": "multi_value"},
        ],
    )
    def test_cards_of_another_slot_are_untouched_and_the_write_is_not_added(
            self, elsewhere: dict[str, Any]) -> None:
        cards = by_id(card(A, **elsewhere))
        assert overlay(cards, {A: 0.3}, [PendingWrite(1, card(NEW, value="Kyoto"))]) == (cards, {A: 0.3}, {})

    def test_an_already_superseded_card_keeps_its_own_end(self) -> None:
        old = card(A, superseded=True, valid_to=ago(30))
        cards, scores, notes = overlay(by_id(old, card(B)), {A: 0.9, B: 0.2},
                                       [PendingWrite(1, card(NEW, value="Kyoto"))])
        assert cards[A] == old and A not in notes
        assert scores[NEW] == 0.2

    def test_pending_writes_apply_in_position_order(self) -> None:
        first = PendingWrite(7, card(NEW, value="Kyoto"))
        second = PendingWrite(8, card(NEWER, value="Osaka"))
        cards, scores, _ = overlay(by_id(card(A)), {A: 0.4}, [second, first])
        assert cards[NEW].superseded and not cards[NEWER].superseded
        assert scores[NEWER] == 0.4

    def test_through_process_the_write_ranks_where_the_old_value_was_and_the_old_is_dropped(self) -> None:
        cards = by_id(card(A, value="Kyoto"), labelled(B), labelled(C))
        outcome = run({"semantic": [A, B, C]}, cards, pending=[PendingWrite(9, card(NEW, value="Osaka"))])
        assert ids(outcome) == [NEW, B, C]
        assert outcome.chosen[0][1] == pytest.approx(1.1 / 61)
        assert outcome.trace[A]["superseded"] == "dropped"
        assert "unprojected write" in outcome.trace[A]["overlay"]
        assert "not projected yet" in outcome.trace[NEW]["overlay"]
        assert outcome.trace[NEW]["final"] == {"rank": 1, "score": round(1.1 / 61, 6)}

    def test_the_write_settles_a_slot_contradiction(self) -> None:
        cards = by_id(card(A, value="Kyoto"), card(B, value="Taipei"))
        assert len(flagged({"semantic": [A, B]}, cards).contradictions) == 1
        pending = [PendingWrite(1, card(NEW, value="Osaka"))]
        assert flagged({"semantic": [A, B]}, cards, pending=pending).contradictions == []
        assert ids(run({"semantic": [A, B]}, cards, pending=pending)) == [NEW]

    def test_a_pending_multi_value_write_leaves_the_outcome_as_it_was(self) -> None:
        cards = by_id(card(A, cardinality="multi_value", label="skills", value="Go"), labelled(B))
        pending = [PendingWrite(1, card(NEW, cardinality="multi_value", label="skills", value="Rust"))]
        assert run({"semantic": [A, B]}, cards, pending=pending) == run({"semantic": [A, B]}, cards)
        assert flagged({"semantic": [A, B]}, cards, pending=pending) == flagged({"semantic": [A, B]}, cards)

    def test_an_as_of_query_ignores_pending_writes(self) -> None:
        cards = by_id(card(A, value="Kyoto", valid_from=ago(400)))
        pending = [PendingWrite(1, card(NEW, value="Osaka", valid_from=NOW))]
        outcome = run({"semantic": [A]}, cards, now=ago(200), as_of=True, pending=pending)
        assert ids(outcome) == [A]
        assert not outcome.candidates[A].superseded
        assert "overlay" not in outcome.trace[A]

    def test_a_loaded_card_no_route_ranked_does_not_break_the_overlay(self) -> None:
        cards = by_id(card(A, value="Kyoto"), card(B, value="Taipei"))
        outcome = run({"semantic": [A]}, cards, pending=[PendingWrite(1, card(NEW, value="Osaka"))])
        assert outcome.chosen == [(NEW, pytest.approx(1.1 / 61))]


class TestTopN:
    def cards(self) -> dict[UUID, Candidate]:
        return by_id(*(labelled(UUID(int=n)) for n in range(1, 9)))

    def rankings(self) -> dict[str, list[UUID]]:
        return {"semantic": [UUID(int=n) for n in range(1, 9)]}

    def test_five_by_default(self) -> None:
        assert ids(run(self.rankings(), self.cards())) == [UUID(int=n) for n in range(1, 6)]

    def test_the_query_top_wins_over_the_tuning(self) -> None:
        assert len(run(self.rankings(), self.cards(), tuning=Tuning(top_n=3)).chosen) == 3
        assert len(run(self.rankings(), self.cards(), tuning=Tuning(top_n=3), top=7).chosen) == 7

    def test_cards_below_the_cut_say_so_in_the_trace(self) -> None:
        outcome = run(self.rankings(), self.cards(), top=2)
        assert outcome.trace[C]["final"] == "below the top n"
        assert outcome.trace[B]["final"] == {"rank": 2, "score": pytest.approx(1.1 / 62, abs=1e-6)}


class TestTrace:
    def test_a_returned_card_explains_every_step(self) -> None:
        cards = by_id(event(A, 10, scope="project", project_id="fibon"))
        trace = run({"semantic": [E, A], "tags": [A]}, cards, current_project="fibon").trace[A]
        assert set(trace) == {"routes", "rrf", "decay", "scope_boost", "final"}
        assert trace["routes"] == {"semantic": 2, "tags": 1}
        fused = 1 / 62 + 1 / 61
        assert trace["rrf"] == round(fused, 6)
        decayed = fused * fading(0.01, 10)
        assert trace["decay"] == {"lambda": 0.01, "days": 10.0, "factor": round(fading(0.01, 10), 6),
                                  "score": round(decayed, 6)}
        assert trace["scope_boost"] == {"factor": 1.2, "score": round(decayed * 1.2, 6)}
        assert trace["final"] == {"rank": 1, "score": round(decayed * 1.2, 6)}

    def test_every_ranked_card_is_traced_and_nothing_else(self) -> None:
        cards = by_id(labelled(A), labelled(B), labelled(F))
        outcome = run({"semantic": [A, B], "graph": [C]}, cards)
        assert set(outcome.trace) == {A, B}

    def test_the_outcome_keeps_every_candidate_for_the_caller(self) -> None:
        cards = by_id(labelled(A), replace(labelled(B), value="x"))
        assert run({"semantic": [A]}, cards).candidates == cards
