"""The read path's shared pure formulas: the candidate, decay, scope boost, the superseded filter, top N;
and the route breaker."""

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest

from services.query.retrieval.breaker import Breakers, RouteBreaker, machine_load, nearest_rank
from services.query.retrieval.scoring import (
    Candidate,
    DecayPolicy,
    ScopeBoost,
    age_days,
    decay,
    decay_anchor,
    drop_superseded,
    scope_boost,
    top_n,
)

NOW = datetime(2026, 11, 1, 12, tzinfo=UTC)
A, B, C, D = (UUID(int=n) for n in (1, 2, 3, 4))


def ago(days: float) -> datetime:
    return NOW - timedelta(days=days)


def card(n: int, **fields: Any) -> Candidate:
    base: dict[str, Any] = dict(
        card_id=UUID(int=n), kind="state", cardinality="single_value", scope="personal", project_id=None,
        subject="user", label="address", value="Taipei", valid_from=NOW, valid_to=None, occurred_at=None,
        recorded_at=NOW, verified_at=None, superseded=False,
    )
    base.update(fields)
    return Candidate(**base)


class TestCandidate:
    @pytest.mark.parametrize(
        "fields",
        [{"kind": "fact"}, {"scope": "team"}, {"cardinality": None}, {"cardinality": "many"}],
    )
    def test_bad_values_are_refused(self, fields: dict[str, object]) -> None:
        with pytest.raises(ValueError):
            card(1, **fields)

    def test_event_and_knowledge_need_no_cardinality(self) -> None:
        assert card(1, kind="event", cardinality=None).cardinality is None
        assert not card(2, kind="knowledge", cardinality=None).is_single_state


def fading(rate: float, days: float, floor: float = 0.5) -> float:
    """DESIGN rule 5: β + (1 − β)·e^(−λ·Δt)."""
    return floor + (1 - floor) * math.exp(-rate * days)


class TestDecay:
    def test_the_fading_part_halves_at_its_half_life_and_the_floor_holds(self) -> None:
        half_life = math.log(2) / 0.005
        multi = card(1, cardinality="multi_value", valid_from=ago(half_life))
        assert decay(1.0, multi, NOW) == pytest.approx(0.75)
        assert decay(1.0, replace(multi, valid_from=ago(100_000)), NOW) == pytest.approx(0.5)

    def test_the_valid_value_of_a_single_value_slot_is_never_decayed(self) -> None:
        """A job held for ten years is as findable as one learned yesterday (DESIGN rule 5)."""
        assert decay(1.0, card(1, valid_from=ago(3650)), NOW) == 1.0
        assert DecayPolicy().exempt(card(1))
        superseded = card(1, valid_from=ago(3650), superseded=True)
        assert not DecayPolicy().exempt(superseded)
        assert decay(1.0, superseded, NOW) == pytest.approx(0.5)

    def test_multi_value_decays_slower_than_events(self) -> None:
        multi = card(1, cardinality="multi_value", valid_from=ago(100))
        event = card(2, kind="event", cardinality=None, occurred_at=ago(100))
        assert decay(1.0, multi, NOW) == pytest.approx(fading(0.005, 100))
        assert decay(1.0, event, NOW) == pytest.approx(fading(0.01, 100))

    def test_default_rates_per_kind(self) -> None:
        policy = DecayPolicy()
        assert policy.rate(card(1)) == 0.02
        assert policy.rate(card(1, cardinality="multi_value")) == 0.005
        assert policy.rate(card(1, kind="event", cardinality=None)) == 0.01
        assert policy.rate(card(1, kind="knowledge", cardinality=None)) == 0.003
        assert policy.floor == 0.5

    def test_event_counts_from_occurred_at(self) -> None:
        event = card(1, kind="event", cardinality=None, valid_from=ago(3), occurred_at=ago(10),
                     recorded_at=ago(1))
        assert decay_anchor(event) == ago(10)
        assert decay(1.0, event, NOW) == pytest.approx(fading(0.01, 10))

    def test_recorded_at_when_no_world_time(self) -> None:
        knowledge = card(1, kind="knowledge", cardinality=None, valid_from=None, recorded_at=ago(100))
        assert decay_anchor(knowledge) == ago(100)
        assert decay(1.0, knowledge, NOW) == pytest.approx(fading(0.003, 100))

    def test_a_later_verification_resets_the_clock(self) -> None:
        multi = card(1, cardinality="multi_value", valid_from=ago(300), verified_at=ago(0))
        assert decay(1.0, multi, NOW) == pytest.approx(1.0)
        assert decay_anchor(card(1, valid_from=ago(300), verified_at=ago(5))) == ago(5)

    def test_an_older_verification_changes_nothing(self) -> None:
        assert decay_anchor(card(1, valid_from=ago(5), verified_at=ago(300))) == ago(5)

    def test_a_future_anchor_never_boosts(self) -> None:
        event = card(1, kind="event", cardinality=None, occurred_at=NOW + timedelta(days=3))
        assert decay(0.7, event, NOW) == 0.7

    def test_age_counts_up_to_the_asked_moment(self) -> None:
        event = card(1, kind="event", cardinality=None, occurred_at=ago(40))
        assert age_days(event, ago(30)) == pytest.approx(10)
        assert decay(1.0, event, ago(30)) == pytest.approx(fading(0.01, 10))

    def test_the_floor_and_rates_are_parameters(self) -> None:
        policy = DecayPolicy(event=0.1, floor=0.2)
        event = card(1, kind="event", cardinality=None, occurred_at=ago(10))
        assert decay(1.0, event, NOW, policy) == pytest.approx(fading(0.1, 10, floor=0.2))
        with pytest.raises(ValueError):
            DecayPolicy(floor=1.5)

    def test_unbounded_is_the_old_rule_for_every_card(self) -> None:
        old = DecayPolicy(bounded=False)
        assert decay(1.0, card(1, valid_from=ago(150)), NOW, old) == pytest.approx(math.exp(-3.0))
        assert not old.exempt(card(1))


