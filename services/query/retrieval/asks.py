"""What a question asks for, read from its grammar: a current value, or what was said or done.

DESIGN rule 5: the recency prior is for questions about a current value. "Where does she live
now?", "what is my current employer?", 她現在住哪裡 are answered by what holds now, and among raw
conversation turns on that matter the latest leads. "When did she paint a sunrise?", "what did he
say about the trip?", "how long has she been painting?", 她什麼時候搬家的 ask about the record —
what was said or done — and are ranked by match alone.

The reading (:func:`reading`) looks at tense, aspect and time adverbs, never at topics, in this
order (the first sign found decides), on the folded text (lower case, Simplified Chinese):

1. a time before now (:data:`EARLIER`): "ago", "yesterday", "last week", "used to", "before",
   "how long", "since when"; 以前, 之前, 曾經, 當初, 昨天, 去年, 上個月, 三天前, 多久, 什麼時候 —
   the question looks back, even when it also says "now" ("how long have I lived here now?");
2. a present marker (:data:`PRESENT`): "now", "currently", "these days", "still", "anymore",
   "lately", "latest"; 現在, 目前, 如今, 還在, 仍然, 最近, 這幾天, 正在 — a current value;
3. past tense or perfect aspect (:data:`PAST`): "did", "was", "were", "had", "has/have …
   <participle>", a subject question in the past ("who painted …", "what happened"), a common
   irregular past form ("went", "said", "told" …); Chinese aspect particles 了 and 過 after a verb
   (their fixed compounds 為了, 了解, 不過, 難過 … aside) — what was said or done;
4. present tense (:data:`TENSE_NOW`: is, are, am, does, do) — a current value;
5. no sign either way (a fragment such as "job?", or a Chinese question without aspect, which
   has no tense: 她住在哪裡): **a current value**. A memory asked a question with no time in it
   is asked what is true now — the first of the three questions Palimpsest answers (DESIGN
   preamble) — and a structured slot's question ("where does the user live?", "employer?")
   must keep the latest word first. The prior is bounded (rule 5: it never buries), so on a
   question that was about the past after all this default costs at most the prior's bound.

A pure function of the text: no clock, no database. The caller adds what the text does not say
(an as-of moment, a named range before now: ``present.question_reading``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from projections.text import fold

CURRENT = "a current value"
RECORD = "what was said or done"
#: The sign reported when the text shows no tense or time either way.
NO_SIGN = "no sign of tense or time: a current value by default"

_UNITS = (r"(?:second|minute|hour|day|night|week|weekend|month|year|decade|summer|winter|spring"
          r"|autumn|fall|time)s?")
_CN_NUMBER = r"(?:[0-9一二两三四五六七八九十几半多]+)"
_CN_UNITS = r"(?:秒|分钟|小时|天|日|晚|周|星期|礼拜|个月|月|年)"

#: A time before now (folded text: lower case, Simplified Chinese).
EARLIER = re.compile(
    rf"\b(?:ago|yesterday|last {_UNITS}|(?:the )?(?:week|month|year|day) before|used to|before"
    r"|previously|formerly|originally|at first|in the past|back then|back in|earlier"
    r"|how long|since when|the first time)\b"
    r"|以前|之前|从前|过去|曾经|当初|起初|一开始|原本|本来|原来|当时|那时|上次|上回|昨天|昨晚|前天"
    r"|去年|前年|上个月|上周|上星期|上礼拜|多久|多长时间|什么时候|何时|几时"
    rf"|{_CN_NUMBER}{_CN_UNITS}(?:以)?前")

#: A present marker: the question asks what holds now.
PRESENT = re.compile(
    r"\b(?:now|nowadays|currently|current|presently|at present|at the moment|these days"
    r"|still|anymore|any more|lately|recently|latest|most recent)\b"
    r"|现在|目前|如今|当前|眼下|此刻|当下|还在|仍|依然|依旧|至今|最近|近来|这几天|这些天|这阵子"
    r"|正在|最新")

#: Common irregular simple-past forms that are no other part of speech in a question.
_PAST_FORMS = ("went|said|told|took|gave|saw|came|bought|met|began|became|wrote|ran|brought"
               "|taught|won|spent|built|sent|heard|ate|drank|knew|grew|drew|flew|threw|wore"
               "|chose|spoke|broke|forgot|sang|swam")
#: Irregular past participles (alone they are often adjectives: "is it done?").
_PARTICIPLES = "been|gone|done|seen|eaten|taken|given|written|spoken|known|made|had|got|read|told|said"
#: A regular past form or participle: "-ed" after at least two letters, not "-eed" (need, speed).
_ED = r"\w+[^e\W]ed"

#: Past tense or perfect aspect: what was said or done.
PAST = re.compile(
    r"\b(?:did|didn't|didnt|was|were|wasn't|weren't|had|hadn't)\b"
    rf"|\b(?:has|have|hasn't|haven't|'ve)\s+(?:\w+\s+){{0,3}}?(?:ever|never|{_PARTICIPLES}|{_PAST_FORMS}|{_ED})\b"
    rf"|^(?:who|what|which \w+|whose \w+)\s+{_ED}\b"
    rf"|\b(?:{_PAST_FORMS})\b"
    # 了 and 过 after a verb; their fixed compounds (为了, 了解, 不过, 难过, 过敏 …) are no aspect
    r"|(?<![为除罢])了(?!解|不起|望|结|却)"
    r"|(?<![不难超通经越太])过(?![敏年节来去分于度])")

#: Present tense.
TENSE_NOW = re.compile(r"\b(?:is|are|am|isn't|aren't|does|do|doesn't|don't)\b")

_SIGNS = ((EARLIER, RECORD), (PRESENT, CURRENT), (PAST, RECORD), (TENSE_NOW, CURRENT))


@dataclass(frozen=True)
class Reading:
    """What a question asks for (:data:`CURRENT` or :data:`RECORD`) and the sign that said so."""

    kind: str
    sign: str

    @property
    def current(self) -> bool:
        return self.kind == CURRENT

    def explained(self) -> dict[str, str]:
        """For ``explain``: the kind the question was taken for, and why."""
        return {"asks": self.kind, "sign": self.sign}


def reading(text: str) -> Reading:
    """What ``text`` asks for, by the first sign of :data:`_SIGNS` in it (module docstring)."""
    folded = fold(text).replace("’", "'")
    for pattern, kind in _SIGNS:
        found = pattern.search(folded)
        if found:
            return Reading(kind, found.group().strip())
    return Reading(CURRENT, NO_SIGN)
