"""Tags route: the query's terms (jieba for Chinese with the Traditional dictionary, plain words
for Latin, English stemmed; normalised like card tags, so 資料庫 meets 数据库 and JWT meets "json
web token") against the words each card can be found by (``card_terms``, kept by the database
from ``cards``): its terms and tags, the words of a state card's slot ("fibon launch date" meets
``fibon/launch_date``; the user's own subject is no evidence), and the labels or memory type of a
concept the query names (``services/query/retrieval/lexicon.py``: "live", 住 → ``address``,
``home_city`` …).

Terms are weighed by how rare they are among the tenant's cards (BM25's inverse document
frequency): a person's name on every card of theirs says little, a word on two cards says much. A
query term and the labels it names are one *unit* (a card holds either "live" or an address
label, and counts once). A hit's strength is the share of the query's unit weight it holds; hits
rank by it, then the newest first; ``tags_limit`` caps them.

A person's Chinese name (a subject of the tenant's slots the query names) is matched as a term, and
in any card's text through the bigrams index: jieba cuts names it does not know into characters.
The counts are read from the words index alone: a common term matches thousands of cards, and
reading their rows would cost a page each. An as-of query then checks the cards it found against
the version known at the time."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Collection
from typing import Any

import psycopg
from psycopg import sql

from projections import predicates
from projections.schema import LABEL_WORD, TYPE_WORD
from projections.text import cjk_bigrams, fold, query_terms, subject_terms
from services.query.retrieval.lexicon import CONCEPTS, concept_terms, concepts_named, types_named
from services.query.retrieval.query import (
    Hits,
    PlainRoute,
    RetrievalQuery,
    RouteContext,
    parameters,
    scope_of,
)

_WEIGHED = """WITH q(term, unit) AS (SELECT * FROM unnest(%(words)s::text[], %(units)s::int[])),
per_card AS MATERIALIZED (
    SELECT m.card_id, m.unit, max(m.recorded_at) AS recorded_at FROM (
        SELECT t.card_id, q.unit, t.recorded_at FROM {s}.card_terms t JOIN q ON q.term = t.term
        WHERE t.term = ANY(%(words)s::text[]) AND {live}{scope}{mentions}) AS m
    GROUP BY m.card_id, m.unit),
units AS (SELECT unit, ln(1 + (%(total)s::float8 - count(*) + 0.5) / (count(*) + 0.5)) AS weight
          FROM per_card GROUP BY unit)
SELECT p.card_id, sum(u.weight) AS weight, max(p.recorded_at) AS recorded_at,
       (SELECT sum(weight) FROM units) AS found, (SELECT array_agg(unit) FROM units) AS found_units
