"""How the questions are worded: per slot kind and language, templates that name the slot's label
(``{label}``: whatever label the tenant gave it) and paraphrases that do not.

English placeholders: ``{who}`` (Anna / she / I), ``{whose}`` (Anna's / her / my), ``{whom}``
(Anna / her / me), ``{does}`` (does / do), ``{is}`` (is / am), ``{has}`` (has / have). Chinese:
``{who}`` (安娜 / 她 / 我). ``{old}``: an earlier value of the slot (a template with it is used only
when the slot had one). Every kind has at least five phrasings per language, at least two of them
paraphrases.
"""

from __future__ import annotations

from tests.benchmarks.aging.heldout import HELDOUT_PARAPHRASES

Phrasings = tuple[tuple[str, ...], tuple[str, ...]]  # (naming the label, paraphrases)

_EN_NAMED = ("what is {whose} {label}?", "{whose} {label}?", "remind me of {whose} current {label}")
_EN_NAMED_MULTI = ("what are {whose} {label}?", "list {whose} {label}", "{whose} {label}?")
_HANT_NAMED = ("{who}的{label}是什麼？", "{who}現在的{label}？", "查一下{who}的{label}")
_HANT_NAMED_MULTI = ("{who}的{label}有哪些？", "列出{who}的{label}", "{who}有哪些{label}？")
_HANS_NAMED = ("{who}的{label}是什么？", "{who}现在的{label}？", "查一下{who}的{label}")
_HANS_NAMED_MULTI = ("{who}的{label}有哪些？", "列出{who}的{label}", "{who}有哪些{label}？")
_PROJECT_EN_NAMED = ("what is the {label} of {who}?", "{who} {label}?", "current {label} of {who}?")

