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

import hashlib
import math
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
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

#: A unit's cards: those of the units read whole (``read``), and of every other unit only the
#: cards the read ones found (``probed``). A unit's weight comes with it (:class:`Plan`).
_WEIGHED = """WITH q(term, unit, weight) AS (
    SELECT * FROM unnest(%(words)s::text[], %(units)s::int[], %(weights)s::float8[])),
found AS MATERIALIZED (SELECT * FROM (
    SELECT t.card_id, q.unit, q.weight, t.recorded_at FROM {s}.card_terms t JOIN q ON q.term = t.term
    WHERE t.term = ANY(%(read)s::text[]) AND {live}{scope}{mentions_read}) AS r LIMIT %(read_cap)s),
probed AS (
    SELECT t.card_id, q.unit, q.weight, t.recorded_at FROM {s}.card_terms t JOIN q ON q.term = t.term
    WHERE t.term = ANY(%(probed)s::text[]) AND t.card_id = ANY(ARRAY(SELECT card_id FROM found))
      AND {live}{scope}{mentions_probed}),
per_card AS (
    SELECT card_id, unit, max(weight) AS weight, max(recorded_at) AS recorded_at
    FROM (SELECT * FROM found UNION ALL SELECT * FROM probed) AS x GROUP BY card_id, unit)
SELECT card_id, sum(weight) AS weight, max(recorded_at) AS recorded_at
FROM per_card GROUP BY card_id"""

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
#: bigrams index (jieba cuts a name it does not know into characters, which are no terms); read
#: whole, or only on the cards the read units found.
_MENTION = """
    UNION ALL SELECT c.card_id, {unit}, {weight}, c.recorded_at FROM {s}.cards c
    WHERE c.bigrams OPERATOR({s}.@>) {pairs}::text[] AND {seen}{among}"""

#: The N of the weights: the tenant's valid cards, counted from the ``cards_current`` index alone
#: (its predicate; an erased card, rare, still counts) — a scan of ``cards`` costs a page per few
#: cards (about 160 ms at 100k cards against 6 ms).
_TOTAL = "SELECT count(*) AS n FROM {s}.cards c WHERE c.retracted_at IS NULL AND c.valid_to IS NULL"

#: How many of the tenant's current cards hold each word (from the words index alone), and
#: mention each name (through the bigrams index).
_TERM_COUNTS = """SELECT t.term AS word, count(*) AS n FROM {s}.card_terms t
WHERE t.term = ANY(%(terms)s::text[]) AND t.live GROUP BY t.term"""
_NAME_COUNT = """SELECT count(*) AS n FROM {s}.cards c WHERE c.bigrams OPERATOR({s}.@>) %(pairs)s::text[]
  AND c.erased_at IS NULL AND """ + predicates.CURRENT

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
        # the first of the query's terms that names it: the same unit in every process
        naming = concept_terms(name)
        joined = next((i for i, term in enumerate(found) if term in naming), None)
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


