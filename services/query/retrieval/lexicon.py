"""Words that ask about a well-known kind of slot, in English and Chinese: "where does she live" /
她住在哪裡 ask about where someone lives, whatever the tenant calls that slot (``address``,
``home_city``, 現居城市 …); 卡在哪裡 asks about blockers.

A **concept** has the labels it is usually stored under and the words and phrases a question
names it by. Words are compared as query terms are (folded to Simplified, English stemmed: "lives",
"lived" and "living" are one word), phrases on the folded text before it is cut into words, and a
phrase claims its words: "what does she do for a living" asks about work, not where she lives.
Only words that mean little else are listed (not 家 or "like"); a tenant's own label is matched to
a concept when it is one of the concept's labels or made only of the concept's words, and a
question that names no concept may still name a label by its own words or its embedding
(``services.query.retrieval.slots``).

Entries are general: the labels and wordings people commonly use, never one only a benchmark
uses. The read path can do without them (``PALIMPSEST_RETRIEVAL__LEXICON=false``); what they buy
is measured on labels and wordings they were not written from, the test split of ``palimpsest
bench aging --without-lexicon`` (decision 0015).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from domain.rules.tags import to_simplified
from projections.text import fold, query_terms


@dataclass(frozen=True)
class Concept:
    name: str
    labels: tuple[str, ...]
    words: tuple[str, ...]
    phrases: tuple[str, ...] = ()


#: Questions that ask about each concept, in both languages: a question worded like none of the
#: words and phrases above is still matched to the concept whose examples its embedding is
#: closest to (``services.query.retrieval.slots``), for wordings no list can hold.
EXAMPLES: dict[str, tuple[str, ...]] = {
    "residence": (
        "what city is he based in",
        "where is his home now",
        "她住在哪裡",
        "他現在人在哪個城市",
        "你家在哪",
        "他住哪儿",
        "她现在在哪个城市生活",
    ),
    "occupation": (
        "what is her job",
        "what does he do for work",
        "what is his profession",
        "她的工作是什麼",
        "他從事什麼職業",
        "她是做什么工作的",
        "他的职业是什么",
    ),
    "employer": (
        "which company does she work at",
        "who is his employer",
        "where is she employed",
        "她在哪家公司工作",
        "他任職於哪裡",
        "她在哪个公司上班",
    ),
    "relationship": (
        "is she in a relationship",
        "who is his partner",
        "is he married",
        "她有男朋友嗎",
        "他結婚了嗎",
        "她的另一半是谁",
        "他在谈恋爱吗",
    ),
    "diet": (
        "what diet does she follow",
        "is he vegetarian",
        "what foods does she avoid",
        "他有什麼飲食限制",
        "她有什么忌口",
    ),
    "manager": (
        "who is her manager",
        "who does he work under",
        "who is his supervisor",
        "她的主管是誰",
        "他的上司是谁",
    ),
    "phone": (
        "what is her phone number",
        "what's his mobile number",
        "她的電話是多少",
        "他的手机号码",
    ),
    "email": (
        "what is her email",
        "his email address",
        "她的電子郵件",
        "他的邮箱是什么",
    ),
    "birthday": (
        "when is her birthday",
        "when was he born",
        "她的生日是哪天",
        "他哪天出生的",
    ),
    "skills": (
        "what skills does she have",
        "她有什麼專長",
    ),
    "languages": (
        "which languages does she speak",
        "can he speak Japanese",
        "她會說哪些語言",
    ),
    "instruments": (
        "which instruments does she play",
        "can he play the piano",
        "她會什麼樂器",
        "他会弹吉他吗",
    ),
    "interests": (
        "what are her hobbies",
        "what does he like doing in his spare time",
        "她有什麼嗜好",
        "他的兴趣爱好是什么",
    ),
    "pets": (
        "does she have any pets",
        "what pet does he own",
        "她養什麼寵物",
        "他家有猫吗",
    ),
    "drink": (
        "what is her favourite drink",
        "what does he usually drink",
        "她最喜歡喝什麼",
        "他爱喝什么饮料",
    ),
    "food": (
        "what is her favourite food",
        "what is his favourite dish",
        "她最喜歡吃什麼菜",
    ),
    "launch": (
        "when is the launch date",
        "when will the project be released",
        "專案什麼時候上線",
        "这个项目哪天发布",
    ),
    "database": (
        "which database does the project use",
        "what database did they choose",
        "專案用什麼資料庫",
        "项目用的是什么数据库",
    ),
    "status": (
        "what is the project status",
        "how far along is the project",
        "專案目前的進度",
        "项目现在是什么状态",
    ),
    "tools": (
        "which tools does she use",
        "what software does he work with",
        "她平常用哪些工具",
        "他用什么软件",
    ),
    "age": ("how old is she", "when will he turn forty", "她今年幾歲", "他多大年纪了"),
    "allergies": ("is she allergic to anything", "what can't he be exposed to", "她對什麼過敏",
                  "他有什么过敏的东西"),
    "children": ("does she have kids", "how many children does he have", "她有小孩嗎", "他有几个孩子"),
    "education": ("what did she study at university", "which degree does he hold", "她大學念什麼",
                  "他是什么学历"),
    "nationality": ("what passport does she hold", "which country is he a citizen of", "她是哪國人",
                    "他是什么国籍"),
    "owner": ("who is responsible for the project", "who leads this service", "這個專案誰負責",
              "这个服务归谁管"),
    "budget": ("how much money does the project have", "what is the spending limit", "專案預算多少",
               "这个项目花多少钱"),
}


CONCEPTS: tuple[Concept, ...] = (
    Concept("residence",
            ("address", "home_address", "residence", "city", "location", "current_city", "home", "住址",
             "地址", "居住地", "城市", "住處", "住所"),
            ("live", "reside", "residence", "relocate", "home", "city", "住", "住在", "住址", "地址",
             "搬", "搬到", "搬家", "居住", "现居", "住处", "城市"),
            (r"\bbased in\b", r"\bmoved? (?:to|in)\b", r"住哪", r"住在哪")),
    Concept("occupation",
            ("occupation", "profession", "job", "job_title", "title", "role", "position", "career",
             "work", "職業", "工作", "職稱", "職位", "頭銜"),
            ("job", "occupation", "profession", "career", "职业", "工作", "职称", "职位",
             "头衔", "维生", "谋生", "行业"),
            (r"\b(?:earn|make)s? (?:a|his|her|their|my|your) living\b", r"\bfor a living\b",
             r"\bdo for work\b", r"\b(?:kind|line) of work\b", r"\bwhat (?:does|do) \w+ do\W*$",
             r"\bjob title\b", r"\bwhat (?:is|was) \w+(?:'s)? work\b",
             r"靠什么(?:维生|谋生|吃饭)", r"做什么工作", r"做什么的", r"什么工作", r"哪一?行")),
    Concept("employer",
            ("employer", "company", "workplace", "organisation", "organization", "公司", "雇主", "東家"),
            ("employer", "employed", "company", "firm", "workplace", "公司", "雇主", "上班", "任职",
             "东家", "高就"),
            (r"\bwork(?:s|ed|ing)? (?:for|at)\b", r"\bwhere (?:does|do|did) \w+ work\b",
             r"在哪(?:里|家公司)?(?:上班|工作)")),
    Concept("relationship",
            ("relationship", "relationship_status", "partner", "spouse", "marital_status", "dating",
             "boyfriend", "girlfriend", "感情狀況", "伴侶", "男友", "女友", "婚姻狀況"),
            ("relationship", "partner", "married", "marry", "boyfriend", "girlfriend",
             "husband", "wife", "spouse", "交往", "男友", "女友", "男朋友", "女朋友", "伴侣",
             "结婚", "单身", "感情", "对象", "恋爱", "约会"),
            (r"\bseeing (?:someone|anyone|anybody)\b", r"\bwho (?:am|is|are) \w+ (?:seeing|dating)\b",
             r"\bdating\b", r"\bis \w+ single\b",
             r"在一起", r"谈恋爱", r"另一半")),
    Concept("diet",
            ("diet", "dietary", "food_preference", "飲食", "飲食偏好"),
            ("diet", "eat", "vegan", "vegetarian", "meat", "吃", "吃素", "素食", "饮食", "荤",
             "茹素", "忌口"),
            (r"\b(?:won't|doesn't|don't|can't) eat\b", r"不吃")),
    Concept("manager",
            ("manager", "boss", "supervisor", "主管", "老闆", "上司"),
            ("manager", "boss", "supervisor", "主管", "老板", "上司", "经理", "领导", "汇报"),
            (r"\breports? to\b", r"向谁(?:汇报|报告)")),
    Concept("phone", ("phone", "phone_number", "mobile", "電話", "手機", "手機號"),
            ("phone", "call", "number", "电话", "手机", "号码"),
            (r"\bcell(?:phone)? number\b", r"打给", r"打电话")),
    Concept("email", ("email", "mail", "郵件", "信箱", "電子郵件"),
            ("email", "mail", "邮件", "信箱", "邮箱"),
            (r"\be-?mail address\b", r"(?:邮箱|邮件|电子邮件|信箱)地址")),
    Concept("birthday", ("birthday", "date_of_birth", "dob", "生日"),
            ("birthday", "born", "birth", "生日", "出生"), ()),
    Concept("skills", ("skills", "skill", "tech_stack", "技能", "專長", "特長"),
            ("skill", "expertise", "技能", "擅长", "专长", "特长", "拿手"),
            (r"\bgood at\b",)),
    Concept("languages", ("languages", "language", "語言"),
            ("language", "speak", "语言", "外语", "方言"), ()),
    Concept("instruments", ("instruments", "instrument", "樂器"),
            ("instrument", "乐器", "弹", "演奏"),
            (r"\bwhat (?:does|do|can) \w+ play\b", r"\bplay (?:an? |the )?(?:instrument|music)")),
    Concept("interests", ("interests", "interest", "hobbies", "hobby", "興趣", "嗜好", "愛好"),
            ("interest", "hobby", "pastime", "兴趣", "嗜好", "爱好", "休闲"),
            (r"\bfree time\b", r"\bspare time\b", r"\bfor fun\b", r"\bafter work\b", r"空闲时?",
             r"下班后", r"(?:平时|平常)?喜欢(?:做|干)什么")),
    Concept("pets", ("pets", "pet", "寵物"),
            ("pet", "dog", "cat", "animal", "宠物", "狗", "猫", "动物", "养"), ()),
    Concept("drink", ("favorite_drink", "favourite_drink", "drink", "飲料"),
            ("drink", "beverage", "喝", "饮料"), ()),
    Concept("food", ("favorite_food", "favourite_food", "food"),
            ("food", "dish", "cuisine", "meal", "食物", "菜", "料理", "美食"),
            (r"\b(?:love|like|loves|likes) to eat\b", r"\bfavou?rite (?:food|dish|meal)\b",
             r"最?爱吃", r"喜欢吃")),
    Concept("launch", ("launch_date", "release_date", "launch", "go_live", "上線日期", "發布日期"),
            ("launch", "release", "ship", "上线", "发布", "推出"),
            (r"\bgo(?:es|ing)? live\b",)),
    Concept("deadline", ("deadline", "due_date"), ("deadline", "截止", "期限"), (r"\bdue date\b",)),
    Concept("database", ("database", "db", "資料庫"),
            ("database", "datastore", "storage", "资料库", "存储", "储存"),
            ()),
    Concept("editor", ("editor",), ("editor", "ide", "编辑器"), ()),
    Concept("browser", ("browser",), ("browser", "浏览器"), ()),
    Concept("team", ("team", "團隊"), ("team", "团队"), ()),
    Concept("school", ("school", "university", "學校"), ("school", "university", "学校", "大学"), ()),
    Concept("status", ("status", "stage", "current_stage", "project_status", "狀態", "進度"),
            ("status", "stage", "progress", "状态", "进度", "进展"),
            ()),
    Concept("tools", ("tools", "tool", "software", "apps", "工具", "軟體"),
            ("tool", "software", "app", "工具", "软件", "软体"), ()),
    # everyday facts about a person
    Concept("age", ("age", "年齡", "年紀", "歲數"), ("age", "年龄", "年纪", "岁数"),
            (r"\bhow old\b", r"几岁", r"多大了", r"年纪多大")),
    Concept("hometown", ("hometown", "home_town", "birthplace", "place_of_birth", "origin", "老家",
                         "家鄉", "故鄉", "出生地", "籍貫"),
            ("hometown", "birthplace", "家乡", "老家", "故乡", "籍贯", "出生地"),
            (r"\b(?:grew|grow|growing) up\b", r"\bwhere (?:is|was|are|were) \w+ (?:from|born)\b", r"哪里人",
             r"在哪里?长大", r"在哪里?出生")),
    Concept("nationality", ("nationality", "citizenship", "國籍"),
            ("nationality", "citizenship", "citizen", "国籍", "护照"), ()),
    Concept("allergies", ("allergies", "allergy", "過敏", "過敏原"),
            ("allergy", "allergic", "过敏", "过敏原"), ()),
    Concept("children", ("children", "kids", "child", "孩子", "小孩", "子女"),
            ("children", "child", "kid", "son", "daughter", "孩子", "小孩", "子女", "儿子", "女儿"), ()),
    Concept("education", ("education", "degree", "major", "alma_mater", "學歷", "學位", "主修", "科系"),
            ("education", "degree", "graduate", "学历", "学位", "主修", "科系", "毕业"), ()),
    Concept("car", ("car", "vehicle", "汽車", "車子", "座駕"),
            ("car", "vehicle", "汽车", "车子", "座驾"), (r"开什么车", r"\bwhat \w+ drives?\b")),
    Concept("color", ("favorite_color", "favourite_colour", "favorite_colour", "color", "colour", "顏色",
                      "最喜歡的顏色"),
            ("color", "colour", "颜色"), ()),
    Concept("sport", ("sport", "sports", "exercise", "workout", "運動"),
            ("sport", "exercise", "workout", "gym", "运动", "健身"), ()),
    Concept("movie", ("favorite_movie", "favourite_movie", "movie", "movies", "film", "電影"),
            ("movie", "film", "电影"), ()),
    Concept("nickname", ("nickname", "暱稱", "綽號", "小名"),
            ("nickname", "昵称", "绰号", "小名", "外号"), (r"\bgoes by\b",)),
    Concept("timezone", ("timezone", "time_zone", "時區"), ("timezone", "时区"), (r"\btime zone\b",)),
    Concept("salary", ("salary", "income", "薪水", "薪資", "收入"),
            ("salary", "income", "薪水", "薪资", "收入", "月薪", "年薪"), ()),
    # facts about a project
    Concept("budget", ("budget", "預算"), ("budget", "预算", "经费"), ()),
    Concept("owner", ("owner", "lead", "project_lead", "tech_lead", "負責人"),
            ("owner", "负责人"), (r"\bwho (?:owns|leads|runs)\b", r"谁负责")),
    Concept("repository", ("repo", "repository", "git_repo", "代碼庫", "程式碼庫"),
            ("repo", "repository", "github", "gitlab", "代码库"), ()),
    Concept("framework", ("framework", "frameworks", "框架"), ("framework", "框架"), ()),
    Concept("hosting", ("hosting", "cloud", "cloud_provider", "deployment", "infrastructure", "部署",
                        "雲端"),
            ("hosting", "hosted", "cloud", "aws", "gcp", "azure", "部署", "云端", "托管"), ()),
    Concept("version", ("version", "current_version", "版本"), ("version", "版本"), ()),
    Concept("customer", ("customer", "customers", "client", "clients", "客戶"),
            ("customer", "客户"), ()),
    Concept("priority", ("priority", "優先級", "優先順序"), ("priority", "优先级"), ()),
)

#: Words that ask about cards of a memory type outside any slot.
_TYPES: dict[str, tuple[str, ...]] = {
    "blocker": ("blocker", "blocked", "stuck", "卡", "卡住", "卡在", "阻塞", "阻碍"),
    "commitment": ("commitment", "promise", "todo", "承诺", "答应", "待办"),
}


def _words(text: str) -> frozenset[str]:
    return frozenset(query_terms(text))


def _terms_of(word: str) -> tuple[str, ...]:
    """The query terms a listed word is met as: itself cut like a query, never a lone character
    cut from a longer word (编辑器 names the editor; 器 alone does not)."""
    found = query_terms(word)
    return tuple(t for t in found if len(t) > 1 or len(found) == 1) or (fold(word),)


@lru_cache(maxsize=1)
def _by_word() -> dict[str, frozenset[str]]:
    """Query term → the concepts it names (built on first use: folding loads OpenCC)."""
    found: dict[str, set[str]] = {}
    for concept in CONCEPTS:
        for word in concept.words:
            for term in _terms_of(word):
                found.setdefault(term, set()).add(concept.name)
    return {word: frozenset(names) for word, names in found.items()}


@lru_cache(maxsize=1)
def _phrases() -> tuple[tuple[re.Pattern[str], str], ...]:
    # folded to Simplified only: lower-casing would turn ``\W`` into ``\w``
    return tuple((re.compile(to_simplified(phrase)), concept.name) for concept in CONCEPTS
                 for phrase in concept.phrases)


@lru_cache(maxsize=1)
def _vocabulary() -> dict[str, frozenset[str]]:
    """Concept → every term of its labels and words: a label made only of these is the concept's."""
    return {c.name: frozenset().union(*(_words(w.replace("_", " ")) for w in (*c.labels, *c.words)))
            for c in CONCEPTS}


