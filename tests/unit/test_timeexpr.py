"""Time expressions in queries → absolute ranges (services.query.timeexpr, DESIGN §2 rule 9).

Every expected range below was worked out by hand from a calendar, not produced by the code.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.errors import InvalidCommandError
from services.query.timeexpr import AmbiguousTimeError, TimeRange, find_ranges, resolve

TAIPEI = ZoneInfo("Asia/Taipei")
NEW_YORK = ZoneInfo("America/New_York")
CLOCKS = {
    "wed": datetime(2026, 11, 25, 10, 0, tzinfo=TAIPEI),     # Wednesday; week = Mon 11-23 … Sun 11-29
    "thu": datetime(2026, 11, 26, 9, 0, tzinfo=TAIPEI),      # Thursday, same week
    "sat": datetime(2026, 11, 28, 15, 0, tzinfo=TAIPEI),     # Saturday, same week
    "sun": datetime(2026, 11, 29, 9, 0, tzinfo=NEW_YORK),    # Sunday, same week, UTC-05:00
    "jan": datetime(2026, 1, 5, 8, 0, tzinfo=TAIPEI),        # Monday; year wrap: last week starts 2025-12-29
}

# (clock, expression, first day, day after the last): [first 00:00, end 00:00) in the clock's zone.
GOLDEN: list[tuple[str, str, str, str]] = [
    # days
    ("wed", "今天", "2026-11-25", "2026-11-26"),
    ("wed", "今日", "2026-11-25", "2026-11-26"),
    ("wed", "today", "2026-11-25", "2026-11-26"),
    ("wed", "Today", "2026-11-25", "2026-11-26"),
    ("wed", "今晚", "2026-11-25", "2026-11-26"),
    ("wed", "昨天", "2026-11-24", "2026-11-25"),
    ("wed", "昨日", "2026-11-24", "2026-11-25"),
    ("wed", "昨晚", "2026-11-24", "2026-11-25"),
    ("wed", "yesterday", "2026-11-24", "2026-11-25"),
    ("wed", "last night", "2026-11-24", "2026-11-25"),
    ("wed", "前天", "2026-11-23", "2026-11-24"),
    ("wed", "the day before yesterday", "2026-11-23", "2026-11-24"),
    ("wed", "大前天", "2026-11-22", "2026-11-23"),
    ("wed", "明天", "2026-11-26", "2026-11-27"),
    ("wed", "tomorrow", "2026-11-26", "2026-11-27"),
    ("wed", "後天", "2026-11-27", "2026-11-28"),
    ("wed", "后天", "2026-11-27", "2026-11-28"),
    ("wed", "the day after tomorrow", "2026-11-27", "2026-11-28"),
    ("sat", "今天", "2026-11-28", "2026-11-29"),
    ("sun", "today", "2026-11-29", "2026-11-30"),
    ("sun", "yesterday", "2026-11-28", "2026-11-29"),
    ("thu", "昨天", "2026-11-25", "2026-11-26"),
    ("jan", "昨天", "2026-01-04", "2026-01-05"),
    # N days ago / from now
    ("wed", "三天前", "2026-11-22", "2026-11-23"),
    ("wed", "3天前", "2026-11-22", "2026-11-23"),
    ("wed", "3 天前", "2026-11-22", "2026-11-23"),
    ("wed", "三天之前", "2026-11-22", "2026-11-23"),
    ("wed", "3 days ago", "2026-11-22", "2026-11-23"),
    ("wed", "three days ago", "2026-11-22", "2026-11-23"),
    ("wed", "a day ago", "2026-11-24", "2026-11-25"),
    ("wed", "兩天前", "2026-11-23", "2026-11-24"),
    ("wed", "两天前", "2026-11-23", "2026-11-24"),
    ("wed", "十天前", "2026-11-15", "2026-11-16"),
    ("wed", "十一天前", "2026-11-14", "2026-11-15"),
    ("wed", "二十天前", "2026-11-05", "2026-11-06"),
    ("wed", "二十五天前", "2026-10-31", "2026-11-01"),
    ("wed", "九十九天前", "2026-08-18", "2026-08-19"),
    ("wed", "99天前", "2026-08-18", "2026-08-19"),
    ("jan", "十天前", "2025-12-26", "2025-12-27"),
    ("wed", "三天後", "2026-11-28", "2026-11-29"),
    ("wed", "三天后", "2026-11-28", "2026-11-29"),
    ("wed", "in 3 days", "2026-11-28", "2026-11-29"),
    # weeks (Monday–Sunday)
    ("wed", "上週", "2026-11-16", "2026-11-23"),
    ("wed", "上周", "2026-11-16", "2026-11-23"),
    ("wed", "上星期", "2026-11-16", "2026-11-23"),
    ("wed", "上禮拜", "2026-11-16", "2026-11-23"),
    ("wed", "上礼拜", "2026-11-16", "2026-11-23"),
    ("wed", "上個星期", "2026-11-16", "2026-11-23"),
    ("wed", "last week", "2026-11-16", "2026-11-23"),
    ("wed", "這週", "2026-11-23", "2026-11-30"),
    ("wed", "这周", "2026-11-23", "2026-11-30"),
    ("wed", "本週", "2026-11-23", "2026-11-30"),
    ("wed", "this week", "2026-11-23", "2026-11-30"),
    ("wed", "下週", "2026-11-30", "2026-12-07"),
    ("wed", "下周", "2026-11-30", "2026-12-07"),
    ("wed", "next week", "2026-11-30", "2026-12-07"),
    ("wed", "上上週", "2026-11-09", "2026-11-16"),
    ("sat", "上週", "2026-11-16", "2026-11-23"),
    ("sun", "這週", "2026-11-23", "2026-11-30"),
    ("sun", "下週", "2026-11-30", "2026-12-07"),
    ("jan", "上週", "2025-12-29", "2026-01-05"),
    ("jan", "last week", "2025-12-29", "2026-01-05"),
    # weekdays of a named week: "last Wednesday" = Wednesday of last week
    ("wed", "上週三", "2026-11-18", "2026-11-19"),
    ("wed", "上周三", "2026-11-18", "2026-11-19"),
    ("wed", "上星期三", "2026-11-18", "2026-11-19"),
    ("wed", "上禮拜三", "2026-11-18", "2026-11-19"),
    ("wed", "上礼拜三", "2026-11-18", "2026-11-19"),
    ("wed", "last Wednesday", "2026-11-18", "2026-11-19"),
    ("wed", "Wednesday of last week", "2026-11-18", "2026-11-19"),
    ("thu", "上週三", "2026-11-18", "2026-11-19"),           # 8 days ago, not yesterday
    ("thu", "last Wednesday", "2026-11-18", "2026-11-19"),
    ("wed", "上週一", "2026-11-16", "2026-11-17"),
    ("wed", "上週日", "2026-11-22", "2026-11-23"),
    ("wed", "上星期天", "2026-11-22", "2026-11-23"),
    ("wed", "這週三", "2026-11-25", "2026-11-26"),
    ("wed", "这周三", "2026-11-25", "2026-11-26"),
    ("wed", "this Wednesday", "2026-11-25", "2026-11-26"),
    ("thu", "這週三", "2026-11-25", "2026-11-26"),
    ("wed", "這週五", "2026-11-27", "2026-11-28"),
    ("wed", "下週三", "2026-12-02", "2026-12-03"),
    ("wed", "下周三", "2026-12-02", "2026-12-03"),
    ("wed", "next Wednesday", "2026-12-02", "2026-12-03"),
    ("sat", "上週六", "2026-11-21", "2026-11-22"),
    ("sat", "last Saturday", "2026-11-21", "2026-11-22"),
    ("sat", "這週六", "2026-11-28", "2026-11-29"),
    ("sun", "上週日", "2026-11-22", "2026-11-23"),
    ("sun", "this Sunday", "2026-11-29", "2026-11-30"),
    ("sun", "next Monday", "2026-11-30", "2026-12-01"),
    ("jan", "上週三", "2025-12-31", "2026-01-01"),
    # weekends
    ("wed", "這週末", "2026-11-28", "2026-11-30"),
    ("wed", "这周末", "2026-11-28", "2026-11-30"),
    ("wed", "本週末", "2026-11-28", "2026-11-30"),
    ("wed", "這個週末", "2026-11-28", "2026-11-30"),
    ("wed", "this weekend", "2026-11-28", "2026-11-30"),
    ("wed", "上週末", "2026-11-21", "2026-11-23"),
    ("wed", "last weekend", "2026-11-21", "2026-11-23"),
    ("wed", "下週末", "2026-12-05", "2026-12-07"),
    ("wed", "next weekend", "2026-12-05", "2026-12-07"),
    ("sat", "這週末", "2026-11-28", "2026-11-30"),            # today and tomorrow
    ("sat", "this weekend", "2026-11-28", "2026-11-30"),
    ("sat", "上週末", "2026-11-21", "2026-11-23"),
    ("sat", "下周末", "2026-12-05", "2026-12-07"),
    ("sun", "this weekend", "2026-11-28", "2026-11-30"),      # yesterday and today
    ("sun", "本周末", "2026-11-28", "2026-11-30"),
    ("sun", "last weekend", "2026-11-21", "2026-11-23"),
    ("sun", "next weekend", "2026-12-05", "2026-12-07"),
    ("jan", "這週末", "2026-01-10", "2026-01-12"),
    # months
    ("wed", "上個月", "2026-10-01", "2026-11-01"),
    ("wed", "上个月", "2026-10-01", "2026-11-01"),
    ("wed", "上月", "2026-10-01", "2026-11-01"),
    ("wed", "last month", "2026-10-01", "2026-11-01"),
    ("wed", "這個月", "2026-11-01", "2026-12-01"),
    ("wed", "这个月", "2026-11-01", "2026-12-01"),
    ("wed", "本月", "2026-11-01", "2026-12-01"),
    ("wed", "this month", "2026-11-01", "2026-12-01"),
    ("wed", "下個月", "2026-12-01", "2027-01-01"),
    ("wed", "下个月", "2026-12-01", "2027-01-01"),
    ("wed", "next month", "2026-12-01", "2027-01-01"),
    ("sun", "上個月", "2026-10-01", "2026-11-01"),
    ("jan", "上個月", "2025-12-01", "2026-01-01"),
    ("jan", "上个月", "2025-12-01", "2026-01-01"),
    ("jan", "last month", "2025-12-01", "2026-01-01"),
    ("jan", "上上個月", "2025-11-01", "2025-12-01"),
    ("jan", "下個月", "2026-02-01", "2026-03-01"),
    # named months: this year's if started, else last year's
    ("wed", "四月", "2026-04-01", "2026-05-01"),
    ("wed", "四月時", "2026-04-01", "2026-05-01"),
    ("wed", "四月时", "2026-04-01", "2026-05-01"),
    ("wed", "四月的時候", "2026-04-01", "2026-05-01"),
    ("wed", "4月", "2026-04-01", "2026-05-01"),
    ("wed", "in April", "2026-04-01", "2026-05-01"),
    ("wed", "April", "2026-04-01", "2026-05-01"),
    ("wed", "十一月", "2026-11-01", "2026-12-01"),           # the current month has started
    ("wed", "十二月", "2025-12-01", "2026-01-01"),           # not yet: last year's
    ("wed", "in December", "2025-12-01", "2026-01-01"),
    ("jan", "四月", "2025-04-01", "2025-05-01"),
    ("jan", "in April", "2025-04-01", "2025-05-01"),
    ("jan", "一月", "2026-01-01", "2026-02-01"),
    ("wed", "去年四月", "2025-04-01", "2025-05-01"),
    ("wed", "今年十二月", "2026-12-01", "2027-01-01"),
    ("wed", "2025年12月", "2025-12-01", "2026-01-01"),
    ("wed", "April 2025", "2025-04-01", "2025-05-01"),
    # dates: most recent past occurrence without a year, exact with one
    ("wed", "10月1日", "2026-10-01", "2026-10-02"),
    ("wed", "10月1號", "2026-10-01", "2026-10-02"),
    ("wed", "10月1号", "2026-10-01", "2026-10-02"),
    ("wed", "十月一日", "2026-10-01", "2026-10-02"),
    ("wed", "11月25日", "2026-11-25", "2026-11-26"),         # today counts
    ("wed", "11月26日", "2025-11-26", "2025-11-27"),         # tomorrow has not come: last year's
    ("wed", "12月25日", "2025-12-25", "2025-12-26"),
    ("wed", "十二月二十五日", "2025-12-25", "2025-12-26"),
    ("jan", "12月25日", "2025-12-25", "2025-12-26"),
    ("jan", "1月5日", "2026-01-05", "2026-01-06"),
    ("wed", "2月29日", "2024-02-29", "2024-03-01"),          # 2026 and 2025 have none
    ("wed", "2026年5月7日", "2026-05-07", "2026-05-08"),
    ("wed", "2027年1月1日", "2027-01-01", "2027-01-02"),     # an explicit year may be in the future
    ("wed", "2026-05-07", "2026-05-07", "2026-05-08"),
    ("wed", "2026/05/07", "2026-05-07", "2026-05-08"),
    ("wed", "May 7", "2026-05-07", "2026-05-08"),
    ("wed", "May 7th", "2026-05-07", "2026-05-08"),
    ("wed", "7 May", "2026-05-07", "2026-05-08"),
    ("wed", "7th of May", "2026-05-07", "2026-05-08"),
    ("wed", "on May 7", "2026-05-07", "2026-05-08"),
    ("wed", "May 7, 2026", "2026-05-07", "2026-05-08"),
    ("wed", "Dec 25", "2025-12-25", "2025-12-26"),
    ("jan", "May 7", "2025-05-07", "2025-05-08"),
    # years
    ("wed", "去年", "2025-01-01", "2026-01-01"),
    ("wed", "last year", "2025-01-01", "2026-01-01"),
    ("wed", "今年", "2026-01-01", "2027-01-01"),
    ("wed", "this year", "2026-01-01", "2027-01-01"),
    ("wed", "前年", "2024-01-01", "2025-01-01"),
    ("wed", "2025年", "2025-01-01", "2026-01-01"),
    ("jan", "去年", "2025-01-01", "2026-01-01"),
]


def _midnight(day: str) -> datetime:
    return datetime.combine(date.fromisoformat(day), datetime.min.time())


@pytest.mark.parametrize(("clock", "expression", "first", "end"), GOLDEN,
                         ids=[f"{c}-{e}" for c, e, _, _ in GOLDEN])
def test_golden_ranges(clock: str, expression: str, first: str, end: str) -> None:
    now = CLOCKS[clock]
    got = resolve(expression, now)
    assert got.start.replace(tzinfo=None) == _midnight(first)
    assert got.end.replace(tzinfo=None) == _midnight(end)
    assert got.start.tzinfo is now.tzinfo and got.end.tzinfo is now.tzinfo
    assert got.expression == expression


# (clock, expression, first day): the range runs from that day's midnight to `now` itself.
SINCE: list[tuple[str, str, str]] = [
    ("wed", "上個月到現在", "2026-10-01"),
    ("wed", "上个月到现在", "2026-10-01"),
    ("wed", "從上個月到現在", "2026-10-01"),
    ("wed", "上個月以來", "2026-10-01"),
    ("wed", "since last month", "2026-10-01"),
    ("wed", "上週至今", "2026-11-16"),
    ("wed", "since yesterday", "2026-11-24"),
    ("wed", "四月到現在", "2026-04-01"),
    ("jan", "上個月到現在", "2025-12-01"),
    ("jan", "since last month", "2025-12-01"),
    ("sun", "since last month", "2026-10-01"),
]


@pytest.mark.parametrize(("clock", "expression", "first"), SINCE, ids=[f"{c}-{e}" for c, e, _ in SINCE])
def test_since_runs_to_now(clock: str, expression: str, first: str) -> None:
    now = CLOCKS[clock]
    got = resolve(expression, now)
    assert got.start.replace(tzinfo=None) == _midnight(first)
    assert got.start.tzinfo is now.tzinfo
    assert got.end == now and got.end.utcoffset() == now.utcoffset()


REFUSED: list[tuple[str, str]] = [
    ("wed", "週三"), ("wed", "周三"), ("wed", "星期三"), ("wed", "禮拜三"), ("wed", "礼拜三"),
    ("wed", "星期天"), ("sat", "週六"), ("wed", "Wednesday"), ("wed", "on Wednesday"), ("thu", "wednesday"),
    ("wed", "週末"), ("wed", "周末"), ("wed", "over the weekend"),
    ("wed", "最近"), ("wed", "之前"), ("wed", "前幾天"), ("wed", "前几天"), ("wed", "幾天前"),
    ("wed", "前陣子"),
    ("wed", "recently"), ("wed", "lately"), ("wed", "a while ago"), ("wed", "the other day"),
    ("wed", "a few days ago"),
    ("wed", "2月30日"), ("wed", "4月31日"), ("wed", "13月"), ("wed", "2026年2月29日"), ("wed", "2026-02-30"),
    ("wed", "February 30"), ("jan", "2月30日"),
    ("wed", "since tomorrow"), ("wed", "下個月到現在"),
]


@pytest.mark.parametrize(("clock", "expression"), REFUSED, ids=[f"{c}-{e}" for c, e in REFUSED])
def test_ambiguous_expressions_are_refused(clock: str, expression: str) -> None:
    with pytest.raises(AmbiguousTimeError) as raised:
        resolve(expression, CLOCKS[clock])
    assert raised.value.reason
    assert raised.value.expression in expression
    assert isinstance(raised.value, InvalidCommandError)


@pytest.mark.parametrize(
    "expression", ["", "hello", "the weather", "牛肉湯", "上週三和上個月", "today and tomorrow"],
)
def test_what_is_not_one_expression_is_invalid_but_not_ambiguous(expression: str) -> None:
    with pytest.raises(InvalidCommandError) as raised:
        resolve(expression, CLOCKS["wed"])
    assert not isinstance(raised.value, AmbiguousTimeError)


def test_a_naive_clock_is_refused() -> None:
    with pytest.raises(InvalidCommandError):
        resolve("今天", datetime(2026, 11, 25, 10, 0))
    with pytest.raises(InvalidCommandError):
        find_ranges("what did I do today", datetime(2026, 11, 25, 10, 0))


def test_ranges_are_in_the_callers_zone_across_a_dst_change() -> None:
    now = datetime(2026, 11, 2, 12, 0, tzinfo=NEW_YORK)           # DST ended 2026-11-01 02:00
    got = resolve("yesterday", now)
    assert got.start.isoformat() == "2026-11-01T00:00:00-04:00"
    assert got.end.isoformat() == "2026-11-02T00:00:00-05:00"
    assert got.end.astimezone(UTC) - got.start.astimezone(UTC) == timedelta(hours=25)
    utc_now = now.astimezone(UTC)                            # same instant, another zone
    assert resolve("yesterday", utc_now).start == datetime(2026, 11, 1, tzinfo=UTC)


def _days(ranges: list[TimeRange]) -> list[tuple[str, str]]:
    return [(r.start.date().isoformat(), r.end.date().isoformat()) for r in ranges]


@pytest.mark.parametrize(("clock", "text", "expected"), [
    ("wed", "我上週三做了什麼？", [("2026-11-18", "2026-11-19")]),
    ("wed", "我上周三做了什么？", [("2026-11-18", "2026-11-19")]),
    ("thu", "我上禮拜三跟誰開會", [("2026-11-18", "2026-11-19")]),
    ("wed", "what did I do last week?", [("2026-11-16", "2026-11-23")]),
    ("wed", "What did I do last Wednesday?", [("2026-11-18", "2026-11-19")]),
    ("wed", "昨天和前天我去了哪裡", [("2026-11-24", "2026-11-25"), ("2026-11-23", "2026-11-24")]),
    ("wed", "昨天和前天我去了哪里", [("2026-11-24", "2026-11-25"), ("2026-11-23", "2026-11-24")]),
    ("sat", "這週末有什麼安排", [("2026-11-28", "2026-11-30")]),
    ("sat", "这周末有什么安排", [("2026-11-28", "2026-11-30")]),
    ("sun", "any plans for this weekend?", [("2026-11-28", "2026-11-30")]),
    ("wed", "四月時我住在哪裡", [("2026-04-01", "2026-05-01")]),
    ("jan", "四月时我住在哪里", [("2025-04-01", "2025-05-01")]),
    ("wed", "where was I on May 7 and on 2026-10-01?",
     [("2026-05-07", "2026-05-08"), ("2026-10-01", "2026-10-02")]),
    ("wed", "我三天前吃了什麼", [("2026-11-22", "2026-11-23")]),
    ("wed", "what did I eat three days ago", [("2026-11-22", "2026-11-23")]),
    ("wed", "Today I need 3天前的會議紀錄", [("2026-11-25", "2026-11-26"), ("2026-11-22", "2026-11-23")]),
    ("jan", "上個月的帳單", [("2025-12-01", "2026-01-01")]),
    ("wed", "2026年5月7日那天下雨嗎", [("2026-05-07", "2026-05-08")]),
    ("wed", "tell me about the project", []),
    ("wed", "我喜歡吃牛肉湯", []),
    ("wed", "I met the mayor of Maryland", []),
    ("wed", "my weekends are free", []),
])
def test_find_ranges_in_sentences(clock: str, text: str, expected: list[tuple[str, str]]) -> None:
    assert _days(find_ranges(text, CLOCKS[clock])) == expected


def test_find_ranges_keeps_the_expression_and_since_runs_to_now() -> None:
    now = CLOCKS["wed"]
    zh = find_ranges("上個月到現在我讀了哪些書", now)
    en = find_ranges("What have I read since last month?", now)
    assert [r.expression for r in zh] == ["上個月到現在"]
    assert [r.expression for r in en] == ["since last month"]
    assert zh[0] == TimeRange(datetime(2026, 10, 1, tzinfo=TAIPEI), now, "上個月到現在")
    assert (en[0].start, en[0].end) == (zh[0].start, zh[0].end)


@pytest.mark.parametrize("text", [
    "我週三做了什麼", "我周三做了什么", "what did I do on Wednesday", "最近在忙什麼",
    "what did I do recently?", "我2月30日做了什麼", "我們週末去哪", "what happened over the weekend",
])
def test_an_ambiguous_expression_in_a_sentence_is_refused(text: str) -> None:
    with pytest.raises(AmbiguousTimeError):
        find_ranges(text, CLOCKS["wed"])


clocks = st.builds(
    lambda moment, minutes: moment.replace(tzinfo=timezone(timedelta(minutes=minutes))),
    st.datetimes(min_value=datetime(1990, 3, 1), max_value=datetime(2090, 12, 31)),
    st.integers(min_value=-12 * 60, max_value=14 * 60),
)


@given(clocks)
def test_the_conventions_hold_on_any_clock(now: datetime) -> None:
    today, this_week, last_week = resolve("今天", now), resolve("這週", now), resolve("last week", now)
    assert today.start <= now < today.end and this_week.start <= now < this_week.end
    assert this_week.start.weekday() == 0 and this_week.end - this_week.start == timedelta(days=7)
    assert last_week.end == this_week.start
    wednesday = resolve("上週三", now)
    assert wednesday.start.weekday() == 2 and last_week.start <= wednesday.start < last_week.end
    weekend = resolve("this weekend", now)
    assert weekend.start.weekday() == 5 and weekend.end == this_week.end
    assert resolve("上個月", now).end == resolve("本月", now).start <= now
    april = resolve("四月", now)
    assert april.start.month == 4 and april.start <= now and now - april.start < timedelta(days=366)
    since = resolve("since last month", now)
    assert (since.start, since.end) == (resolve("last month", now).start, now)
