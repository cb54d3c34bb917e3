"""Questions about now over conversation turns: which questions are about now, which turns are on
the matter, and the bounded prior that puts the latest word on it first; questions about what was
said or done, whose turns are not aged."""

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest

from services.query.retrieval.asks import CURRENT, RECORD, Reading
from services.query.retrieval.present import (
    ConversationPrior,
    asks_about_now,
    latest_first,
    on_the_matter,
    question_reading,
)
from services.query.retrieval.query import RetrievalQuery
from services.query.retrieval.scoring import Candidate, Ranking, Rankings
from services.query.retrieval.tuning import Tuning
from tests.unit import retrieval_support

NOW = datetime(2026, 6, 15, 18, tzinfo=UTC)  # a Monday
OLD, NEW, CHAT, STATE = (UUID(int=n) for n in range(1, 5))


def query(text: str, **fields: Any) -> RetrievalQuery:
    return RetrievalQuery(text=text, now=NOW, **fields)


def turn(card_id: UUID, days_ago: float, *, conversation: bool = True) -> Candidate:
    said = NOW - timedelta(days=days_ago)
    return Candidate(card_id=card_id, kind="event", cardinality=None, scope="personal",
                     project_id=None, subject=None, label=None, value=f"turn {card_id.int}",
                     valid_from=said, valid_to=None, occurred_at=said, recorded_at=said,
                     verified_at=None, superseded=False, memory_type="event",
                     conversation=conversation)


def by_id(*cards: Candidate) -> dict[UUID, Candidate]:
    return {c.card_id: c for c in cards}


def run(rankings: dict[str, Any], cards: dict[UUID, Candidate], **options: Any) -> list[UUID]:
    return retrieval_support.ids(retrieval_support.run(rankings, cards, **{"now": NOW, "present": True,
                                                                         **options}))


class TestAsksAboutNow:
    @pytest.mark.parametrize("text", [
        "where do I live now?", "where do I live?", "我現在住哪裡？", "我目前在哪家公司上班",
        "最近在學什麼語言", "what am I learning these days", "what do I do today",
        "where will I be tomorrow", "which editor do I use to write code"])
    def test_a_question_for_a_current_value_that_names_no_earlier_time_is_about_now(self, text: str) -> None:
        assert asks_about_now(query(text))

    @pytest.mark.parametrize("text", [
        "where did I live in April?", "我上個月住哪裡", "what did I eat yesterday", "我以前住在哪裡",
        "where did I use to work", "where did I live before", "我之前在哪上班", "what did I say a while ago",
        "我原本用什麼編輯器", "what have I cooked since last month", "when did I move to Dresden?",
        "what did I say about the flat?"])
    def test_a_question_about_an_earlier_time_or_what_was_said_or_done_is_not(self, text: str) -> None:
        assert not asks_about_now(query(text))

    def test_a_question_asked_as_of_a_moment_is_not(self) -> None:
        assert not asks_about_now(query("where do I live now?", valid_at=NOW - timedelta(days=30)))
        assert not asks_about_now(query("where do I live now?", known_at=NOW))

    def test_the_reading_says_why(self) -> None:
        assert question_reading(query("where did I live in April?")) == Reading(
            RECORD, "names a time before the asked moment")
        assert question_reading(query("where do I live now?")) == Reading(CURRENT, "now")
        assert question_reading(query("where do I live?", known_at=NOW)).kind == RECORD


class TestThePrior:
    def test_the_latest_word_keeps_everything_and_the_earlier_at_least_the_floor(self) -> None:
        prior = ConversationPrior(rate=0.1, floor=0.33)
        assert prior.factor(0) == 1.0
        assert prior.factor(7) == pytest.approx(0.33 + 0.67 * 0.4966, abs=1e-3)
        assert prior.factor(10_000) == pytest.approx(0.33)
        assert prior.factor(-1) == 1.0  # said after the latest word: never raised above 1

    @pytest.mark.parametrize("field", ["floor", "share"])
    def test_a_floor_or_share_outside_zero_to_one_is_refused(self, field: str) -> None:
        wrong: dict[str, Any] = {field: 1.5}
        with pytest.raises(ValueError, match=field):
            ConversationPrior(**wrong)


class TestOnTheMatter:
    def test_a_turn_is_on_the_matter_near_the_strongest_a_matching_route_found(self) -> None:
        rankings = {"semantic": Ranking([OLD, NEW, CHAT], [1.0, 0.5, 0.3])}
        assert on_the_matter(rankings, {OLD, NEW, CHAT}, share=0.4) == {OLD, NEW}

    def test_each_route_measures_against_its_own_strongest(self) -> None:
        rankings = {"semantic": Ranking([OLD, CHAT], [1.0, 0.2]), "tags": Ranking([CHAT], [0.3])}
        assert on_the_matter(rankings, {OLD, CHAT}, share=0.5) == {OLD, CHAT}

    def test_routes_that_find_by_time_or_by_a_walk_say_nothing_of_the_matter(self) -> None:
        rankings = {"semantic": [OLD], "temporal": [CHAT], "graph": [NEW]}
        assert on_the_matter(rankings, {OLD, NEW, CHAT}, share=0.5) == {OLD}

    def test_only_the_turns_asked_about_count(self) -> None:
        rankings = {"semantic": Ranking([STATE, NEW], [1.0, 0.3])}
        assert on_the_matter(rankings, {NEW}, share=0.5) == {NEW}


