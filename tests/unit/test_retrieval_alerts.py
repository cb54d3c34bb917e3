"""The alert blocks: the rules (contradiction, aging, knowledge freshness) and which of them an
answer raises — those of the cards it returns."""

from dataclasses import replace
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest

from services.query.retrieval.alerts import Contradiction, aging_facts, contradictions, stale_knowledge
from services.query.retrieval.results import ContradictionAlert
from services.query.retrieval.scoring import Candidate
from services.query.retrieval.tuning import Tuning
from tests.unit.retrieval_support import NOW, ago, by_id, card, flagged, labelled

A, B, C, D = (UUID(int=n) for n in range(1, 5))


class TestContradictions:
    def test_one_slot_two_values(self) -> None:
        found = contradictions([card(B, value="Kyoto"), card(A, value="Taipei")])
        assert [c.card_ids for c in found] == [(A, B)]
        assert "user/address" in found[0].reason

    def test_same_value_modulo_case_and_whitespace_is_no_conflict(self) -> None:
        assert contradictions([card(A, value="New  York"), card(B, value=" new york\n")]) == []

    def test_a_superseded_card_is_no_conflict(self) -> None:
        assert contradictions([card(A, value="Kyoto", superseded=True), card(B)]) == []

    @pytest.mark.parametrize(
        "other",
        [
            {"scope": "project", "project_id": "p2"},
            {"scope": "group", "group_id": "team"},
            {"subject": "wife"},
            {"label": "job title"},
            {"cardinality": "multi_value"},
            {"kind": "knowledge", "cardinality": None},
        ],
    )
    def test_different_slots_or_kinds_do_not_conflict(self, other: dict[str, object]) -> None:
        base = {"scope": "project", "project_id": "p1"} if "project_id" in other else {}
        assert contradictions([card(A, **base), card(B, value="Kyoto", **other)]) == []

    def test_two_groups_keep_their_slots_apart(self) -> None:
        family = card(A, scope="group", group_id="family")
        team = card(B, scope="group", group_id="team", value="Kyoto")
        assert contradictions([family, team]) == []
        assert len(contradictions([family, replace(team, group_id="family")])) == 1

    def test_three_values_give_every_differing_pair_once_in_order(self) -> None:
        cards = [card(C, value="Osaka"), card(B, value="taipei"), card(A, value="Taipei")]
        assert [c.card_ids for c in contradictions(cards)] == [(A, C), (B, C)]
        assert contradictions(cards) == contradictions(list(reversed(cards)))

    def test_a_contradicts_edge_either_way_gives_one_alert(self) -> None:
        x = card(A, kind="knowledge", cardinality=None, edges=(("contradicts", B),))
        y = card(B, kind="knowledge", cardinality=None, edges=(("contradicts", A), ("related_to", C)))
        assert contradictions([y, x]) == [Contradiction((A, B), "linked by contradicts")]

    def test_edges_to_absent_superseded_or_self_cards_are_ignored(self) -> None:
        x = card(A, kind="knowledge", cardinality=None, edges=(("contradicts", C), ("contradicts", B),
                                                               ("contradicts", A)))
        y = card(B, kind="knowledge", cardinality=None, superseded=True)
        assert contradictions([x, y]) == []
        assert contradictions([card(A, edges=(("related_to", B),)), card(B)]) == []

    def test_slot_and_edge_on_one_pair_give_one_alert_with_both_reasons(self) -> None:
        found = contradictions([card(A, edges=(("contradicts", B),)), card(B, value="Kyoto")])
        assert len(found) == 1
        assert "holds different values" in found[0].reason and "linked by contradicts" in found[0].reason


class TestAgingFacts:
    def test_boundary_is_180_days(self) -> None:
        assert aging_facts([card(A, valid_from=ago(180))], NOW) == [A]
        assert aging_facts([card(A, valid_from=ago(179))], NOW) == []
        assert aging_facts([card(A, valid_from=ago(180) + timedelta(seconds=1))], NOW) == []

    def test_verification_resets_the_clock(self) -> None:
        assert aging_facts([card(A, valid_from=ago(400), verified_at=ago(179))], NOW) == []
        assert aging_facts([card(A, valid_from=ago(400), verified_at=ago(181))], NOW) == [A]

    def test_only_current_single_value_state_cards(self) -> None:
        old = ago(365)
        cards = [
            card(A, valid_from=old, superseded=True),
            card(B, valid_from=old, cardinality="multi_value"),
            card(C, valid_from=old, kind="event", cardinality=None, occurred_at=old),
            card(D, valid_from=old, kind="knowledge", cardinality=None),
        ]
        assert aging_facts(cards, NOW) == []

    def test_recorded_at_stands_in_for_a_missing_valid_from(self) -> None:
        assert aging_facts([card(A, valid_from=None, recorded_at=ago(200))], NOW) == [A]

    def test_oldest_first_and_days_is_a_parameter(self) -> None:
        cards = [card(A, valid_from=ago(20)), card(B, valid_from=ago(30)), card(C, valid_from=ago(5))]
        assert aging_facts(cards, NOW, days=10) == [B, A]


