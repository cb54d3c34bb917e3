"""Tags route: the query's terms (jieba for Chinese with the Traditional dictionary, plain words
for Latin; normalised like card tags, so 資料庫 meets 数据库 and JWT meets "json web token") against
each card's terms and tags, the words of a state card's slot ("fibon launch date" meets
``fibon/launch_date``; the user's own subject is no evidence) or a label or memory type it names
by a known word (``services/retrieval/lexicon.py``: "live", 住 → ``address``). Every hit counts,
ranked by how many query terms it shares, then the newest first; ``tags_limit`` only caps a term
that half the cards carry."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from projections.text import terms
from services.retrieval.lexicon import labels_named, types_named
from services.retrieval.query import Hits, RetrievalQuery, RouteContext, parameters, shared_count

_SLOT_WORDS = """WITH slot_words AS MATERIALIZED (
    SELECT slot_id, words FROM (
        SELECT slot_id, label, regexp_split_to_array(lower(translate(
            CASE WHEN lower(subject) = ANY(%(default_subjects)s::text[]) THEN label
                 ELSE subject || ' ' || label END, '_-', '  ')), '\\s+') AS words
        FROM {s}.slots) AS w
    WHERE words && %(terms)s::text[] OR label = ANY(%(labels)s::text[]))"""

#: One branch per way in, each on its own index (GIN on terms, the slot index, the type index);
#: UNION drops the card a second branch finds again (its row is the same).
_BRANCH = """SELECT c.card_id, c.recorded_at, (w.slot_id IS NOT NULL
        OR c.memory_type = ANY(%(types)s::text[]))::int + {shared} AS shared
    FROM {source} WHERE {where} AND {visible}"""

_SOURCES = (
    ("{s}.cards c LEFT JOIN slot_words w ON w.slot_id = c.aggregate_id", "c.terms && %(terms)s::text[]"),
    ("slot_words w JOIN {s}.cards c ON c.aggregate_id = w.slot_id", "true"),
)
_BY_TYPE = ("{s}.cards c LEFT JOIN slot_words w ON w.slot_id = c.aggregate_id",
            "c.memory_type = ANY(%(types)s::text[])")

_SQL = """{slot_words}
SELECT card_id FROM ({branches}) AS hits
ORDER BY shared DESC, recorded_at DESC, card_id LIMIT %(limit)s"""


#: Terms of a query beyond this many are not matched (the first ones are).
MAX_TERMS = 32

#: Subjects that stand for the user: every personal slot has one, so they say nothing.
DEFAULT_SUBJECTS = ("user", "me", "i", "self", "我")


class TagsRoute:
    name = "tags"

    def __call__(self, conn: psycopg.Connection[Any], query: RetrievalQuery, ctx: RouteContext) -> Hits:
        wanted = list(terms(query.words))[:MAX_TERMS]
        if not wanted:
            return Hits([], "no terms in the query")
        labels, types = labels_named(wanted), types_named(wanted)
        shared, names = shared_count("(c.terms || coalesce(w.words, '{}'))", "t", wanted)
        branches = sql.SQL("\n    UNION\n    ").join(
            sql.SQL(_BRANCH).format(source=sql.SQL(source).format(s=ctx.s), where=sql.SQL(where),
                                    visible=ctx.visible(query), shared=shared)
            for source, where in (*_SOURCES, *([_BY_TYPE] if types else [])))
        statement = sql.SQL(_SQL).format(slot_words=sql.SQL(_SLOT_WORDS).format(s=ctx.s),
                                         branches=branches)
        rows = conn.execute(statement, {
            **parameters(query), **names, "terms": wanted, "labels": labels, "types": types,
            "default_subjects": list(DEFAULT_SUBJECTS), "limit": ctx.settings.tags_limit}).fetchall()
        named = (("labels", labels), ("types", types))
        note = "terms: " + " | ".join(wanted) + "".join(
            f"; {name}: {', '.join(found)}" for name, found in named if found)
        return Hits([row["card_id"] for row in rows], note)
