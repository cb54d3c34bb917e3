"""Time expressions in queries → absolute ranges (DESIGN §2 rule 9), in Chinese (Traditional and
Simplified) and English. Pure: no clock of its own, no I/O — the caller passes `now`, timezone-aware,
and every range comes back half-open [start, end) at local midnights in `now`'s zone.

Conventions (day granularity unless stated):
- Weeks run Monday–Sunday. 上週 / last week is the previous Monday–Sunday, 這週 / this week the current
  one, 下週 / next week the following one; 上上週 / 下下週 go two weeks.
- "last Wednesday" = Wednesday of last week (上週三): asked on a Thursday it is still last week's
  Wednesday, 8 days ago, NOT yesterday. 這週三 / "this Wednesday" is the current week's Wednesday even if
  it is past; 下週三 / "next Wednesday" next week's.
- 這週末 / "this weekend" is the Saturday and Sunday of the current week: on a Saturday today and tomorrow,
  on a Sunday yesterday and today. 上週末 / 下週末 move it by one week.
- A month without a year (四月, 四月時, "in April") is this year's if it has started (month <= current
  month), else last year's. A date without a year (10月1日, "May 7", "7 May") is its most recent past
  occurrence: this year's if <= today, else last year's (2月29日 reaches back to the last leap year).
  With a year (2026年5月7日, 2026-05-07, 去年四月, "April 2025") the date is exact, past or future.
- N天前 / "N days ago" is that single day; N天後 / "in N days" likewise.
- "since X" / X到現在 / X以來 runs from the start of X to `now` itself, not to the end of the day.
- Refused with AmbiguousTimeError, never guessed: a bare weekday (週三, "Wednesday") or weekend (週末,
  "over the weekend"), vague words (最近, 之前, 前幾天, recently, "a while ago", "the other day"), impossible
  dates (2月30日), and "since" a time that has not begun. Words this module does not know are not time
  expressions: find_ranges skips them and resolve raises InvalidCommandError.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from domain.errors import InvalidCommandError

__all__ = ["AmbiguousTimeError", "TimeRange", "find_ranges", "resolve", "without_times"]


@dataclass(frozen=True)
class TimeRange:
    """Half-open [start, end), timezone-aware, in the zone of the `now` it was resolved against."""

    start: datetime
    end: datetime
    expression: str


class AmbiguousTimeError(InvalidCommandError):
    """The expression could mean more than one range; the caller must ask, not guess."""

    def __init__(self, expression: str, reason: str) -> None:
        super().__init__(f"ambiguous time expression {expression!r}: {reason}")
        self.expression = expression
        self.reason = reason


Days = tuple[date, date]
Handler = Callable[[re.Match[str], date], Days]

_DAY = timedelta(days=1)
_CN_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "兩": 2, "两": 2, "三": 3, "四": 4, "五": 5,
              "六": 6, "七": 7, "八": 8, "九": 9}
_EN_NUMBERS = {w: i for i, w in enumerate((
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"))}
_EN_NUMBERS |= {"a": 1, "an": 1}
_MONTH_NAMES = ("january", "february", "march", "april", "may", "june", "july", "august", "september",
                "october", "november", "december")
_WEEKDAY_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_CN_WEEKDAYS = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6}
_OFFSETS = {"上上": -2, "上": -1, "這": 0, "这": 0, "本": 0, "下": 1, "下下": 2, "last": -1, "this": 0,
            "next": 1, "前年": -2, "去年": -1, "今年": 0, "明年": 1}
_DAY_WORDS = {"大前天": -3, "前天": -2, "昨天": -1, "昨日": -1, "昨晚": -1, "昨夜": -1, "今天": 0, "今日": 0,
              "今早": 0, "今晚": 0, "明天": 1, "明日": 1, "明早": 1, "明晚": 1, "後天": 2, "后天": 2,
              "大後天": 3, "大后天": 3, "today": 0, "tonight": 0, "this morning": 0, "this afternoon": 0,
              "this evening": 0, "yesterday": -1, "last night": -1, "the day before yesterday": -2,
              "tomorrow": 1, "the day after tomorrow": 2}

_CN_D = "一二兩两三四五六七八九"
NUM = rf"(?P<n>\d{{1,3}}|[{_CN_D}]?十[{_CN_D}]?|[零〇{_CN_D}])"
EN_NUM = rf"(?P<n>\d{{1,3}}|{'|'.join(sorted(_EN_NUMBERS, key=len, reverse=True))})"
CN_MONTH = rf"(?P<mo>\d{{1,2}}|十[一二]?|[{_CN_D}])\s*月份?"
CN_DAY = rf"(?P<d>\d{{1,2}}|[一二三]?十[{_CN_D}]?|[{_CN_D}])\s*[日號号]"
CN_REL = "(?P<rel>上上|上|下下|下|這|这|本)"
CN_WEEK = "(?:個|个)?(?:週|周|星期|禮拜|礼拜)"
MON = "(?P<mon>" + "|".join(_MONTH_NAMES + ("jan", "feb", "mar", "apr", "jun", "jul", "aug", "sept",
                                            "sep", "oct", "nov", "dec")) + r")\.?"
FULL_MON = "(?P<mon>" + "|".join(_MONTH_NAMES) + ")"
WEEKDAY = "(?P<day>" + "|".join(_WEEKDAY_NAMES) + ")"
YEAR = r"(?P<y>\d{4})"
ORD = r"(?P<d>\d{1,2})(?:st|nd|rd|th)?(?!\d)"


def _g(m: re.Match[str], name: str) -> str | None:
    return m.groupdict().get(name)


def _number(text: str) -> int:
    text = text.lower()
    if text.isdigit():
        return int(text)
    if text in _EN_NUMBERS:
        return _EN_NUMBERS[text]
    if "十" not in text:
        return _CN_DIGITS[text]
    tens, _, units = text.partition("十")
    return (_CN_DIGITS[tens] if tens else 1) * 10 + (_CN_DIGITS[units] if units else 0)


def _month_span(year: int, month: int) -> Days:
    nxt = year * 12 + month  # 0-based index of the following month
    return date(year, month, 1), date(nxt // 12, nxt % 12 + 1, 1)


def _days(m: re.Match[str], today: date) -> Days:
    if n := _g(m, "n"):
        offset = _number(n) * (-1 if _g(m, "ago") else 1)
    else:
        offset = _DAY_WORDS[" ".join(m[0].lower().split())]
    day = today + offset * _DAY
    return day, day + _DAY


def _week(m: re.Match[str], today: date) -> Days:
    monday = today - today.weekday() * _DAY + 7 * _OFFSETS[(_g(m, "rel") or "").lower()] * _DAY
    if _g(m, "end"):
        return monday + 5 * _DAY, monday + 7 * _DAY
    if day := _g(m, "day"):
        weekday = _CN_WEEKDAYS[day] if day in _CN_WEEKDAYS else _WEEKDAY_NAMES.index(day.lower())
        return monday + weekday * _DAY, monday + (weekday + 1) * _DAY
    return monday, monday + 7 * _DAY


def _relative_month(m: re.Match[str], today: date) -> Days:
    index = today.year * 12 + today.month - 1 + _OFFSETS[(_g(m, "rel") or "").lower()]
    return _month_span(index // 12, index % 12 + 1)


def _year(m: re.Match[str], today: date) -> Days:
    y = _g(m, "y")
    year = int(y) if y else today.year + _OFFSETS[(_g(m, "rel") or "").lower()]
    return date(year, 1, 1), date(year + 1, 1, 1)


def _calendar(m: re.Match[str], today: date) -> Days:
    """A month or a date, with an exact or relative year, or none (the most recent past occurrence)."""
    mon, mo, y, rel, d = _g(m, "mon"), _g(m, "mo"), _g(m, "y"), _g(m, "rel"), _g(m, "d")
    if mon:
        month = next(i for i, name in enumerate(_MONTH_NAMES, 1) if name.startswith(mon.lower()[:3]))
    else:
        month = _number(mo or "")
    day = _number(d) if d else None
    if y or rel:
        years = [int(y) if y else today.year + _OFFSETS[rel or ""]]
    else:  # eight years back always holds a leap year, so 2月29日 finds one
        years = list(range(today.year, today.year - 9, -1))
    for year in years:
        try:
            first = date(year, month, day or 1)
        except ValueError:
            continue
        if len(years) == 1 or first <= today:
            return (first, first + _DAY) if day else _month_span(year, month)
    raise AmbiguousTimeError(m[0], "no such date on the calendar")


def _refuse(reason: str) -> Handler:
    def handler(m: re.Match[str], today: date) -> Days:
        raise AmbiguousTimeError(m[0], reason)

    return handler


def _alternatives(words: Iterable[str]) -> str:
    return "|".join(sorted(words, key=len, reverse=True)).replace(" ", r"\s+")


def _en(pattern: str) -> str:
    """English words must not sit inside a longer Latin word ("mayor", "weekends")."""
    return rf"(?<![A-Za-z])(?:{pattern})(?![A-Za-z])"


_BARE_WEEKDAY = _refuse("a weekday without last/this/next (上/這/下) could be this week's or last week's")
_RULES: list[tuple[str, Handler]] = [
    (_en(_alternatives(w for w in _DAY_WORDS if w.isascii())), _days),
    (_alternatives(w for w in _DAY_WORDS if not w.isascii()), _days),
    (rf"{NUM}\s*[天日]\s*之?(?:(?P<ago>前)|後|后)", _days),
    (_en(rf"{EN_NUM}\s+days?\s+(?P<ago>ago)"), _days),
    (_en(rf"in\s+{EN_NUM}\s+days?"), _days),
    (rf"{CN_REL}{CN_WEEK}(?:(?P<end>末)|(?P<day>[一二三四五六日天]))?", _week),
    (_en(rf"(?P<rel>last|this|next)\s+(?:(?P<end>weekend)|week|{WEEKDAY})"), _week),
    (_en(rf"{WEEKDAY}\s+(?:of\s+)?(?P<rel>last|this|next)\s+week"), _week),
    (rf"{CN_REL}(?:個|个)?月", _relative_month),
    (_en(r"(?P<rel>last|this|next)\s+month"), _relative_month),
    (rf"(?<!\d){YEAR}\s*年|(?P<rel>前年|去年|今年|明年)", _year),
    (_en(r"(?P<rel>last|this|next)\s+year"), _year),
    (rf"(?:(?:(?<!\d){YEAR}\s*年|(?P<rel>前年|去年|今年|明年))\s*)?{CN_MONTH}(?:\s*{CN_DAY})?(?:的?[時时]候?)?",
     _calendar),
    (rf"(?<!\d){YEAR}(?P<sep>[-/.])(?P<mo>\d{{1,2}})(?P=sep)(?P<d>\d{{1,2}})(?!\d)", _calendar),
    (_en(rf"{MON}\s+{ORD}(?:,?\s+{YEAR}(?!\d))?"), _calendar),
    (_en(rf"{ORD}\s+(?:of\s+)?{MON}(?:,?\s+{YEAR}(?!\d))?"), _calendar),
    (_en(rf"(?:(?:in|during)\s+)?{FULL_MON}\s+{YEAR}(?!\d)"), _calendar),
    (_en(rf"(?:in|during)\s+{FULL_MON}"), _calendar),
    (_en(rf"^{FULL_MON}$"), _calendar),  # a bare month name only as the whole text: "may" is also a verb
    (r"(?:週|周|星期|禮拜|礼拜)[一二三四五六日天]", _BARE_WEEKDAY),
    (_en(WEEKDAY), _BARE_WEEKDAY),
    (r"(?:週|周)末|" + _en(r"(?:on|over|at|during)\s+the\s+weekend|^weekend$"),
     _refuse("a weekend without last/this/next (上/這/下) could be this one or the last one")),
    (r"最近|之前|前陣子|前阵子|前幾天|前几天|這幾天|这几天|不久前|[幾几]天[前後后]|"
     + _en(r"recently|lately|a\s+while\s+ago|the\s+other\s+day|a\s+few\s+days\s+ago|some\s+time\s+ago"),
     _refuse("a vague time that names no range")),
]
_COMPILED = [(re.compile(pattern, re.IGNORECASE), handler) for pattern, handler in _RULES]
_SINCE_BEFORE = re.compile(_en(r"since") + r"\s+$", re.IGNORECASE)
_SINCE_AFTER = re.compile(r"\s*(?:到現在|到现在|至今|以來|以来)")
_FROM_BEFORE = re.compile(r"(?:自從|自从|從|从|自)\s*$")
_FILLER = re.compile(r"(?:[\W_]|" + _en("on|in|at|during") + ")*", re.IGNORECASE)


def _midnight(day: date, now: datetime) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=now.tzinfo)


def _scan(text: str, now: datetime) -> list[tuple[int, int, TimeRange]]:
    """Every expression in `text`, left to right; where matches overlap the earliest, then longest wins."""
    if now.tzinfo is None or now.utcoffset() is None:
        raise InvalidCommandError("now must be timezone-aware")
    today = now.date()
    matches = sorted(((m, h) for rx, h in _COMPILED for m in rx.finditer(text)),
                     key=lambda mh: (mh[0].start(), -mh[0].end()))
    found: list[tuple[int, int, TimeRange]] = []
    for m, handler in matches:
        if found and m.start() < found[-1][1]:
            continue
        first, last = handler(m, today)
        start, end = _midnight(first, now), _midnight(last, now)
        begin, finish = m.start(), m.end()
        if since := _SINCE_BEFORE.search(text, 0, begin):
            begin = since.start()
        elif since := _SINCE_AFTER.match(text, finish):
            finish = since.end()
            begin = prefix.start() if (prefix := _FROM_BEFORE.search(text, 0, begin)) else begin
        if since:
            if start >= now:
                raise AmbiguousTimeError(text[begin:finish], "'since' a time that has not begun")
            end = now
        found.append((begin, finish, TimeRange(start, end, text[begin:finish].strip())))
    return found


def resolve(expression: str, now: datetime) -> TimeRange:
    """Resolve ONE time expression against `now` (timezone-aware); see the module docstring."""
    found = _scan(expression, now)
    rest = "".join(expression[a:b] for a, b in zip([0] + [f[1] for f in found],
                                                    [f[0] for f in found] + [len(expression)], strict=True))
    if len(found) != 1 or not _FILLER.fullmatch(rest):
        raise InvalidCommandError(f"not a single time expression: {expression!r}")
    return TimeRange(found[0][2].start, found[0][2].end, expression.strip())


def find_ranges(text: str, now: datetime) -> list[TimeRange]:
    """The ranges of the time expressions in free text, left to right; [] when it has none.

    An ambiguous expression anywhere in the text raises AmbiguousTimeError.
    """
    return [time_range for _, _, time_range in _scan(text, now)]


def without_times(text: str, now: datetime) -> str:
    """``text`` with its time expressions cut out ("三天前的會議" → "的會議"), for matching words:
    a time word is the temporal route's business. Text with an ambiguous expression comes back
    unchanged."""
    try:
        found = _scan(text, now)
    except AmbiguousTimeError:
        return text
    for begin, finish, _ in reversed(found):
        text = text[:begin] + " " + text[finish:]
    return text