@lru_cache(maxsize=1)
def _asking() -> dict[str, frozenset[str]]:
    """Concept → the terms of the words a question names it by."""
    return {c.name: frozenset().union(*(_words(w) for w in c.words)) for c in CONCEPTS}


@lru_cache(maxsize=1)
def _labels() -> dict[str, frozenset[str]]:
    return {c.name: frozenset(fold(label) for label in c.labels) for c in CONCEPTS}


@lru_cache(maxsize=64)
def concept_terms(name: str) -> frozenset[str]:
    """The query terms that name concept ``name``."""
    return frozenset(term for term, names in _by_word().items() if name in names)


#: How surely a phrase and a lone word name a concept: "for a living" says more than "live".
BY_PHRASE, BY_WORD = 1.0, 0.9


@lru_cache(maxsize=4_096)
def concepts_named(text: str) -> frozenset[str]:
    """The concepts ``text`` asks about: by a phrase (which claims its words), else by a word."""
    return frozenset(concept_strengths(text))


#: Colloquial and contracted question words, read as their plain forms before phrases are
#: matched (a phrase lists the plain form only): 啥 is 什么 and 咋 怎么 in any Mandarin question,
#: "what's" is "what is".
_PLAIN_FORMS = ((re.compile(r"啥|甚么"), "什么"), (re.compile(r"咋"), "怎么"), (re.compile(r"哪儿"), "哪里"),
                (re.compile(r"\b(what|who|where|when|how)[’']s\b"), r"\1 is"))