#: kind → (en paraphrases, zh-Hant paraphrases, zh-Hans paraphrases)
PARAPHRASES: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "residence": (
        ("where {does} {who} live now?", "which city {is} {who} living in these days?",
         "where {has} {who} moved to?", "{is} {who} still in {old}?"),
        ("{who}現在住哪裡？", "{who}最近住哪？", "{who}搬到哪裡了？", "{who}還住在{old}嗎？"),
        ("{who}现在住哪里？", "{who}最近住哪？", "{who}搬到哪里了？", "{who}还住在{old}吗？")),
    "occupation": (
        ("what {does} {who} do for a living?", "what kind of work {does} {who} do now?",
         "how {does} {who} earn a living these days?"),
        ("{who}現在靠什麼維生？", "{who}是做什麼的？", "{who}現在在做哪一行？"),
        ("{who}现在靠什么谋生？", "{who}是做什么的？", "{who}现在干哪一行？")),
    "employer": (
        ("who {does} {who} work for?", "which firm {is} {who} with these days?",
         "{is} {who} still at {old}?"),
        ("{who}在哪裡上班？", "{who}現在在哪高就？", "{who}還在{old}嗎？"),
        ("{who}在哪里上班？", "{who}现在在哪高就？", "{who}还在{old}吗？")),
    "relationship": (
        ("who {is} {who} seeing these days?", "{is} {who} with anyone at the moment?",
         "{is} {who} still {old}?"),
        ("{who}最近在跟誰交往？", "{who}有對象了嗎？", "{who}還是{old}嗎？"),
        ("{who}最近在跟谁交往？", "{who}有对象了吗？", "{who}还是{old}吗？")),
    "diet": (
        ("{is} {who} still {old}?", "what {does} {who} eat these days?", "anything {who} won't eat?"),
        ("{who}還是{old}嗎？", "{who}現在吃什麼？有什麼不吃的？", "請{who}吃飯要注意什麼？"),
        ("{who}还是{old}吗？", "{who}现在吃什么？有什么忌口？", "请{who}吃饭要注意什么？")),
    "manager": (
        ("who {does} {who} report to?", "who is {whose} boss at work now?",
         "who {does} {who} answer to at work?"),
        ("{who}現在向誰報告？", "{who}的老闆是誰？", "誰在帶{who}？"),
        ("{who}现在向谁汇报？", "{who}的老板是谁？", "谁在带{who}？")),
    "drink": (
        ("what {does} {who} like to drink?", "what should I order for {whom} at the café?",
         "{does} {who} still drink {old}?"),
        ("{who}平常愛喝什麼？", "幫{who}點飲料要點什麼？", "{who}還喝{old}嗎？"),
        ("{who}平时爱喝什么？", "给{who}点饮料点什么好？", "{who}还喝{old}吗？")),
    "food": (
        ("what {does} {who} love to eat?", "what dish would make {whom} happy tonight?",
         "what {does} {who} crave when tired?"),
        ("{who}最愛吃什麼？", "要請{who}吃飯，該吃什麼？", "{who}嘴饞時想吃什麼？"),
        ("{who}最爱吃什么？", "请{who}吃饭该吃什么？", "{who}嘴馋时想吃什么？")),
    "phone": (
        ("how can I reach {whom} by phone?", "what number should I call to reach {whom}?",
         "what's the best number for {whom}?"),
        ("要怎麼打給{who}？", "{who}的號碼是多少？", "怎麼用電話聯絡{who}？"),
        ("怎么给{who}打电话？", "{who}的号码是多少？", "怎么用电话联系{who}？")),
    "launch": (
        ("when {does} {who} ship?", "when is {who} going live?", "how long until {who} is out?"),
        ("{who}什麼時候上線？", "{who}預計哪天推出？", "{who}延到什麼時候了？"),
        ("{who}什么时候上线？", "{who}预计哪天推出？", "{who}推迟到什么时候了？")),
    "database": (
        ("what does {who} store its data in?", "which storage engine is {who} on now?",
         "where does {who} keep its data?"),
        ("{who}的資料存在哪裡？", "{who}後端用什麼存資料？", "{who}選了哪一套儲存方案？"),
        ("{who}的数据存在哪里？", "{who}后端用什么存数据？", "{who}选了哪套存储方案？")),
    "status": (
        ("how is {who} going?", "is {who} live yet?", "where are we with {who}?"),
        ("{who}進展如何？", "{who}上線了沒？", "{who}現在做到哪了？"),
        ("{who}进展如何？", "{who}上线了没？", "{who}现在做到哪一步了？")),
    "skills": (
        ("what {is} {who} good at?", "what can {who} do well?", "what {is} {who} capable of?"),
        ("{who}擅長什麼？", "{who}會做哪些事？", "{who}有什麼拿手的？"),
        ("{who}擅长什么？", "{who}会做哪些事？", "{who}有什么拿手的？")),
    "languages": (
        ("what {does} {who} speak?", "which tongues can {who} get by in?",
         "could {who} interpret for us, and from what?"),
        ("{who}會說哪些話？", "{who}能用什麼話溝通？", "{who}會講什麼？"),
        ("{who}会说哪些话？", "{who}能用什么话沟通？", "{who}会讲什么？")),
    "instruments": (
        ("what {does} {who} play?", "what can {who} play at the party?",
         "{does} {who} play anything musical?"),
        ("{who}會彈什麼？", "{who}會演奏什麼？", "{who}玩什麼音樂？"),
        ("{who}会弹什么？", "{who}会演奏什么？", "{who}玩什么音乐？")),
    "hobbies": (
        ("what {does} {who} do for fun?", "how {does} {who} spend free time?",
         "what {does} {who} enjoy doing after work?"),
        ("{who}平常喜歡做什麼？", "{who}空閒時都做什麼？", "{who}下班後喜歡做什麼？"),
        ("{who}平时喜欢做什么？", "{who}空闲时都做什么？", "{who}下班后喜欢干什么？")),
    "pets": (
        ("what animals {does} {who} keep at home?", "{does} {who} own any cats or dogs?",
         "who shares {whose} home, animal-wise?"),
        ("{who}家裡養了什麼動物？", "{who}有養貓狗嗎？", "{who}養了什麼？"),
        ("{who}家里养了什么动物？", "{who}有养猫狗吗？", "{who}养了什么？")),
    "tools": (
        ("what software {does} {who} use?", "what {does} {who} work with every day?",
         "which apps {is} {who} using?"),
        ("{who}平常用什麼軟體？", "{who}工作都用哪些軟體？", "{who}每天用什麼app？"),
        ("{who}平时用什么软件？", "{who}工作都用哪些软件？", "{who}每天用什么app？")),
}
#: Which paraphrases :func:`current` uses (``--phrasings``): the built-in ones or the held-out set.
SOURCE = "builtin"
SOURCES = {"builtin": PARAPHRASES, "heldout": HELDOUT_PARAPHRASES}
_MULTI = {"skills", "languages", "instruments", "hobbies", "pets", "tools"}
_PROJECT = {"launch", "database", "status"}


