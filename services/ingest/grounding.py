"""Grounded or not written: a candidate's value must have support in what the model was shown.

A small model answers with what its prompt suggested as readily as with what the turn says (a
worked example came back as the user's fact from a conversation that never mentioned it). So a
candidate's value is checked against the turn and the earlier turns shown with it before it may
become a fact: at least half of the value's words (Latin words stemmed, Chinese words and
character pairs, numbers) stand in that text, or the value's embedding sits at least ``floor``
from one of those turns (a value the turn clearly implies in other words: "vegetarian" for "I
stopped eating meat"). A value with neither is rejected, with why. Pure: the similarity comes in
as a function.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from projections.text import cjk_bigrams, fold, terms

#: The share of a value's words that must stand in the text shown.
WORDS_NEEDED = 0.5
_NUMBER = re.compile(r"\d+")

#: The similarity of a value to each text: a list as long as the texts.
TextSimilarity = Callable[[str, Sequence[str]], Sequence[float]]


@dataclass(frozen=True)
class Support:
    """Whether a value is grounded in the text shown, and why (or why not)."""

    grounded: bool
    reason: str


def _share(wanted: Sequence[str], present: set[str]) -> float:
    return sum(1 for item in wanted if item in present) / len(wanted) if wanted else 0.0


def lexical_support(value: str, sources: Sequence[str]) -> str | None:
    """Why ``value`` stands in ``sources`` word for word, or None."""
    folded = fold(value).strip()
    shown = [fold(text) for text in sources]
    if folded and any(folded in text for text in shown):
        return "the value is quoted from the text shown"
    checks = (
        ("words", terms(value), {t for text in sources for t in terms(text)}),
        ("Chinese characters", cjk_bigrams(value), {b for text in sources for b in cjk_bigrams(text)}),
        ("numbers", _NUMBER.findall(folded), {n for text in shown for n in _NUMBER.findall(text)}),
    )
    for name, wanted, present in checks:
        if wanted and _share(wanted, present) >= WORDS_NEEDED:
            found = [item for item in wanted if item in present]
            return f"{len(found)} of its {len(wanted)} {name} stand in the text shown"
    return None


def support(value: str, sources: Sequence[str], similarity: TextSimilarity | None,
            floor: float) -> Support:
    """Whether ``value`` is grounded in ``sources`` (the turn first, then earlier turns shown)."""
    reason = lexical_support(value, sources)
    if reason is not None:
        return Support(True, reason)
    texts = [text for text in sources if text.strip()]
    if similarity is None or not texts:
        return Support(False, "no word of the value stands in the turn or the turns shown with it")
    closest = round(max(similarity(value, texts)), 3)
    if closest >= floor:
        return Support(True, f"implied: its embedding sits {closest} from the text shown")
    return Support(False, f"no word of the value stands in the text shown, and its embedding sits "
                          f"{closest} from it (at least {floor} needed)")