class TestStaleKnowledge:
    def knowledge(self, card_id: UUID, **fields: object) -> Candidate:
        return card(card_id, kind="knowledge", cardinality=None, valid_from=None, **fields)

    def test_boundary_is_90_days(self) -> None:
        assert stale_knowledge([self.knowledge(A, recorded_at=ago(90))], NOW) == [A]
        assert stale_knowledge([self.knowledge(A, recorded_at=ago(89))], NOW) == []

    def test_verification_resets_the_clock(self) -> None:
        assert stale_knowledge([self.knowledge(A, recorded_at=ago(300), verified_at=ago(10))], NOW) == []

    def test_only_knowledge_cards_oldest_first(self) -> None:
        cards = [self.knowledge(A, recorded_at=ago(100)), self.knowledge(B, recorded_at=ago(200)),
                 card(C, recorded_at=ago(500), valid_from=ago(500))]
        assert stale_knowledge(cards, NOW) == [B, A]
        assert stale_knowledge(cards, NOW, days=150) == [B]


class TestContradictionsOfTheAnswer:
    def cards(self) -> dict[UUID, Candidate]:
        return by_id(card(A, value="Kyoto"), card(D, value="Taipei"),
                     card(B, label="job", value="chef"), card(C, label="job", value="pilot"))

    def test_reported_when_one_end_is_in_the_top_n(self) -> None:
        outcome = flagged({"semantic": [A, B, C, D]}, self.cards(), top=1)
        assert [c.card_ids for c in outcome.contradictions] == [(A, D)]
        assert "user/address" in outcome.contradictions[0].reason

    def test_a_pair_wholly_below_the_cut_is_not_reported(self) -> None:
        outcome = flagged({"semantic": [A, D, B, C]}, self.cards(), top=2)
        assert [c.card_ids for c in outcome.contradictions] == [(A, D)]

    def test_a_contradicts_edge_to_a_card_below_the_cut_is_reported(self) -> None:
        cards = by_id(labelled(A, kind="knowledge", cardinality=None, edges=(("contradicts", B),)),
                      labelled(B, kind="knowledge", cardinality=None))
        assert flagged({"semantic": [A, B]}, cards, top=1).contradictions == [
            ContradictionAlert(card_ids=(A, B), reason="linked by contradicts")]

    def test_a_dropped_superseded_card_contradicts_nothing(self) -> None:
        cards = by_id(card(A, value="Kyoto"), card(B, value="Taipei", superseded=True))
        assert flagged({"semantic": [A, B]}, cards).contradictions == []


class TestAgingAndFreshnessOfTheAnswer:
    def test_a_returned_single_value_fact_of_180_days_is_aging(self) -> None:
        cards = by_id(labelled(A, valid_from=ago(180)), labelled(B, valid_from=ago(179)))
        assert flagged({"semantic": [A, B]}, cards).aging_facts == [A]

    def test_aging_counts_from_the_reference_time(self) -> None:
        cards = by_id(labelled(A, valid_from=ago(200)))
        assert flagged({"semantic": [A]}, cards, now=ago(100), as_of=True).aging_facts == []

    def test_an_aging_fact_below_the_top_n_is_not_reported(self) -> None:
        cards = by_id(labelled(A), labelled(B, valid_from=ago(300)))
        assert flagged({"semantic": [A, B]}, cards, top=1).aging_facts == []

    def test_verification_resets_the_aging_clock(self) -> None:
        cards = by_id(labelled(A, valid_from=ago(300), verified_at=ago(10)))
        assert flagged({"semantic": [A]}, cards).aging_facts == []

    def test_the_aging_threshold_comes_from_the_tuning(self) -> None:
        cards = by_id(labelled(A, valid_from=ago(30)))
        assert flagged({"semantic": [A]}, cards, tuning=Tuning(aging_days=30)).aging_facts == [A]

    def knowledge(self, card_id: UUID, **fields: Any) -> Candidate:
        return labelled(card_id, kind="knowledge", cardinality=None, valid_from=None, **fields)

    def test_knowledge_unverified_for_90_days_is_stale(self) -> None:
        cards = by_id(self.knowledge(A, recorded_at=ago(90)), self.knowledge(B, recorded_at=ago(89)),
                      self.knowledge(C, recorded_at=ago(300), verified_at=ago(5)))
        assert flagged({"semantic": [A, B, C]}, cards).stale_knowledge == [A]

    def test_stale_knowledge_below_the_top_n_is_not_reported(self) -> None:
        cards = by_id(labelled(A), self.knowledge(B, recorded_at=ago(300)))
        assert flagged({"semantic": [A, B]}, cards, top=1).stale_knowledge == []

    def test_the_freshness_threshold_comes_from_the_tuning(self) -> None:
        cards = by_id(self.knowledge(A, recorded_at=ago(20)))
        alerts = flagged({"semantic": [A]}, cards, tuning=Tuning(knowledge_stale_days=20))
        assert alerts.stale_knowledge == [A]