class TestScopeBoost:
    def test_defaults_rank_current_project_personal_group_global(self) -> None:
        here = scope_boost(1.0, card(1, scope="project", project_id="fibon"), "fibon")
        personal = scope_boost(1.0, card(2, scope="personal"), "fibon")
        group = scope_boost(1.0, card(3, scope="group", group_id="family"), "fibon")
        public = scope_boost(1.0, card(4, scope="global"), "fibon")
        assert (here, personal, group, public) == pytest.approx((1.2, 1.1, 1.0, 0.9))

    def test_another_projects_card_gets_the_global_factor(self) -> None:
        other = card(1, scope="project", project_id="3ngram")
        assert scope_boost(2.0, other, "fibon") == pytest.approx(1.8)
        assert scope_boost(2.0, other, None) == pytest.approx(1.8)

    def test_boosts_are_a_parameter(self) -> None:
        boosts = ScopeBoost(current_project=2.0, personal=1.0, group=1.0, global_=0.5)
        assert scope_boost(1.0, card(1, scope="project", project_id="p"), "p", boosts) == 2.0
        assert scope_boost(1.0, card(1, scope="global"), "p", boosts) == 0.5


class TestDropSuperseded:
    def test_current_queries_drop_superseded_and_keep_order(self) -> None:
        cards = [card(3), card(1, superseded=True), card(2)]
        assert [c.card_id for c in drop_superseded(cards, as_of=False)] == [C, B]

    def test_as_of_queries_keep_them(self) -> None:
        cards = [card(3), card(1, superseded=True)]
        assert drop_superseded(cards, as_of=True) == cards


class TestTopN:
    def test_highest_first_ties_by_card_id(self) -> None:
        scored = {D: 0.5, C: 0.9, B: 0.5, A: 0.1}
        assert top_n(scored, 3) == [(C, 0.9), (B, 0.5), (D, 0.5)]

    def test_default_is_five_and_short_inputs_are_fine(self) -> None:
        scored = {UUID(int=n): float(n) for n in range(1, 9)}
        assert [card_id.int for card_id, _ in top_n(scored)] == [8, 7, 6, 5, 4]
        assert top_n({A: 1.0}, 5) == [(A, 1.0)]
        assert top_n(scored, 0) == []


class TestNearestRank:
    def test_p95_over_ten_is_the_slowest(self) -> None:
        assert nearest_rank([float(n) for n in range(10, 0, -1)]) == 10.0

    def test_p95_over_twenty_is_the_nineteenth(self) -> None:
        assert nearest_rank([float(n) for n in range(1, 21)]) == 19.0
        assert nearest_rank([float(n) for n in range(1, 101)]) == 95.0

    def test_other_quantiles_and_one_sample(self) -> None:
        assert nearest_rank([5.0, 1.0, 3.0, 2.0, 4.0, 6.0, 7.0, 8.0, 9.0, 10.0], 0.5) == 5.0
        assert nearest_rank([42.0]) == 42.0

    def test_bad_input_is_refused(self) -> None:
        with pytest.raises(ValueError):
            nearest_rank([])
        with pytest.raises(ValueError):
            nearest_rank([1.0], 0.0)


def trip(breaker: RouteBreaker, at: float = 0.0) -> None:
    for _ in range(3):
        breaker.record(400.0, at)
    breaker.trip(at)


def healthy(board: Breakers, name: str, ms: float, now: float = 0.0, calls: int = 10) -> None:
    for _ in range(calls):
        board.record(name, ms, now)


