"""The time of an extracted card (DESIGN rule 9): the model's hint, checked against the turn."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from services.ingest.hints import TimeDecision, decide_time, parse_hint

TAIPEI = ZoneInfo("Asia/Taipei")
NEW_YORK = ZoneInfo("America/New_York")
SKEW = timedelta(minutes=5)
#: Just past a local midnight: in UTC it is still the day before.
SAID = datetime(2026, 3, 2, 0, 30, tzinfo=TAIPEI)


def local(*parts: int, zone: ZoneInfo = TAIPEI) -> datetime:
    return datetime(*parts, tzinfo=zone)  # type: ignore[misc]


def decide(hint: str | None, text: str = "我去了台北", said_at: datetime = SAID,
           zone: ZoneInfo = TAIPEI) -> TimeDecision:
    return decide_time(hint, text, said_at, zone, SKEW)


def test_an_absolute_hint_stands_when_the_turn_names_no_time() -> None:
    decision = decide("2026-02-14T19:00:00+08:00")
    assert decision == TimeDecision(local(2026, 2, 14, 19), "hint", decision.note)
    assert decide("2026-02-14T11:00:00Z").occurred_at == local(2026, 2, 14, 19)


def test_a_hint_without_an_offset_is_local_time_in_the_users_zone() -> None:
    decision = decide("2026-02-14T19:00:00")
    assert (decision.occurred_at, decision.source) == (local(2026, 2, 14, 19), "hint")
    assert "no UTC offset" in decision.note and "Asia/Taipei" in decision.note
    date_only = decide("2026-02-14")
    assert date_only.occurred_at == local(2026, 2, 14)
    assert "local midnight" in date_only.note


@pytest.mark.parametrize("hint", ["yesterday", "今天", "昨天"])
def test_a_relative_word_is_no_hint(hint: str) -> None:
    decision = decide(hint)
    assert (decision.occurred_at, decision.source) == (SAID, "turn")
    assert "a relative word" in decision.note and "the turn's own time" in decision.note


@pytest.mark.parametrize("hint", ["soon", "2026-13-45", "", "   "])
def test_garbage_or_no_hint_falls_back_to_the_turn(hint: str) -> None:
    assert decide(hint).source == "turn"
    assert decide(None).note.startswith("no occurred_at_hint")
    assert "not an ISO 8601" in decide("soon").note
    assert "no such date" in decide("2026-13-45").note


def test_a_hint_in_the_future_beyond_the_tolerance_is_refused() -> None:
    future = decide((SAID + timedelta(days=2)).isoformat())
    assert (future.occurred_at, future.source) == (SAID, "turn")
    assert "lies after the turn" in future.note
    within = decide((SAID + timedelta(minutes=2)).isoformat())
    assert within.source == "hint"


def test_yesterday_across_a_local_midnight_is_the_local_day_before() -> None:
    # said 2026-03-02 00:30 in Taipei = 2026-03-01 16:30 UTC: 昨天 is 03-01 local, not 02-28.
    assert SAID.astimezone(ZoneInfo("UTC")).day == 1
    right = decide("2026-03-01T20:00:00+08:00", text="我昨天去了台北")
    assert right.source == "hint" and "within the turn's '昨天'" in right.note
    utc_day = decide("2026-02-28T12:00:00+08:00", text="我昨天去了台北")  # a model counting in UTC
    assert (utc_day.occurred_at, utc_day.source) == (local(2026, 3, 1), "resolver")
    assert decide("2026-03-01", text="我昨天去了台北").occurred_at == local(2026, 3, 1)


def test_english_yesterday_in_new_york() -> None:
    said = local(2026, 3, 2, 0, 30, zone=NEW_YORK)
    wrong = decide("2026-03-02T10:00:00Z", text="I moved yesterday", said_at=said, zone=NEW_YORK)
    assert (wrong.occurred_at, wrong.source) == (local(2026, 3, 1, zone=NEW_YORK), "resolver")


def test_a_hint_that_contradicts_three_days_ago_loses_to_the_resolver() -> None:
    decision = decide("2026-02-20T10:00:00+08:00", text="我三天前搬到高雄")
    assert (decision.occurred_at, decision.source) == (local(2026, 2, 27), "resolver")
    assert "disagrees with the turn's '三天前'" in decision.note and "resolver wins" in decision.note
    agrees = decide("2026-02-27T15:00:00+08:00", text="我三天前搬到高雄")
    assert (agrees.occurred_at, agrees.source) == (local(2026, 2, 27, 15), "hint")


def test_a_relative_or_future_hint_with_a_resolvable_turn_takes_the_resolver() -> None:
    assert decide("yesterday", text="我昨天去了台北").occurred_at == local(2026, 3, 1)
    future = decide("2026-06-01T00:00:00+08:00", text="我昨天去了台北")
    assert (future.occurred_at, future.source) == (local(2026, 3, 1), "resolver")


def test_no_hint_keeps_the_turns_time_even_with_a_time_word() -> None:
    decision = decide(None, text="我昨天說過我喜歡咖啡")
    assert (decision.occurred_at, decision.source) == (SAID, "turn")


def test_a_resolver_range_in_the_future_gives_the_turns_time() -> None:
    decision = decide("2026-03-03T09:00:00+08:00", text="我明天要去台北")
    assert (decision.occurred_at, decision.source) == (SAID, "turn")
    assert "lies in the future" in decision.note


def test_an_ambiguous_turn_keeps_a_valid_hint_or_the_turns_time() -> None:
    kept = decide("2026-02-20T10:00:00+08:00", text="我最近搬家了")
    assert (kept.occurred_at, kept.source) == (local(2026, 2, 20, 10), "hint")
    assert "ambiguous" in kept.note
    fallback = decide("recently", text="我最近搬家了")
    assert (fallback.occurred_at, fallback.source) == (SAID, "turn")
    assert "ambiguous" in fallback.note


def test_several_times_in_a_turn() -> None:
    text = "我昨天在台北，今天回到高雄"
    assert decide("2026-03-02T00:10:00+08:00", text=text).source == "hint"
    assert decide("2026-03-01T09:00:00+08:00", text=text).source == "hint"
    neither = decide("2026-02-10T09:00:00+08:00", text=text)
    assert (neither.occurred_at, neither.source) == (SAID, "turn")
    assert "not clear" in neither.note


def test_a_backfilled_turn_is_anchored_to_its_own_time() -> None:
    said = local(2025, 1, 10, 21)
    decision = decide("2026-03-01T09:00:00+08:00", text="昨天開會", said_at=said)
    assert (decision.occurred_at, decision.source) == (local(2025, 1, 9), "resolver")
    assert decide("2025-01-09T14:00:00+08:00", text="昨天開會", said_at=said).source == "hint"


def test_said_at_must_be_aware() -> None:
    with pytest.raises(ValueError, match="aware"):
        decide_time(None, "", datetime(2026, 3, 2), TAIPEI, SKEW)


def test_parse_hint_reads_utc_z() -> None:
    parsed, note = parse_hint("2026-03-01T00:00:00Z", TAIPEI, SAID)
    assert parsed == local(2026, 3, 1, 8) and note == "hint 2026-03-01T00:00:00Z"


def test_a_decision_survives_its_stored_form() -> None:
    decision = decide("2026-02-20T10:00:00+08:00", text="我三天前搬到高雄")
    assert TimeDecision.from_stored(decision.stored()) == decision
