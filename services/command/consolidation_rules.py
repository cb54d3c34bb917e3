"""What a consolidation scan proposes: pure decisions over the rows one scan read
(:meth:`services.query.readmodels.ReadModels.consolidation_rows`), tested without a database.

- **duplicates**: knowledge cards with near-identical embeddings → ``merge`` the newer into the
  older; a knowledge card near-identical to a slot's value → ``related_to`` the slot; two items of
  one multi-value slot that say the same (the same words, or near-identical embeddings) →
  ``updates``: the newer revised in place to read as the older;
- **contradictions**: two knowledge cards alike but for a negation → ``contradicts``; the current
  values of two single-value slots of one subject (scope, perspective) whose labels name the same
  concept (``address`` and ``home_city``: the read path's lexicon) → ``supersedes``: the newer
  value takes the older's slot; two values of a single-value slot settled ``both_valid`` on
  touching stretches → ``supersedes``: the later value over the earlier's stretch too.

Each pair is proposed once, and never when the cards (or their slots) are already linked —
merged, superseded, related — or proposed. The ``src`` of a candidate is the card acceptance
changes, ``dst`` the one it keeps.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations
from typing import Any
from uuid import UUID

import numpy as np

from domain.cards import same_value
from domain.proposal import ProposalEdge, ProposalKind
from projections.text import fold
from services.query.retrieval.lexicon import concepts_of_label
from services.query.retrieval.naming import label_words

#: A row of the read models (a card, or a pair of card ids).
Row = Mapping[str, Any]


@dataclass(frozen=True)
class Candidate:
    """A pair to propose: ``src`` is the card accepting changes, ``dst`` the one it keeps (or
    links to)."""

    kind: ProposalKind
    src_id: UUID
    dst_id: UUID
    edge: ProposalEdge
    rationale: str
    score: float

    @property
    def pair(self) -> frozenset[UUID]:
        return frozenset((self.src_id, self.dst_id))


#: Words that negate a sentence (English, after ``n't`` is read as ``not``), and characters that
#: do in Chinese (folded to Simplified). A heuristic: it only decides which pairs are shown.
NEGATIONS = frozenset({"not", "no", "never", "none", "nothing", "neither", "nor", "without",
                       "cannot", "avoid", "avoids", "stop", "stopped"})
CJK_NEGATIONS = frozenset("不没无别勿")
#: How sure a contradiction read from labels (two slots of one concept) and from a slot settled
#: ``both_valid`` (a person already saw both values) is.
CONCEPT_SCORE, BOTH_VALID_SCORE = 0.8, 0.5


def negated(text: str) -> bool:
    """Whether ``text`` reads as negated: an odd count of negating words (and characters)."""
    folded = re.sub(r"n['’]t\b", " not", fold(text))
    count = sum(1 for word in re.findall(r"[a-z]+", folded) if word in NEGATIONS)
    return (count + sum(1 for char in folded if char in CJK_NEGATIONS)) % 2 == 1


def same_words(a: str, b: str) -> bool:
    """The same words in the same order, whatever the case, script, spacing or punctuation."""
    return re.findall(r"\w+", fold(a)) == re.findall(r"\w+", fold(b))


@lru_cache(maxsize=4_096)
def label_concepts(label: str) -> frozenset[str]:
    return concepts_of_label(label, label_words(label))


def _quote(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _name(card: Row) -> str:
    if card["kind"] == "knowledge":
        return f'knowledge "{_quote(card["title"] or card["content"])}"'
    return f'{card["subject"]}/{card["label"]} = "{_quote(card["content"])}"'


def _by_age(a: Row, b: Row) -> tuple[Row, Row]:
    """(older, newer) by when they were recorded."""
    older, newer = sorted((a, b), key=lambda c: (c["recorded_at"], str(c["card_id"])))
    return older, newer


def comparable(a: Row, b: Row) -> bool:
    """Pairs a duplicate or contradiction can be between: knowledge with knowledge, knowledge with
    a slot's value, two items of one multi-value slot (two slots' values meet only by label)."""
    if "knowledge" in (a["kind"], b["kind"]):
        return True
    return a["aggregate_id"] == b["aggregate_id"] and a["cardinality"] == "multi_value"


def near_pairs(cards: Sequence[Row], floor: float, chunk: int = 1_024) -> list[dict[str, Any]]:
    """Pairs of ``cards`` (each with its ``embedding`` and ``model``) of one model and one scope
    whose cosine similarity is at least ``floor``, the most alike first: a matrix product per
    group, ``chunk`` rows at a time."""
    groups: dict[tuple[Any, ...], list[Row]] = {}
    for card in cards:
        key = (card["model"], card["scope"], card["project_id"], card["group_id"])
        groups.setdefault(key, []).append(card)
    found = []
    for members in groups.values():
        if len(members) < 2:
            continue
        matrix = np.asarray([card["embedding"] for card in members], dtype=np.float32)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        matrix /= np.where(norms == 0, 1, norms)
        for start in range(0, len(members), chunk):
            similar = matrix[start:start + chunk] @ matrix.T
            for i, j in zip(*np.nonzero(similar >= floor), strict=True):
                a, b = members[start + i], members[j]
                if start + i < j and comparable(a, b):
                    found.append({"a_id": a["card_id"], "b_id": b["card_id"],
                                  "similarity": float(similar[i, j])})
    return sorted(found, key=lambda p: (-p["similarity"], str(p["a_id"]), str(p["b_id"])))


def _near(rows: Sequence[Row], cards: Mapping[UUID, Row], similarity: float,
          contradiction: float) -> Iterator[Candidate]:
    """Pairs whose embeddings are alike (:func:`near_pairs`)."""
    for row in rows:
        a, b = cards.get(row["a_id"]), cards.get(row["b_id"])
        if a is None or b is None:
            continue
        score = round(min(max(float(row["similarity"]), 0.0), 1.0), 4)
        older, newer = _by_age(a, b)
        kinds = {a["kind"], b["kind"]}
        pair = f"{_name(newer)} and {_name(older)}"
        if kinds == {"knowledge"} and negated(_text(a)) != negated(_text(b)):
            if score >= contradiction:
                yield Candidate(ProposalKind.CONTRADICTION, newer["card_id"], older["card_id"],
                                ProposalEdge.CONTRADICTS, f"{pair} are alike (cosine {score:.2f}) "
                                "but only one of them is negated: link them contradicts", score)
        elif score < similarity:
            continue
        elif kinds == {"knowledge"}:
            yield Candidate(ProposalKind.DUPLICATE, newer["card_id"], older["card_id"],
                            ProposalEdge.MERGE, f"{pair} are near-identical (cosine {score:.2f}): "
                            "merge the newer into the older", score)
        elif kinds == {"state"}:
            yield _item_duplicate(older, newer, f"near-identical embeddings (cosine {score:.2f})",
                                  score)
        else:
            knowledge, state = (a, b) if a["kind"] == "knowledge" else (b, a)
            yield Candidate(ProposalKind.DUPLICATE, knowledge["card_id"], state["card_id"],
                            ProposalEdge.RELATED_TO, f"{_name(knowledge)} says what {_name(state)} "
                            f"says (cosine {score:.2f}): link it related_to the slot", score)


def _text(card: Row) -> str:
    return f'{card["title"] or ""}\n{card["content"]}'


def _item_duplicate(older: Row, newer: Row, why: str, score: float) -> Candidate:
    return Candidate(ProposalKind.DUPLICATE, newer["card_id"], older["card_id"],
                     ProposalEdge.UPDATES, f'{older["subject"]}/{older["label"]} holds '
                     f'"{_quote(newer["content"])}" and "{_quote(older["content"])}" as two items '
                     f"that say the same ({why}): revise the newer to read as the older", score)


def _same_items(items: Sequence[Row]) -> Iterator[Candidate]:
    """Items of one multi-value slot in the same words."""
    for a, b in combinations(items, 2):
        if a["aggregate_id"] == b["aggregate_id"] and same_words(a["content"], b["content"]):
            yield _item_duplicate(*_by_age(a, b), "the same words", 1.0)


def _same_concept(singles: Sequence[Row]) -> Iterator[Candidate]:
    """Current values of two single-value slots of one subject (and scope, and perspective)
    whose labels name the same concept, that differ."""
    def whose(card: Row) -> tuple[Any, ...]:
        return (card["subject"], card["scope"], card["project_id"], card["group_id"],
                card["perspective"])

    for a, b in combinations(singles, 2):
        shared = label_concepts(a["label"]) & label_concepts(b["label"])
        if whose(a) != whose(b) or a["aggregate_id"] == b["aggregate_id"] or not shared \
                or same_value(a["content"], b["content"]):
            continue
        older, newer = _by_age(a, b)
        yield Candidate(
            ProposalKind.CONTRADICTION, older["card_id"], newer["card_id"], ProposalEdge.SUPERSEDES,
            f"{_name(older)} and {_name(newer)} are both current and both give the "
            f"{'/'.join(sorted(shared))} of {older['subject']}, which holds one value: the newer "
            f"supersedes the older in {older['label']}", CONCEPT_SCORE)


def _both_valid(pairs: Sequence[Row], cards: Mapping[UUID, Row]) -> Iterator[Candidate]:
    """Values of a single-value slot a person settled ``both_valid``, on touching stretches."""
    for row in pairs:
        a, b = cards.get(row["a_id"]), cards.get(row["b_id"])
        if a is None or b is None or same_value(a["content"], b["content"]):
            continue
        earlier, later = sorted((a, b), key=lambda c: c["valid_from"])
        if later["valid_to"] is not None:  # a later value took over since: history, not a clash
            continue
        yield Candidate(
            ProposalKind.CONTRADICTION, earlier["card_id"], later["card_id"],
            ProposalEdge.SUPERSEDES,
            f'{earlier["subject"]}/{earlier["label"]} was settled both_valid: '
            f'"{_quote(earlier["content"])}" from {earlier["valid_from"]:%Y-%m-%d} to '
            f'{later["valid_from"]:%Y-%m-%d}, then "{_quote(later["content"])}"; if the first '
            "never held, the later value supersedes it over that stretch too", BOTH_VALID_SCORE)


def find_candidates(rows: Mapping[str, Sequence[Row]], similarity: float,
                    contradiction: float) -> list[Candidate]:
    """What a scan proposes from its rows (:meth:`ReadModels.consolidation_rows`): each pair once,
    none already linked (the cards or their slots) or proposed."""
    cards = {card["card_id"]: card for card in rows["cards"]}
    near = near_pairs(rows["vectors"], min(similarity, contradiction))
    found = [*_same_items(rows["items"]), *_near(near, cards, similarity, contradiction),
             *_same_concept(rows["singles"]), *_both_valid(rows["both_valid"], cards)]
    taken = {frozenset((r["src_id"], r["dst_id"])) for r in (*rows["links"], *rows["proposed"])}

    def ends(card_id: UUID) -> set[UUID]:
        card = cards.get(card_id)
        return {card_id} if card is None else {card_id, card["aggregate_id"]}

    chosen: dict[frozenset[UUID], Candidate] = {}
    for candidate in found:
        linked = any(frozenset((x, y)) in taken for x in ends(candidate.src_id)
                     for y in ends(candidate.dst_id))
        if not linked and candidate.pair not in chosen:
            chosen[candidate.pair] = candidate
    return list(chosen.values())

