"""Tag normalisation: one spelling per concept, Traditional and Simplified Chinese folded."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from domain.errors import TooManyTagsError
from domain.policy import Policy

#: Abbreviations and variants folded into one spelling (compared after lower-casing and folding).
SYNONYMS: dict[str, str] = {
    "jwt": "json web token",
    "k8s": "kubernetes",
    "js": "javascript",
    "ts": "typescript",
    "py": "python",
    "postgres": "postgresql",
    "pg": "postgresql",
    "ml": "machine learning",
    "llm": "large language model",
    "ai": "artificial intelligence",
    "db": "database",
    "数据库": "资料库",
    "内存": "记忆体",
}

_SPACES = re.compile(r"\s+")


@lru_cache(maxsize=1)
def _t2s_table() -> dict[int, str]:
    """OpenCC's Traditional → Simplified character table, read once from its data file."""
    import opencc  # only for the location of its dictionaries

    path = Path(opencc.__file__).parent / "dictionary" / "TSCharacters.txt"
    table: dict[int, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        traditional, _, simplified = line.partition("\t")
        if len(traditional) == 1 and simplified:
            table[ord(traditional)] = simplified.split(" ")[0]
    return table


def to_simplified(text: str) -> str:
    """Traditional → Simplified, character by character (OpenCC's table): the folding matching
    needs, at the cost of a ``str.translate``."""
    return text.translate(_t2s_table())


def _to_simplified():  # type: ignore[no-untyped-def]
    return to_simplified


def normalise_tag(tag: str) -> str:
    """``" JWT "`` → ``"json web token"``; ``"資料庫"`` → ``"资料库"``."""
    text = unicodedata.normalize("NFKC", tag).strip().lstrip("#").lower()
    text = _SPACES.sub(" ", text)
    text = _to_simplified()(text)
    return SYNONYMS.get(text, text)


def normalise_tags(tags: Iterable[str], policy: Policy) -> tuple[str, ...]:
    tags = list(tags)
    if len(tags) > policy.max_tags:
        raise TooManyTagsError(f"{len(tags)} tags given; the limit is {policy.max_tags}")
    seen: dict[str, None] = {}
    for tag in tags:
        if not isinstance(tag, str):
            raise TooManyTagsError(f"tag {tag!r} is not text")
        if len(tag) > policy.max_tag_chars:
            raise TooManyTagsError(
                f"tag {tag[:20]!r}… has {len(tag)} characters; the limit is {policy.max_tag_chars}"
            )
        normalised = normalise_tag(tag)
        if normalised:
            seen.setdefault(normalised, None)
    return tuple(seen)