class TestRouteBreaker:
    def test_one_slow_sample_among_fast_ones_does_not_quarantine(self) -> None:
        board = Breakers(("semantic", "tags"))
        healthy(board, "tags", 5.0)
        healthy(board, "semantic", 10.0, calls=9)
        assert not board.record("semantic", 400.0, 0.0)  # a cold start, a pause: one sample
        assert board.allow("semantic", 1.0)

    def test_three_slow_samples_in_ten_quarantine(self) -> None:
        board = Breakers(("semantic", "tags"))
        healthy(board, "tags", 5.0)
        healthy(board, "semantic", 10.0, calls=7)
        assert not board.record("semantic", 400.0, 0.0)
        assert not board.record("semantic", 400.0, 0.0)
        assert board.record("semantic", 400.0, 0.0)
        assert board["semantic"].quarantined(1.0) and not board.allow("semantic", 1.0)

    def test_every_route_slowed_alike_is_a_busy_machine_not_a_sick_route(self) -> None:
        board = Breakers(("semantic", "tags", "fuzzy"))
        for name, ms in (("semantic", 60.0), ("tags", 40.0), ("fuzzy", 30.0)):
            healthy(board, name, ms, calls=30)
        for _ in range(5):  # everything four times slower: the machine is busy
            for name, ms in (("semantic", 240.0), ("tags", 160.0), ("fuzzy", 120.0)):
                board.record(name, ms, 0.0)
        assert board["semantic"].sick() and not board["semantic"].quarantined(0.0)

    def test_a_route_slow_while_the_others_are_not_is_taken_out(self) -> None:
        board = Breakers(("semantic", "tags", "fuzzy"))
        for name, ms in (("semantic", 60.0), ("tags", 40.0), ("fuzzy", 30.0)):
            healthy(board, name, ms, calls=30)
        quarantined = [board.record("semantic", 400.0, 0.0) for _ in range(3)]
        assert quarantined == [False, False, True]

    @pytest.mark.parametrize(("load", "busy_load", "taken_out"), [
        (1.6, 1.0, False),  # more runnable tasks than cores: the CPU-bound route is starved
        (0.3, 1.0, True),   # a quiet machine: the route alone is slow, so it is sick
        (5.0, 0.0, True),   # the load signal turned off
    ])
    def test_an_overloaded_machine_is_busy_even_when_one_route_alone_is_slowed(
            self, load: float, busy_load: float, taken_out: bool) -> None:
        board = Breakers(("semantic", "tags", "fuzzy"), load=lambda: load, busy_load=busy_load)
        for name, ms in (("semantic", 60.0), ("tags", 40.0), ("fuzzy", 30.0)):
            healthy(board, name, ms, calls=30)
        quarantined = [board.record("semantic", 400.0, 0.0) for _ in range(3)]
        assert quarantined[-1] is taken_out

    def test_the_machine_load_is_a_share_of_the_cores(self) -> None:
        assert 0.0 <= machine_load() < 1_000

    def test_a_warm_up_call_is_no_sample(self) -> None:
        board = Breakers(("semantic",))
        for _ in range(5):
            board.record("semantic", 2_000.0, 0.0, warm_up=True)
        assert board["semantic"].samples == () and board.allow("semantic", 0.0)

    def test_at_the_limit_stays_in(self) -> None:
        breaker = RouteBreaker()
        for _ in range(20):
            breaker.record(150.0, 0.0)
        assert not breaker.sick() and breaker.p95() == 150.0

    def test_one_probe_every_thirty_seconds(self) -> None:
        breaker = RouteBreaker()
        trip(breaker, at=100.0)
        assert not breaker.allow(129.9)
        assert breaker.allow(130.0)
        assert not breaker.allow(131.0)
        assert not breaker.allow(159.0)
        assert breaker.allow(160.0)

    def test_a_probe_under_the_limit_lets_it_back_in_with_a_fresh_window(self) -> None:
        breaker = RouteBreaker()
        trip(breaker)
        assert breaker.allow(30.0)
        breaker.record(20.0, 30.0)
        assert not breaker.quarantined(30.0)
        assert breaker.samples == () and breaker.allow(31.0) and breaker.allow(31.0)

    def test_a_slow_probe_keeps_it_out(self) -> None:
        breaker = RouteBreaker()
        trip(breaker)
        assert breaker.allow(30.0)
        breaker.record(300.0, 30.0)
        assert breaker.quarantined(31.0)

    def test_quarantine_ends_after_ten_minutes_with_a_fresh_window(self) -> None:
        breaker = RouteBreaker()
        trip(breaker)
        assert breaker.quarantined(599.9)
        assert breaker.allow(600.0) and breaker.allow(600.0)
        assert breaker.samples == ()

    def test_numbers_are_parameters(self) -> None:
        board = Breakers(("semantic",), window=3, limit_ms=50.0, quarantine_s=60.0, probe_every_s=5.0,
                         slow_samples=2)
        board.record("semantic", 60.0, 0.0)
        assert board.record("semantic", 60.0, 0.0)
        assert not board.allow("semantic", 4.0)
        assert board.allow("semantic", 5.0)
        assert board.allow("semantic", 60.0) and board["semantic"].samples == ()
