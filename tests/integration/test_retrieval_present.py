"""Questions about now over raw conversation turns, on the embedded PostgreSQL with extraction off:
turns stored by ``ingest_turn`` and projected, then searched. In conversations where a fact changes
(English and Chinese), a question about now finds the latest statement first; asked as of a moment
between the statements, or naming a time before the change, it finds the old one first. A question
about what was said or done ("when did …", 什麼時候) finds the old turn that answers it first,
however many newer turns share a word with it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import pytest

from infra.postgres import Database
from infra.settings import Settings
from projections.worker import project_log
from services.command.commands import IngestTurn
from services.factory import create_app, create_queries
from services.query.queries import Queries
from tests.support import START, Clock, new_tenant

pytestmark = pytest.mark.integration


def day(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(hour=20, tzinfo=UTC)


#: Each conversation: its turns (when said, what), the old and the latest statement of the fact,
#: a question about now, a moment between the two statements, and a question about that time.
CONVERSATIONS: dict[str, dict[str, Any]] = {
    "residence": {
        "turns": [("2026-03-10", "I live in Leipzig, in a flat near the zoo."),
                  ("2026-03-24", "Rainy week again, I barely left the house."),
                  ("2026-05-08", "Moved to Dresden last month, settled in now."),
                  ("2026-05-25", "Made a great risotto tonight.")],
        "old": 0, "latest": 2, "between": "2026-04-15",
        "now": "where do I live now?", "then": "where did I live in March?"},
    "住處": {
        "turns": [("2026-02-10", "我住在台北大安區，上班很方便。"),
                  ("2026-03-01", "這週末去爬了象山，風景很好。"),
                  ("2026-04-20", "我搬到新竹了，公司在竹科。"),
                  ("2026-05-20", "晚餐吃了牛肉麵。")],
        "old": 0, "latest": 2, "between": "2026-03-15",
        "now": "我現在住在哪裡？", "then": "我二月住在哪裡？"},
    "job": {
        "turns": [("2026-01-15", "I work as a barista at a café downtown."),
                  ("2026-02-02", "My cat knocked a plant off the shelf again."),
                  ("2026-04-28", "I'm now a backend engineer at Stripe, the first week was intense.")],
        "old": 0, "latest": 2, "between": "2026-03-01",
        "now": "what is my job currently?", "then": "what was my job in January?"},
    "编辑器": {
        "turns": [("2026-02-01", "我写代码一直用 Vim，快捷键都记熟了。"),
                  ("2026-03-03", "周末去了趟杭州，西湖人好多。"),
                  ("2026-04-25", "换成 VS Code 了，插件太方便了。")],
        "old": 0, "latest": 2, "between": "2026-04-01",
        "now": "我现在用什么编辑器写代码？", "then": "我二月用什么编辑器写代码？"},
}


#: Each conversation: an old turn that answers a question about what was said or done, then
#: newer turns that share a word with the question; the question, in each language.
RECORDS: dict[str, dict[str, Any]] = {
    "orchard": {
        "turns": [("2024-10-05", "We planted an apple tree in the back garden with the kids."),
                  ("2026-04-30", "The apple pie at the corner café was amazing."),
                  ("2026-05-18", "Bought apple juice and fresh bread at the market."),
                  ("2026-05-29", "The garden needs watering, the tree by the fence looks dry.")],
        "questions": ["when did we plant the apple tree?", "what did I say about planting the apple tree?"]},
    "鋼琴": {
        "turns": [("2024-09-12", "我女兒開始學鋼琴了，每週六上課。"),
                  ("2026-04-22", "鄰居家的鋼琴聲好吵。"),
                  ("2026-05-10", "音樂會的鋼琴獨奏很精彩。"),
                  ("2026-05-27", "女兒說想換一架新的鋼琴。")],
        "questions": ["我女兒什麼時候開始學鋼琴？", "我女儿什么时候开始学钢琴的？"]},
}


@pytest.fixture(scope="module")
def conversations(pg_settings: Settings, admin_db: Database):  # type: ignore[no-untyped-def]
    """Each conversation in a tenant of its own; a query side with the rule on, and one with it
    off (``conversation_recency=False``)."""
    patient = pg_settings.retrieval.model_copy(update={"breaker_p95_ms": 1e9, "route_timeout_ms": 10_000})
    settings = pg_settings.model_copy(update={"retrieval": patient})
    off = settings.model_copy(update={"retrieval": patient.model_copy(
        update={"conversation_recency": False})})
    clock = Clock()
    app = create_app(settings, clock=clock)
    written: dict[str, tuple[str, list[UUID]]] = {}
    for name, conversation in {**CONVERSATIONS, **RECORDS}.items():
        tenant, ids = new_tenant(), []
        for index, (when, text) in enumerate(conversation["turns"]):
            clock.now = day(when)
            ids.append(app.ingest_turn(tenant, IngestTurn(
                session_id=f"{name}-{when}", turn_id=str(index), role="user", text=text,
                said_at=clock.now, timezone="UTC")).event_card_id)
        written[name] = (tenant, ids)
    clock.now = START
    project_log(settings, app, admin=admin_db)
    rule, baseline = create_queries(settings, lambda: START), create_queries(off, lambda: START)
    yield rule, baseline, written
    rule.close()
    baseline.close()
    app.close()


def first_turn(queries: Queries, tenant: str, ids: list[UUID], text: str, **options: Any) -> int:
    """Which turn of the conversation the answer puts first."""
    result = queries.search(tenant, queries.query(text, **options))
    turns = [card.card_id for card in result.results if card.card_id in ids]
    assert turns, text
    return ids.index(turns[0])


@pytest.mark.parametrize("name", CONVERSATIONS)
def test_a_question_about_now_finds_the_latest_statement_first(conversations, name) -> None:  # type: ignore[no-untyped-def]
    rule, _, written = conversations
    tenant, ids = written[name]
    conversation = CONVERSATIONS[name]
    assert first_turn(rule, tenant, ids, conversation["now"]) == conversation["latest"]


@pytest.mark.parametrize("name", CONVERSATIONS)
def test_asked_as_of_a_moment_before_the_change_the_old_statement_comes_first(conversations, name) -> None:  # type: ignore[no-untyped-def]
    rule, _, written = conversations
    tenant, ids = written[name]
    conversation = CONVERSATIONS[name]
    between = day(conversation["between"])
    assert first_turn(rule, tenant, ids, conversation["now"], valid_at=between) == conversation["old"]


@pytest.mark.parametrize("name", CONVERSATIONS)
def test_a_question_naming_a_time_before_the_change_finds_the_old_one_first(conversations, name) -> None:  # type: ignore[no-untyped-def]
    rule, _, written = conversations
    tenant, ids = written[name]
    conversation = CONVERSATIONS[name]
    assert first_turn(rule, tenant, ids, conversation["then"]) == conversation["old"]


def test_without_the_rule_the_oldest_statement_sharing_the_question_s_words_came_first(conversations) -> None:  # type: ignore[no-untyped-def]
    """The cause: the first statement is worded like the question (the tags route finds "live",
    写 代码 in it) and the later one is worded as a change; the decay of events alone moves them
    too little to matter."""
    _, baseline, written = conversations
    for name in ("residence", "编辑器"):
        tenant, ids = written[name]
        assert first_turn(baseline, tenant, ids, CONVERSATIONS[name]["now"]) == CONVERSATIONS[name]["old"]


def test_the_trace_names_the_latest_turn_on_the_matter(conversations) -> None:  # type: ignore[no-untyped-def]
    rule, _, written = conversations
    tenant, ids = written["job"]
    result = rule.search(tenant, rule.query(CONVERSATIONS["job"]["now"], explain=True))
    decay = {card.card_id: (card.explain or {}).get("decay", {}) for card in result.results}
    assert decay[ids[2]]["conversation"] == "the latest turn on the matter"
    assert decay[ids[0]]["days"] == pytest.approx((day("2026-04-28") - day("2026-01-15")).days)


def test_a_question_for_the_user_s_current_value_keeps_the_latest_turn_first(conversations) -> None:  # type: ignore[no-untyped-def]
    rule, _, written = conversations
    tenant, ids = written["residence"]
    latest = CONVERSATIONS["residence"]["latest"]
    assert first_turn(rule, tenant, ids, "where does the user live now?") == latest


@pytest.mark.parametrize(("name", "text"), [(name, text) for name, record in RECORDS.items()
                                            for text in record["questions"]])
def test_an_old_turn_answering_what_was_done_is_not_pushed_below_newer(conversations, name, text) -> None:  # type: ignore[no-untyped-def]
    rule, _, written = conversations
    tenant, ids = written[name]
    assert first_turn(rule, tenant, ids, text) == 0


def test_the_explanation_says_what_the_question_was_taken_for(conversations) -> None:  # type: ignore[no-untyped-def]
    rule, _, written = conversations
    tenant, ids = written["orchard"]
    result = rule.search(tenant, rule.query(RECORDS["orchard"]["questions"][0], explain=True))
    old = next(card.explain or {} for card in result.results if card.card_id == ids[0])
    assert old["question"] == {"asks": "what was said or done", "sign": "did"}
    assert old["decay"]["factor"] == 1.0
    now = rule.search(tenant, rule.query("where is the apple tree now?", explain=True))
    assert all((card.explain or {})["question"]["asks"] == "a current value" for card in now.results)
