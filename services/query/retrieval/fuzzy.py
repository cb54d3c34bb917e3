"""Fuzzy route: character level, no segmentation, on the query's words that no card holds verbatim
(those are the tags route's hits: fuzzy is for what is misspelt or segmented differently), time
words left to the temporal route.

CJK: the share of the query's character bigrams a card contains, and at least two of them when the
query has two or more: one shared pair is chance (工作 sits inside 工作坊 in thousands of cards), and
a card is found through the index by a pair of them, never by one common bigram alone; Latin: pg_trgm
``word_similarity`` of the query's words (stop words and words under four letters dropped) to the
card's folded text. Both measure how much of the *query* the card holds, in [0, 1], so the higher
one wins. A card must reach ``fuzzy_threshold`` on bigrams or ``fuzzy_trigram_threshold`` on
trigrams (short Latin words share trigrams by chance, so that bar is higher). Top ``fuzzy_top_k``,
each as strong as that similarity."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg import sql

from projections.text import cjk_bigrams, latin_words, terms, tokenize
from services.query.retrieval.query import (
    Hits,
    PlainRoute,
    RetrievalQuery,
    RouteContext,
    parameters,
    shared_count,
)

#: Bigrams of a query beyond this many are not counted (the first ones are); a card is looked up
#: by any two of them, so this many make n·(n−1)/2 index conditions.
MAX_BIGRAMS = 12
#: A Latin word shorter than this has too few trigrams to tell a typo from chance ("now" shares
#: most of its own with "know", "snow", "November"): it is left to the other routes.
MIN_TRIGRAM_WORD = 4
_TRIGRAMS = "word_similarity(%(latin)s, c.fuzzy_text)"

_SQL = """SELECT card_id, greatest(b, t) AS similarity FROM (
    SELECT c.card_id, c.recorded_at, {shared} AS shared, {bigram} AS b, {trigram} AS t
    FROM {s}.cards c WHERE ({match}) AND {visible}) AS m
WHERE (b >= %(threshold)s AND shared >= %(least_shared)s) OR t >= %(trigram_threshold)s
ORDER BY greatest(b, t) DESC, recorded_at DESC, card_id LIMIT %(limit)s"""


_KNOWN = """SELECT t FROM unnest(%(terms)s::text[]) AS t
WHERE EXISTS (SELECT 1 FROM {s}.card_terms k WHERE k.term = t)"""


def unknown_words(conn: psycopg.Connection[Any], ctx: RouteContext, text: str) -> list[str]:
    """The words of ``text`` that no card of the tenant holds as a term: a word some card holds
    verbatim is the tags route's hit; what is left is what may be misspelt or cut differently."""
    words = {word: terms(word) for word in dict.fromkeys(tokenize(text))}
    wanted = sorted({term for found in words.values() for term in found})
    statement = sql.SQL(_KNOWN).format(s=ctx.s)
    known = {row["t"] for row in conn.execute(statement, {"terms": wanted}).fetchall()} if wanted else set()
    return [word for word, found in words.items() if not found or not set(found) <= known]


def bigram_match(count: int, s: sql.Composable) -> sql.Composable:
    """The index condition for a card holding two of the query's ``count`` bigrams (named ``b0``,
    ``b1`` … by :func:`shared_count`), or the one when there is only one. With the read schema
    ``s``'s own ``@>``, which drives ``cards_bigrams`` under row-level security
    (:mod:`projections.search_ops`)."""
    if count == 1:
        return sql.SQL("c.bigrams OPERATOR({}.@>) ARRAY[%(b0)s]::text[]").format(s)
    return sql.SQL(" OR ").join(
        sql.SQL("c.bigrams OPERATOR({}.@>) ARRAY[{}, {}]::text[]").format(
            s, sql.Placeholder(f"b{i}"), sql.Placeholder(f"b{j}"))
        for i, j in itertools.combinations(range(count), 2))


def trigram_match(s: sql.Composable) -> sql.Composable:
    """The index condition for a card whose text holds a word like ``%(latin)s`` (word similarity
    at least ``pg_trgm.word_similarity_threshold``), with the read schema ``s``'s own ``<%``:
    it drives ``cards_trigrams`` under row-level security (:mod:`projections.search_ops`)."""
    return sql.SQL("%(latin)s OPERATOR({}.<%%) c.fuzzy_text").format(s)


class FuzzyRoute(PlainRoute):
    name = "fuzzy"

    def settings(self, ctx: RouteContext) -> Mapping[str, str]:
        # the index finds what ``<%`` accepts: the trigram bar itself
        return {"pg_trgm.word_similarity_threshold": str(ctx.settings.fuzzy_trigram_threshold)}

    def idle(self, query: RetrievalQuery, **extra: Any) -> str | None:
        return None if query.words.strip() else "no words in the query"

    def __call__(self, conn: psycopg.Connection[Any], query: RetrievalQuery, ctx: RouteContext,
                 **extra: Any) -> Hits:
        words = unknown_words(conn, ctx, query.words)
        if not words:
            return Hits([], "every word is a known term (the tags route's)")
        text = " ".join(words)
        # a lone character is no fuzzy evidence: it sits inside thousands of words
        bigrams = [b for b in cjk_bigrams(text) if len(b) == 2][:MAX_BIGRAMS]
        latin = " ".join(w for w in latin_words(text) if len(w) >= MIN_TRIGRAM_WORD)
        if not bigrams and not latin:
            return Hits([], "nothing to match")
        matches: list[sql.Composable] = []
        if bigrams:
            matches.append(bigram_match(len(bigrams), ctx.s))
        if latin:
            matches.append(trigram_match(ctx.s))
        shared, names = shared_count("c.bigrams", "b", bigrams)
        bigram = shared + sql.SQL("::float4 / %(nbigrams)s") if bigrams else sql.SQL("0::float4")
        statement = sql.SQL(_SQL).format(
            s=ctx.s, visible=ctx.visible(query), match=sql.SQL(" OR ").join(matches),
            shared=shared, bigram=bigram, trigram=sql.SQL(_TRIGRAMS if latin else "0::float4"))
        settings = ctx.settings
        rows = conn.execute(statement, {
            **parameters(query), **names, "nbigrams": len(bigrams), "least_shared": min(2, len(bigrams)),
            "latin": latin,
            "threshold": settings.fuzzy_threshold, "trigram_threshold": settings.fuzzy_trigram_threshold,
            "limit": settings.fuzzy_top_k}).fetchall()
        return Hits([row["card_id"] for row in rows], "words: " + " | ".join(words),
                    [min(1.0, float(row["similarity"])) for row in rows])