def plain_question(folded: str) -> str:
    """A folded question with its colloquial and contracted question words in their plain form."""
    for pattern, plain in _PLAIN_FORMS:
        folded = pattern.sub(plain, folded)
    return folded


@lru_cache(maxsize=4_096)
def concept_strengths(text: str) -> dict[str, float]:
    """Each concept ``text`` asks about, with how surely (:data:`BY_PHRASE`, :data:`BY_WORD`)."""
    folded = plain_question(fold(text))
    named: dict[str, float] = {}
    for pattern, concept in _phrases():
        if pattern.search(folded):
            named[concept] = BY_PHRASE
            folded = pattern.sub(" ", folded)
    for term in query_terms(folded):
        for concept in _by_word().get(term, frozenset()):
            named.setdefault(concept, BY_WORD)
    return named


#: Words that say what kind of thing a label holds, not what it is about: ``relationship_status``
#: is about the relationship, 語言能力 about languages.
GENERIC_WORDS = frozenset(query_terms(
    "status state current info information detail details type kind level preference preferred "
    "name list habits 状态 状况 情况 能力 选型 习惯 偏好 信息 资讯 类型 现在 目前"))


@lru_cache(maxsize=16_384)
def concepts_of_label(label: str, words: tuple[str, ...]) -> frozenset[str]:
    """The concepts a tenant's label stands for: it is one of a concept's labels; or its head —
    its last word that is not generic (``comfort_food`` → food, 恋爱状态 → 恋爱, 最喜欢的食物 →
    食物) — belongs to one concept's words alone; or its words (``slot_words``) are all among a
    concept's."""
    folded = fold(label)
    named = {name for name, labels in _labels().items() if folded in labels}
    if not words:
        return frozenset(named)
    head = next((w for w in reversed(words) if w not in GENERIC_WORDS), None)
    for vocabularies in (_asking(), _vocabulary()):  # a concept's own words first, then its labels'
        holding = [name for name, vocabulary in vocabularies.items() if head in vocabulary]
        if holding:
            named.update(holding if len(holding) == 1 else ())
            break
    named |= {name for name, vocabulary in _vocabulary().items() if set(words) <= vocabulary}
    return frozenset(named)


def types_named(terms: Iterable[str]) -> list[str]:
    """The memory types (blocker, commitment) the query's terms ask about, sorted."""
    return sorted({_type_by_word()[term] for term in terms if term in _type_by_word()})


@lru_cache(maxsize=1)
def _type_by_word() -> dict[str, str]:
    return {term: memory_type for memory_type, words in _TYPES.items() for word in words
            for term in _terms_of(word)}
