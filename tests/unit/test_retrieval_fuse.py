"""Fusion: RRF with each route's strengths and weight, and the ranks ``explain`` shows."""

from uuid import UUID

import pytest

from services.query.retrieval.fuse import route_ranks, rrf
from services.query.retrieval.scoring import Ranking

A, B, C, D = (UUID(int=n) for n in range(1, 5))


class TestRRF:
    def test_two_routes_by_hand(self) -> None:
        scores = rrf({"semantic": [A, B, C], "tags": [B, D]})
        assert scores[A] == pytest.approx(1 / 61)
        assert scores[B] == pytest.approx(1 / 62 + 1 / 61)  # 0.016129 + 0.016393 = 0.032523
        assert scores[C] == pytest.approx(1 / 63)
        assert scores[D] == pytest.approx(1 / 62)
        assert scores[B] == pytest.approx(0.0325225, abs=1e-7)
        assert sorted(scores, key=scores.__getitem__, reverse=True) == [B, A, D, C]

    def test_k_is_a_parameter(self) -> None:
        assert rrf({"semantic": [A]}, k=1) == {A: 0.5}

    def test_a_repeat_within_a_route_counts_once_at_its_best_rank(self) -> None:
        assert rrf({"fuzzy": [A, B, A]}) == {A: pytest.approx(1 / 61), B: pytest.approx(1 / 62)}

    def test_in_a_shared_ranking_equally_strong_cards_share_the_first_one_s_rank(self) -> None:
        scores = rrf({"slots": Ranking([A, B, C, D], [0.6, 0.3, 0.3, 0.3], shared=True)})
        assert scores[A] == pytest.approx(0.6 / 61)
        assert scores[B] == scores[C] == scores[D] == pytest.approx(0.3 / 62)
        # a route that orders equals on purpose keeps positions
        assert rrf({"tags": Ranking([A, B], [1.0, 1.0])})[B] == pytest.approx(1 / 62)

    def test_empty_and_failed_routes_add_nothing(self) -> None:
        assert rrf({}) == {}
        assert rrf({"graph": [], "tags": [A]}) == {A: pytest.approx(1 / 61)}

    def test_route_ranks_explain_each_card(self) -> None:
        ranks = route_ranks({"semantic": [A, B, C], "tags": [B, D]})
        assert ranks == {
            A: {"semantic": 1}, B: {"semantic": 2, "tags": 1}, C: {"semantic": 3}, D: {"tags": 2},
        }