class Counts:
    """Counts that move the weights little, read at most once per ``ttl`` seconds per tenant:
    how many valid cards the tenant has (the N of inverse document frequency) and how many
    hold each word or mention each name (a unit's document frequency)."""

    def __init__(self, ttl: float = 60.0, clock: Callable[[], float] = time.monotonic,
                 size: int = 100_000) -> None:
        self.ttl = ttl
        self.clock = clock
        self.size = size
        #: Keyed by a digest of the tenant, kind and word: no word or name of a tenant's is held.
        self._counts: dict[bytes, tuple[float, int]] = {}
        self._lock = threading.Lock()

    def total(self, conn: psycopg.Connection[Any], ctx: RouteContext, tenant_id: str) -> int:
        return self._get(tenant_id, "total", [""], lambda _: self._read_total(conn, ctx))[""]

    def terms(self, conn: psycopg.Connection[Any], ctx: RouteContext, tenant_id: str,
              words: Collection[str]) -> dict[str, int]:
        def read(missing: list[str]) -> dict[str, int]:
            rows = conn.execute(sql.SQL(_TERM_COUNTS).format(s=ctx.s), {"terms": missing})
            return {word: 0 for word in missing} | {row["word"]: int(row["n"]) for row in rows}
        return self._get(tenant_id, "term", words, read)

    def names(self, conn: psycopg.Connection[Any], ctx: RouteContext, tenant_id: str,
              names: Collection[str]) -> dict[str, int]:
        def read(missing: list[str]) -> dict[str, int]:
            statement = sql.SQL(_NAME_COUNT).format(s=ctx.s)
            counted = {}
            for name in missing:
                row = conn.execute(statement, {"pairs": list(cjk_bigrams(name))}).fetchone()
                counted[name] = int(row["n"]) if row else 0
            return counted
        return self._get(tenant_id, "name", names, read)

    def _read_total(self, conn: psycopg.Connection[Any], ctx: RouteContext) -> dict[str, int]:
        row = conn.execute(sql.SQL(_TOTAL).format(s=ctx.s)).fetchone()
        return {"": int(row["n"]) if row else 0}

    def _get(self, tenant_id: str, kind: str, keys: Collection[str],
             read: Callable[[list[str]], dict[str, int]]) -> dict[str, int]:
        now = self.clock()
        found, missing = {}, []
        with self._lock:
            for key in dict.fromkeys(keys):
                cached = self._counts.get(_digest(tenant_id, kind, key))
                if cached is not None and now - cached[0] < self.ttl:
                    found[key] = cached[1]
                else:
                    missing.append(key)
        if not missing:
            return found
        counted = read(missing)
        with self._lock:
            if len(self._counts) + len(counted) > self.size:
                self._counts.clear()
            for key, count in counted.items():
                self._counts[_digest(tenant_id, kind, key)] = (now, count)
        return found | counted


def _digest(tenant_id: str, kind: str, key: str) -> bytes:
    return hashlib.blake2b("\0".join((tenant_id, kind, key)).encode(), digest_size=16).digest()


def idf(total: int, frequency: int) -> float:
    """BM25's inverse document frequency of a unit on ``frequency`` of ``total`` cards."""
    return math.log(1 + (max(total, 1) - frequency + 0.5) / (frequency + 0.5))


#: The subjects of a tenant's slots the query may see (the slot stage's catalogue).
Subjects = Callable[[psycopg.Connection[Any], RouteContext, RetrievalQuery, str], set[str]]


class TagsRoute(PlainRoute):
    name = "tags"

    def __init__(self, subjects: Subjects | None = None) -> None:
        self.counts = Counts()
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
        named_terms = {n for subject in named for n in subject_terms(subject)}
        mentioned = {unit: name for unit, name in enumerate(names) if name in named_terms}
        live = sql.SQL("true" if query.as_of else "t.live")
        scope = sql.SQL(" AND ") + scope_of("t")
        note = "terms: " + " | ".join(names)
        if len(names) == 1 and not mentioned:
            weighed: sql.Composable = sql.SQL(_ONE_UNIT).format(s=ctx.s, live=live, scope=scope)
            rows = self._rows(conn, ctx, query, weighed, {"words": words})
            return Hits([row["card_id"] for row in rows], note, [1.0] * len(rows))
        total = max(self.counts.total(conn, ctx, tenant_id), 1)
        plan = Plan.of(words, unit_of, names, mentioned, total, ctx.settings.tags_common,
                       self.counts.terms(conn, ctx, tenant_id, words),
                       self.counts.names(conn, ctx, tenant_id, mentioned.values()))
        seen = (predicates.not_erased() + sql.SQL(" AND ")
                + (sql.SQL("true") if query.as_of else predicates.current())
                + sql.SQL(" AND ") + scope_of("c"))

        def mentions(read: bool) -> sql.Composable:
            return sql.SQL("").join(sql.SQL(_MENTION).format(
                unit=sql.Literal(unit), weight=sql.Literal(plan.weights[unit]), s=ctx.s,
                pairs=sql.Placeholder(f"pairs{unit}"), seen=seen,
                among=sql.SQL("" if read else " AND c.card_id = ANY(ARRAY(SELECT card_id FROM found))"))
                for unit in mentioned if (unit in plan.read) == read)

        weighed = sql.SQL(_WEIGHED).format(s=ctx.s, live=live, scope=scope, mentions_read=mentions(True),
                                           mentions_probed=mentions(False))
        rows = self._rows(conn, ctx, query, weighed, {
            "words": words, "units": unit_of, "weights": [plan.weights[u] for u in unit_of],
            "read": plan.words(words, unit_of, read=True),
            "probed": plan.words(words, unit_of, read=False), "read_cap": plan.read_cap,
            **{f"pairs{unit}": list(cjk_bigrams(name)) for unit, name in mentioned.items()}})
        # a lone CJK character counts only where a card is tagged with it
        counted = [i for i, name in enumerate(names) if not _single_han(name)]
        strengths = [plan.strength(row, total, counted) for row in rows]
        return Hits([row["card_id"] for row in rows], note + plan.note(names), strengths)

    def _rows(self, conn: psycopg.Connection[Any], ctx: RouteContext, query: RetrievalQuery,
              weighed: sql.Composable, values: dict[str, Any]) -> list[dict[str, Any]]:
        statement = (sql.SQL(_AS_OF).format(weighed=weighed, s=ctx.s, visible=ctx.visible(query))
                     if query.as_of else sql.SQL(_CURRENT).format(weighed=weighed))
        return conn.execute(statement, {**parameters(query), **values,
                                        "limit": ctx.settings.tags_limit}).fetchall()


