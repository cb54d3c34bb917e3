"""Words that ask about a well-known slot label or memory type, in English and Chinese (folded to
Simplified, as query terms are): "where does the user live" / 住在哪裡 ask about ``address``, 卡在
哪裡 about blockers. The tags route matches a state card whose label the query names this way, as
it matches one whose label words the query contains. Only words that mean little else are listed
(not 家, 會 or "like"); a question that names no label needs the other routes."""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

from projections.text import fold

_LABELS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("address", "home_address", "residence", "home_city", "city", "location"): (
        "live", "lives", "living", "lived", "reside", "moved", "住", "住在", "住址", "地址", "搬",
        "搬到", "搬家"),
    ("job_title", "title", "role", "position"): (
        "job", "title", "role", "position", "职称", "职位", "工作", "头衔"),
    ("employer", "company", "current_company"): (
        "employer", "company", "work", "worked", "works", "公司", "雇主", "上班"),
    ("skills", "skill", "tech_stack", "tools"): ("skill", "skills", "技能", "擅长", "专长"),
    ("languages", "language", "spoken_languages"): (
        "language", "languages", "speak", "speaks", "语言", "外语"),
    ("interests", "interest", "hobbies", "hobby"): (
        "interest", "interests", "hobby", "hobbies", "兴趣", "嗜好", "爱好"),
    ("launch_date", "release_date"): ("launch", "release", "ship", "上线", "发布", "推出"),
    ("deadline", "due_date"): ("deadline", "due", "截止", "期限"),
    ("phone", "phone_number"): ("phone", "电话", "手机"),
    ("email",): ("email", "mail", "邮件", "信箱", "邮箱"),
    ("manager",): ("manager", "boss", "主管", "老板", "经理"),
    ("birthday", "date_of_birth"): ("birthday", "born", "生日", "出生"),
    ("editor",): ("editor", "ide", "编辑器"),
    ("database", "db"): ("database", "db", "资料库", "数据库"),
    ("browser",): ("browser", "浏览器"),
}

#: Words that ask about cards of a memory type outside any slot.
_TYPES: dict[str, tuple[str, ...]] = {
    "blocker": ("blocker", "blockers", "blocked", "stuck", "卡", "卡住", "卡在", "阻塞", "阻碍"),
    "commitment": ("commitment", "commitments", "promise", "promised", "todo", "承诺", "答应",
                   "待办"),
}

@lru_cache(maxsize=1)
def _by_word() -> dict[str, frozenset[str]]:
    """Folded word → the labels it names (built on first use: folding loads OpenCC)."""
    found: dict[str, set[str]] = {}
    for labels, words in _LABELS.items():
        for word in words:
            found.setdefault(fold(word), set()).update(labels)
    return {word: frozenset(labels) for word, labels in found.items()}


@lru_cache(maxsize=1)
def _type_by_word() -> dict[str, str]:
    return {fold(word): memory_type for memory_type, words in _TYPES.items() for word in words}


def labels_named(terms: Iterable[str]) -> list[str]:
    """The labels the query's terms ask about, sorted."""
    return sorted({label for term in terms for label in _by_word().get(term, ())})


def types_named(terms: Iterable[str]) -> list[str]:
    """The memory types (blocker, commitment) the query's terms ask about, sorted."""
    return sorted({_type_by_word()[term] for term in terms if term in _type_by_word()})