FROM per_card p JOIN units u USING (unit) GROUP BY p.card_id"""

#: One unit: every hit holds all the query's weight, so nothing needs weighing.
_ONE_UNIT = """SELECT card_id, 1::float8 AS weight, recorded_at FROM (
    SELECT t.card_id, max(t.recorded_at) AS recorded_at FROM {s}.card_terms t
    WHERE t.term = ANY(%(words)s::text[]) AND {live}{scope} GROUP BY t.card_id) AS hits"""

_CURRENT = """SELECT * FROM ({weighed}) AS hits
ORDER BY weight DESC, recorded_at DESC, card_id LIMIT %(limit)s"""

_AS_OF = """SELECT hits.* FROM ({weighed}) AS hits
JOIN {s}.cards c ON c.card_id = hits.card_id WHERE {visible}
ORDER BY hits.weight DESC, hits.recorded_at DESC, c.card_id LIMIT %(limit)s"""

#: Cards whose text mentions a subject's Chinese name: all of its character pairs, through the
#: bigrams index (jieba cuts a name it does not know into characters, which are no terms).
_MENTION = """
    UNION ALL SELECT c.card_id, {unit}, c.recorded_at FROM {s}.cards c
    WHERE c.bigrams @> {pairs}::text[] AND {seen}"""

#: The N of the weights: the tenant's valid cards, counted from the ``cards_current`` index alone
#: (its predicate; an erased card, rare, still counts) — a scan of ``cards`` costs a page per few
#: cards (about 160 ms at 100k cards against 6 ms).
_TOTAL = "SELECT count(*) AS n FROM {s}.cards c WHERE c.retracted_at IS NULL AND c.valid_to IS NULL"

#: Terms of a query beyond this many are not matched (the first ones are).
MAX_TERMS = 32


def units(text: str, subjects: Collection[str] = (), lexicon: bool = True,
          ) -> tuple[list[str], list[int], list[str]]:
    """What the query looks up in ``card_terms`` — its terms, the subjects it names whose names
    are no term of it (a Chinese name jieba cuts into characters), and the labels and memory
    types it names in the index's spelling — each word with its unit, and the unit names for the
    note. A concept named by one of the query's terms joins that term's unit (none with
    ``lexicon`` off: the ``lexicon`` retrieval setting)."""
    found = list(query_terms(text))[:MAX_TERMS]
    found += [name for subject in sorted(subjects) for name in subject_terms(subject)
              if name not in found]
    words: list[str] = []
    unit_of: list[int] = []
    names = list(found)
    for index, term in enumerate(found):
        words.append(term)
        unit_of.append(index)
    by_name = {concept.name: concept for concept in CONCEPTS}
    for name in sorted(concepts_named(text)) if lexicon else ():
        joined = next((found.index(t) for t in concept_terms(name) if t in found), None)
        unit = len(names) if joined is None else joined
        if joined is None:
            names.append(name)
        for label in by_name[name].labels:
            words.append(LABEL_WORD + label)
            unit_of.append(unit)
    for memory_type in types_named(found):
        joined = next(i for i, t in enumerate(found) if memory_type in types_named([t]))
        words.append(TYPE_WORD + memory_type)
        unit_of.append(joined)
    return words, unit_of, names


class TenantTotals:
    """How many valid cards each tenant has (the N of inverse document frequency), counted at most
    once per ``ttl`` seconds: a count moves the weights little, and costs a scan."""

    def __init__(self, ttl: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.clock = clock
        self._counts: dict[str, tuple[float, int]] = {}
        self._lock = threading.Lock()

    def get(self, conn: psycopg.Connection[Any], ctx: RouteContext, tenant_id: str) -> int:
        now = self.clock()
        with self._lock:
            cached = self._counts.get(tenant_id)
        if cached is not None and now - cached[0] < self.ttl:
            return cached[1]
        row = conn.execute(sql.SQL(_TOTAL).format(s=ctx.s)).fetchone()
        count = int(row["n"]) if row else 0
        with self._lock:
            if len(self._counts) > 10_000:
                self._counts.clear()
            self._counts[tenant_id] = (now, count)
        return count


#: The subjects of a tenant's slots the query may see (the slot stage's catalogue).
Subjects = Callable[[psycopg.Connection[Any], RouteContext, RetrievalQuery, str], set[str]]


class TagsRoute(PlainRoute):
    name = "tags"

    def __init__(self, subjects: Subjects | None = None) -> None:
        self.totals = TenantTotals()
        self.subjects = subjects

    def idle(self, query: RetrievalQuery, **extra: Any) -> str | None:
        return None if any(query_terms(query.words)) else "no terms in the query"

    def __call__(self, conn: psycopg.Connection[Any], query: RetrievalQuery, ctx: RouteContext,
                 tenant_id: str = "", **extra: Any) -> Hits:
        named = named_in(query.words, self.subjects(conn, ctx, query, tenant_id)) \
            if self.subjects is not None else set()
        words, unit_of, names = units(query.words, named, ctx.settings.lexicon)
        if not words:
            return Hits([], "no terms in the query")
        pairs = {f"pairs{unit}": list(cjk_bigrams(name)) for unit, name in enumerate(names)
                 if name in {n for subject in named for n in subject_terms(subject)}}
        seen = (predicates.not_erased() + sql.SQL(" AND ")
                + (sql.SQL("true") if query.as_of else predicates.current())
                + sql.SQL(" AND ") + scope_of("c"))
        mentions = sql.SQL("").join(
            sql.SQL(_MENTION).format(unit=sql.Literal(int(key[5:])), s=ctx.s, pairs=sql.Placeholder(key),
                                     seen=seen) for key in pairs)
        live = sql.SQL("true" if query.as_of else "t.live")
        one_unit = len(names) == 1 and not pairs
        weighed = (sql.SQL(_ONE_UNIT).format(s=ctx.s, live=live, scope=sql.SQL(" AND ") + scope_of("t"))
                   if one_unit else
                   sql.SQL(_WEIGHED).format(s=ctx.s, live=live, scope=sql.SQL(" AND ") + scope_of("t"),
                                            mentions=mentions))
        statement = (sql.SQL(_AS_OF).format(weighed=weighed, s=ctx.s, visible=ctx.visible(query))
                     if query.as_of else sql.SQL(_CURRENT).format(weighed=weighed))
        total = self.totals.get(conn, ctx, tenant_id)
        rows = conn.execute(statement, {
            **parameters(query), **pairs, "words": words, "units": unit_of, "total": max(total, 1),
            "limit": ctx.settings.tags_limit}).fetchall()
        # a lone CJK character counts only where a card is tagged with it
        counted = [i for i, name in enumerate(names) if not _single_han(name)]
        strengths = [1.0 if one_unit else _strength(row, total, counted) for row in rows]
        return Hits([row["card_id"] for row in rows], "terms: " + " | ".join(names), strengths)


def named_in(text: str, subjects: Collection[str]) -> set[str]:
    """The subjects whose whole Chinese name the text holds (Latin names are terms already)."""
    folded = fold(text)
    return {s for s in subjects if (names := subject_terms(s)) and len(names) == 1
            and not names[0].isascii() and names[0] in folded}


def _strength(row: dict[str, Any], total: int, counted: list[int]) -> float:
    """The share of the query's unit weight a card holds. A unit no card holds (a word only the
    fuzzy route may find) counts as if one card held it: a card holding one word of a question
    of four is no full match."""
    unknown = len(set(counted) - set(row["found_units"] or ()))
    rarest = math.log(1 + (max(total, 1) - 0.5) / 1.5)
    return min(1.0, row["weight"] / max(row["found"] + unknown * rarest, 1e-9))


def _single_han(term: str) -> bool:
    return len(term) == 1 and not term.isascii()