@dataclass(frozen=True)
class Plan:
    """Which units are read whole and which only counted on the cards those found, and each
    unit's weight. A unit on at most ``common`` cards is read whole; a commoner one (a person's
    name on thousands of cards) is counted only on the cards a rarer unit found, so the route
    reads rows in proportion to its rarest words, not its commonest. When every unit is common
    the rarest is read, at most ``common`` of its rows (in the words index's order: a sample, not
    the newest), so that no question reads more rows than that for its weakest evidence. A name
    mentioned in cards' text is read whole when it is on no more cards than those read (checking
    it on a card reads the card's row)."""

    weights: dict[int, float]
    read: frozenset[int]
    #: Most rows read: none but the units' own sizes when a rare one is read, ``common`` when
    #: every unit is common (the rarest one's first cards in the words index).
    read_cap: int | None
    #: The units some card holds, and their summed weight.
    found: frozenset[int]
    held: float

    @classmethod
    def of(cls, words: list[str], unit_of: list[int], names: list[str], mentioned: dict[int, str],
           total: int, common: int, term_counts: dict[str, int], name_counts: dict[str, int]) -> Plan:
        frequency = dict.fromkeys(range(len(names)), 0)
        for word, unit in zip(words, unit_of, strict=True):
            frequency[unit] += term_counts.get(word, 0)  # a card holding two words of one unit: rare
        for unit, name in mentioned.items():
            frequency[unit] += name_counts.get(name, 0)
        found = frozenset(unit for unit, n in frequency.items() if n > 0)
        rare = frozenset(unit for unit in found if frequency[unit] <= common)
        read = rare or frozenset(sorted(found, key=lambda unit: (frequency[unit], unit))[:1])
        cap = None if rare else common
        # a name is checked in a card's own row: cheaper read whole than on more cards found
        size = sum(frequency[u] for u in read) if cap is None else cap
        read |= {unit for unit in mentioned if unit in found and frequency[unit] <= size}
        weights = {unit: idf(total, n) for unit, n in frequency.items()}
        return cls(weights, read, cap, found, sum(weights[unit] for unit in found))

    def words(self, words: list[str], unit_of: list[int], *, read: bool) -> list[str]:
        return [word for word, unit in zip(words, unit_of, strict=True)
                if (unit in self.read) == read and unit in self.found]

    def strength(self, row: dict[str, Any], total: int, counted: list[int]) -> float:
        """The share of the query's unit weight a card holds. A unit no card holds (a word only
        the fuzzy route may find) counts as if one card held it: a card holding one word of a
        question of four is no full match."""
        unknown = len(set(counted) - self.found)
        return min(1.0, row["weight"] / max(self.held + unknown * idf(total, 1), 1e-9))

    def note(self, names: list[str]) -> str:
        counted = [names[unit] for unit in sorted(self.found - self.read)]
        return f"; counted where a rarer one is: {' | '.join(counted)}" if counted else ""


def named_in(text: str, subjects: Collection[str]) -> set[str]:
    """The subjects whose whole Chinese name the text holds (Latin names are terms already)."""
    folded = fold(text)
    return {s for s in subjects if (names := subject_terms(s)) and len(names) == 1
            and not names[0].isascii() and names[0] in folded}


def _single_han(term: str) -> bool:
    return len(term) == 1 and not term.isascii()
