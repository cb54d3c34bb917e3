"""Words that ask about a well-known slot label, in English and Chinese (folded to Simplified, as
query terms are): "where does the user live" / 住在哪裡 ask about ``address``. The tags route
matches a state card whose label the query names this way, as it matches one whose label words
the query contains. A question that names no label needs the other routes."""

from __future__ import annotations

from collections.abc import Iterable

from projections.text import fold

_LABELS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("address", "home_address", "residence", "home_city", "city", "location"): (
        "live", "lives", "living", "lived", "home", "reside", "moved", "move", "住", "住在", "住址",
        "地址", "搬", "搬到", "搬家", "家"),
    ("job_title", "title", "role", "position"): (
        "job", "title", "role", "position", "职称", "职位", "工作", "头衔"),
    ("employer", "company", "current_company"): (
        "employer", "company", "work", "works", "公司", "雇主", "上班"),
    ("skills", "skill", "tech_stack", "languages", "tools"): (
        "skill", "skills", "know", "knows", "技能", "会", "擅长", "专长"),
    ("interests", "interest", "hobbies", "hobby", "likes"): (
        "interest", "interests", "hobby", "hobbies", "like", "likes", "兴趣", "嗜好", "爱好", "喜欢"),
    ("launch_date", "release_date"): (
        "launch", "release", "ship", "上线", "发布", "发表", "推出"),
    ("deadline", "due_date"): ("deadline", "due", "截止", "期限"),
    ("phone", "phone_number"): ("phone", "call", "电话", "手机"),
    ("email",): ("email", "mail", "邮件", "信箱", "邮箱"),
    ("manager",): ("manager", "boss", "主管", "老板", "经理"),
    ("birthday", "date_of_birth"): ("birthday", "born", "生日", "出生"),
}

_BY_WORD: dict[str, frozenset[str]] = {}
for _labels, _words in _LABELS.items():
    for _word in _words:
        _BY_WORD[fold(_word)] = _BY_WORD.get(fold(_word), frozenset()) | frozenset(_labels)


def labels_named(terms: Iterable[str]) -> list[str]:
    """The labels the query's terms ask about, sorted."""
    return sorted({label for term in terms for label in _BY_WORD.get(term, ())})
