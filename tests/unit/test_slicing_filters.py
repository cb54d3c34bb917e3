"""Slices checked and turned into filters without a database: what each field becomes, what is
refused (naming the field), the cursor's round trip, and the SQL each filter picks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import uuid4
from zoneinfo import ZoneInfo

import pytest
from psycopg import sql

from domain.errors import InvalidCommandError, InvalidKindError, InvalidTextError, InvalidTimeError
from projections.predicates import CURRENT, VERSION_AS_OF
from projections.slicing_sql import FILTERS, GROUP_KEYS, counting, listing
from services.query.readmodels import CardRecord
from services.query.slicing import CardSlice, decode_cursor, encode_cursor, plan
from services.query.timeexpr import AmbiguousTimeError

NOW = datetime(2026, 6, 15, 12, tzinfo=UTC)
SCHEMA = sql.Identifier("palimpsest_read")


def card(recorded_at: datetime) -> CardRecord:
    return CardRecord(card_id=uuid4(), aggregate_id=uuid4(), kind="state", memory_type="fact",
                      scope="personal", subject="user", label="address", content="Taipei",
                      title=None, valid_from=recorded_at, valid_to=None, occurred_at=None,
                      recorded_at=recorded_at, retracted_at=None, status=None, source="user_stated",
                      superseded=False)


def test_an_empty_slice_filters_nothing() -> None:
    filters, params = plan(CardSlice(), NOW)
    assert filters == [] and params == {"edge": None, "known_at": None, "time_zone": "UTC"}
    assert plan(CardSlice(kinds=[], tags=[]), NOW)[0] == [], "an empty list filters nothing"


def test_each_field_becomes_its_filter() -> None:
    target = uuid4()
    filters, params = plan(CardSlice(
        kinds=["knowledge"], sources=["agent_inferred"], confidence_below=0.6,
        recorded_after=NOW - timedelta(days=3), valid_to=NOW, related_to=target, edge="contradicts",
        tags=[" JWT ", "資料庫"]), NOW)
    assert set(filters) == {"kinds", "sources", "tags", "valid", "recorded_after",
                            "confidence_below", "related_to"} and len(filters) == 7
    assert params["tags"] == ["json web token", "资料库"], "normalised as stored"
    assert params["valid_from"] is None and params["valid_to"] == NOW
    assert params["related_to"] == target and params["edge"] == "contradicts"
    assert set(filters) <= set(FILTERS)


def test_a_concept_is_matched_by_its_normalised_tag() -> None:
    filters, params = plan(CardSlice(related_concept="JWT", edge="contradicts"), NOW)
    assert filters == ["related_concept"], "the edge narrows the concept's links"
    assert params["concept_tag"] == "json web token" and params["related_concept"] == "JWT"
    assert plan(CardSlice(edge="affects"), NOW)[0] == ["edge"], "alone: cards with such an edge"


def test_a_time_expression_is_resolved_in_the_slices_zone() -> None:
    filters, params = plan(CardSlice(kinds=["knowledge"], recorded_during="this month"), NOW)
    assert filters == ["kinds", "recorded_during"]
    assert (params["recorded_from"], params["recorded_until"]) == (
        datetime(2026, 6, 1, tzinfo=UTC), datetime(2026, 7, 1, tzinfo=UTC))
    late = datetime(2026, 6, 30, 20, tzinfo=UTC)  # already July in Taipei
    _, params = plan(CardSlice(occurred_during="上個月", time_zone="Asia/Taipei"), late)
    taipei = ZoneInfo("Asia/Taipei")
    assert (params["occurred_from"], params["occurred_until"]) == (
        datetime(2026, 6, 1, tzinfo=taipei), datetime(2026, 7, 1, tzinfo=taipei))
    assert params["time_zone"] == "Asia/Taipei"


def test_as_of_fills_the_other_timeline() -> None:
    then = NOW - timedelta(days=30)
    _, params = plan(CardSlice(as_of={"valid_at": then}), NOW)
    assert (params["valid_at"], params["known_at"]) == (then, NOW), "known now"
    _, params = plan(CardSlice(as_of={"known_at": then}), NOW)
    assert (params["valid_at"], params["known_at"]) == (then, then), "valid then"


@pytest.mark.parametrize(("fields", "error", "field"), [
    ({"kinds": ["state", "fact"]}, InvalidKindError, "kinds[1]"),
    ({"memory_types": ["memo"]}, InvalidKindError, "memory_types[0]"),
    ({"scopes": ["team"]}, InvalidKindError, "scopes[0]"),
    ({"sources": ["guessed"]}, InvalidKindError, "sources[0]"),
    ({"edge": "likes"}, InvalidKindError, "edge"),
    ({"group_by": "colour"}, InvalidCommandError, "group_by"),
    ({"limit": 0}, InvalidCommandError, "limit"),
    ({"limit": 501}, InvalidCommandError, "limit"),
    ({"confidence_below": 1.5}, InvalidCommandError, "confidence_below"),
    ({"recorded_after": datetime(2026, 6, 1)}, InvalidTimeError, "recorded_after"),
    ({"as_of": {"valid_at": datetime(2026, 6, 1)}}, InvalidTimeError, "as_of.valid_at"),
    ({"as_of": {}}, InvalidTimeError, "as_of"),
    ({"valid_from": NOW, "valid_to": NOW}, InvalidTimeError, "valid_to"),
    ({"occurred_after": NOW, "occurred_before": NOW - timedelta(1)}, InvalidTimeError,
     "occurred_before"),
    ({"agent_ids": ["ok", "bad\x00"]}, InvalidTextError, "agent_ids[1]"),
    ({"tags": ["  "]}, InvalidTextError, "tags[0]"),
    ({"related_concept": "#"}, InvalidCommandError, "related_concept"),
    ({"cursor": "bm90IGpzb24"}, InvalidCommandError, "cursor"),
    ({"recorded_during": "recently"}, AmbiguousTimeError, "recorded_during"),
    ({"occurred_during": "the blue moon"}, InvalidCommandError, "occurred_during"),
    ({"time_zone": "Mars/Olympus"}, InvalidCommandError, "time_zone"),
])
def test_a_bad_slice_is_refused_naming_the_field(fields: dict[str, object], error: type,
                                                 field: str) -> None:
    with pytest.raises(error) as raised:
        plan(CardSlice(**fields), NOW)  # type: ignore[arg-type]
    assert str(raised.value).startswith(field), str(raised.value)


def test_an_unknown_field_is_refused() -> None:
    with pytest.raises(ValueError, match="extra"):
        CardSlice(kind=["state"])  # type: ignore[call-arg]


def test_a_cursor_round_trips_within_its_slice() -> None:
    knowledge = CardSlice(kinds=["knowledge"], limit=10)
    last = card(NOW - timedelta(microseconds=7))
    cursor = encode_cursor(knowledge, last)
    assert "=" not in cursor and cursor.isascii()
    following = knowledge.model_copy(update={"cursor": cursor, "limit": 20})
    assert decode_cursor(following) == (last.recorded_at, last.card_id), "another limit is fine"
    assert plan(following, NOW)[0] == ["kinds", "after"]
    with pytest.raises(InvalidCommandError, match="another slice"):
        plan(CardSlice(kinds=["state"], cursor=cursor), NOW)


def test_each_filter_is_its_own_sql() -> None:
    current = listing(SCHEMA, ["kinds", "related_concept"], as_of=False, include_superseded=False)
    text = current.as_string(None)
    assert CURRENT in text and FILTERS["kinds"] in text and "card_relations" in text
    assert text.endswith("ORDER BY c.recorded_at DESC, c.card_id DESC LIMIT %(limit)s")
    every = listing(SCHEMA, ["valid"], as_of=False, include_superseded=True).as_string(None)
    assert CURRENT not in every.split("FROM", 1)[1] and "c.valid &&" in every
    then = listing(SCHEMA, ["valid"], as_of=True, include_superseded=False).as_string(None)
    assert VERSION_AS_OF in then and "v.valid &&" in then and "v.content AS content" in then


@pytest.mark.parametrize("group_by", [*GROUP_KEYS, None])
def test_every_grouping_has_its_key(group_by: str | None) -> None:
    text = counting(SCHEMA, ["kinds"], as_of=True, include_superseded=False,
                    group_by=group_by).as_string(None)
    assert VERSION_AS_OF in text and FILTERS["kinds"] in text
    if group_by is None:
        assert text.startswith("SELECT true AS whole, NULL::text AS key, count(*) AS n FROM")
        return
    assert f"SELECT {GROUP_KEYS[group_by]} AS key" in text
    assert "GROUP BY GROUPING SETS ((key), ())" in text
    assert ("unnest(c.tags) WITH ORDINALITY" in text) is (group_by == "tag")


def test_a_relation_is_looked_up_once_before_the_cards() -> None:
    text = listing(SCHEMA, ["related_to", "related_concept", "edge"], as_of=False,
                   include_superseded=False).as_string(None)
    preamble, cards = text.split(" SELECT c.card_id, c.aggregate_id", 1)
    for name in ("related_anchors", "related_ends", "related_cards", "concept_anchors",
                 "concept_ends", "concept_cards", "edge_ends", "edge_cards"):
        assert preamble.count(f"{name} (id) AS MATERIALIZED") == 1, name
    assert preamble.startswith("WITH ") and "card_relations" not in cards
    counted = counting(SCHEMA, ["related_to"], as_of=False, include_superseded=False,
                       group_by="agent_id").as_string(None)
    assert counted.startswith("WITH related_anchors (id) AS MATERIALIZED")