class TestLatestFirst:
    def test_days_count_to_the_latest_turn_on_the_matter(self) -> None:
        cards = by_id(turn(OLD, 70), turn(NEW, 20), turn(CHAT, 2))
        rankings = {"semantic": Ranking([OLD, NEW, CHAT], [1.0, 0.8, 0.1])}
        spans = latest_first(rankings, cards, ConversationPrior(rate=0.1, floor=0.33, share=0.4))
        assert set(spans) == {OLD, NEW}  # the small talk is no word on the matter
        assert spans[NEW] == (0.0, 1.0)
        assert spans[OLD][0] == pytest.approx(50)

    def test_events_that_are_no_conversation_turns_are_left_to_the_decay_policy(self) -> None:
        cards = by_id(turn(OLD, 70, conversation=False), turn(NEW, 20))
        spans = latest_first({"semantic": [OLD, NEW]}, cards, ConversationPrior())
        assert set(spans) == {NEW}


class TestRanking:
    def test_the_latest_statement_overtakes_an_older_one_that_shares_more_words(self) -> None:
        cards = by_id(turn(OLD, 70), turn(NEW, 20))
        rankings = {"semantic": Ranking([OLD, NEW], [1.0, 0.8]), "tags": [OLD]}
        assert run(rankings, cards, present=False) == [OLD, NEW]
        assert run(rankings, cards) == [NEW, OLD]

    def test_switched_off_the_turns_decay_as_events(self) -> None:
        cards = by_id(turn(OLD, 70), turn(NEW, 20))
        rankings = {"semantic": Ranking([OLD, NEW], [1.0, 0.8]), "tags": [OLD]}
        off = Tuning(conversation=ConversationPrior(enabled=False))
        assert run(rankings, cards, tuning=off) == [OLD, NEW]

    def test_it_is_bounded_a_far_more_relevant_old_turn_keeps_its_place(self) -> None:
        cards = by_id(turn(OLD, 300), turn(NEW, 1))
        rankings = {"semantic": Ranking([OLD, NEW], [1.0, 0.45]), "tags": [OLD]}
        assert run(rankings, cards) == [OLD, NEW]  # 2/61 × 0.33 > 0.45/62

    def test_new_small_talk_off_the_matter_does_not_speak_over_the_statement(self) -> None:
        cards = by_id(turn(OLD, 70), turn(CHAT, 1))
        rankings = {"semantic": Ranking([OLD, CHAT], [1.0, 0.3])}
        assert run(rankings, cards) == [OLD, CHAT]

    def test_asked_what_was_said_or_done_an_old_turn_is_not_aged(self) -> None:
        cards = by_id(turn(OLD, 700), turn(NEW, 1))
        rankings: Rankings = {"semantic": Ranking([OLD, NEW], [1.0, 0.9]), "tags": [NEW, OLD]}
        record = Reading(RECORD, "did")
        outcome = retrieval_support.run(rankings, cards, now=NOW, present=False, reading=record)
        assert outcome.trace[OLD]["decay"]["factor"] == 1.0
        assert outcome.trace[OLD]["decay"]["conversation"].startswith("no age penalty")
        assert outcome.trace[OLD]["question"] == {"asks": RECORD, "sign": "did"}
        off = Tuning(conversation=ConversationPrior(enabled=False))
        aged = retrieval_support.run(rankings, cards, off, now=NOW, present=False)
        assert aged.trace[OLD]["decay"]["factor"] < 0.6

    def test_asked_what_was_said_the_better_match_leads_however_old(self) -> None:
        cards = by_id(turn(OLD, 700), turn(NEW, 1))
        rankings = {"semantic": Ranking([OLD, NEW], [1.0, 0.8]), "tags": [OLD, NEW]}
        assert run(rankings, cards, present=False) == [OLD, NEW]
        off = Tuning(conversation=ConversationPrior(enabled=False))
        assert run(rankings, cards, tuning=off, present=False) == [NEW, OLD]

    def test_the_trace_says_which_turn_is_the_latest_word(self) -> None:
        cards = by_id(turn(OLD, 70), turn(NEW, 20))
        outcome = retrieval_support.run({"semantic": [OLD, NEW]}, cards, now=NOW, present=True)
        assert outcome.trace[NEW]["decay"]["conversation"] == "the latest turn on the matter"
        assert outcome.trace[OLD]["decay"]["days"] == pytest.approx(50)
        assert outcome.trace[OLD]["decay"]["lambda"] == ConversationPrior().rate