def current(kind: str, lang: str) -> Phrasings:
    """The templates asking for the value a slot of ``kind`` holds now, in ``lang``."""
    en, hant, hans = SOURCES[SOURCE][kind]
    multi = kind in _MULTI
    named = {"en": _PROJECT_EN_NAMED if kind in _PROJECT else _EN_NAMED_MULTI if multi else _EN_NAMED,
             "zh-Hant": _HANT_NAMED_MULTI if multi else _HANT_NAMED,
             "zh-Hans": _HANS_NAMED_MULTI if multi else _HANS_NAMED}[lang]
    return named, {"en": en, "zh-Hant": hant, "zh-Hans": hans}[lang]


#: As-of questions. kind "*": every kind; a kind's own paraphrases are added to them.
AS_OF_VALID: dict[str, dict[str, Phrasings]] = {
    "en": {"*": (("what was {whose} {label} on {date}?", "on {date}, what was {whose} {label}?"), ()),
           "residence": ((), ("where did {who} live on {date}?",)),
           "occupation": ((), ("what did {who} do for a living on {date}?",)),
           "employer": ((), ("who did {who} work for on {date}?",)),
           "launch": ((), ("on {date}, when was {who} supposed to ship?",))},
    "zh-Hant": {"*": (("{date}那時{who}的{label}是什麼？", "{who}在{date}的{label}？"), ()),
                "residence": ((), ("{date}時{who}住在哪裡？",)),
                "occupation": ((), ("{date}時{who}靠什麼維生？",)),
                "employer": ((), ("{date}時{who}在哪裡上班？",)),
                "launch": ((), ("{date}時{who}預計哪天推出？",))},
    "zh-Hans": {"*": (("{date}那时{who}的{label}是什么？", "{who}在{date}的{label}？"), ()),
                "residence": ((), ("{date}时{who}住在哪里？",)),
                "occupation": ((), ("{date}时{who}靠什么谋生？",)),
                "employer": ((), ("{date}时{who}在哪里上班？",)),
                "launch": ((), ("{date}时{who}预计哪天推出？",))},
}
AS_OF_KNOWN: dict[str, dict[str, Phrasings]] = {
    "en": {"*": (("as we knew it on {date}, what was {whose} {label}?",
                  "what did our records say on {date} about {whose} {label}?"), ()),
           "residence": ((), ("on {date}, where did we think {who} lived?",)),
           "launch": ((), ("on {date}, when did we think {who} would ship?",))},
    "zh-Hant": {"*": (("照{date}當時的紀錄，{who}的{label}是什麼？",
                       "{date}那天我們記錄的{who}的{label}是什麼？"), ()),
                "residence": ((), ("{date}那天，我們以為{who}住在哪裡？",)),
                "launch": ((), ("{date}那天，我們以為{who}什麼時候推出？",))},
    "zh-Hans": {"*": (("按{date}当时的记录，{who}的{label}是什么？",
                       "{date}那天我们记录的{who}的{label}是什么？"), ()),
                "residence": ((), ("{date}那天，我们以为{who}住在哪里？",)),
                "launch": ((), ("{date}那天，我们以为{who}什么时候推出？",))},
}


def as_of(table: dict[str, dict[str, Phrasings]], kind: str, lang: str) -> Phrasings:
    generic, own = table[lang]["*"], table[lang].get(kind, ((), ()))
    return generic[0] + own[0], generic[1] + own[1]


#: "What did X do <when>" — the temporal route's questions; ``{expr}`` is a time expression.
TEMPORAL = {
    "en": ("what did {who} do {expr}?", "anything {who} did {expr}?",
           "remind me what {who} got up to {expr}"),
    "zh-Hant": ("{who}{expr}做了什麼？", "{expr}{who}去了哪裡、做了什麼？", "幫我回想{who}{expr}做的事"),
    "zh-Hans": ("{who}{expr}做了什么？", "{expr}{who}去了哪里、做了什么？", "帮我回想{who}{expr}做的事"),
}
#: key → the expression per language (all resolved by services.query.timeexpr against the checkpoint).
EXPRESSIONS = {
    "today": {"en": "today", "zh-Hant": "今天", "zh-Hans": "今天"},
    "yesterday": {"en": "yesterday", "zh-Hant": "昨天", "zh-Hans": "昨天"},
    "2_days_ago": {"en": "the day before yesterday", "zh-Hant": "前天", "zh-Hans": "前天"},
    "3_days_ago": {"en": "three days ago", "zh-Hant": "三天前", "zh-Hans": "三天前"},
    "this_week": {"en": "this week", "zh-Hant": "這週", "zh-Hans": "这周"},
    "last_week": {"en": "last week", "zh-Hant": "上週", "zh-Hans": "上周"},
    "last_month": {"en": "last month", "zh-Hant": "上個月", "zh-Hans": "上个月"},
}
