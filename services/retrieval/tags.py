"""Tags route: the query's terms (jieba for Chinese with the Traditional dictionary, plain words
for Latin; normalised like card tags, so 資料庫 meets 数据库 and JWT meets "json web token") against
each card's terms and tags, and the words of a state card's label ("launch date" meets
``launch_date``) or that it names by a known word (``services/retrieval/lexicon.py``: "live", 住 →
``address``). Every hit counts, ranked by how many query terms it shares, then the
newest first; ``tags_limit`` only caps a term that half the cards carry."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from projections.text import terms
from services.retrieval.lexicon import labels_named
from services.retrieval.query import Hits, RetrievalQuery, RouteContext, parameters

_SQL = """WITH slot_words AS (
    SELECT slot_id, words FROM (
        SELECT slot_id, label, regexp_split_to_array(lower(translate(label, '_-', '  ')),
                                              '\\s+') AS words FROM {s}.slots) AS w
    WHERE words && %(terms)s::text[] OR label = ANY(%(labels)s::text[]))
SELECT c.card_id, (w.slot_id IS NOT NULL)::int + cardinality(ARRAY(
    SELECT unnest(c.terms || coalesce(w.words, '{{}}')) INTERSECT SELECT unnest(%(terms)s::text[]))) AS shared
FROM {s}.cards c LEFT JOIN slot_words w ON w.slot_id = c.aggregate_id
WHERE (c.terms && %(terms)s::text[] OR w.slot_id IS NOT NULL) AND c.card_id IN ({visible})
ORDER BY shared DESC, c.recorded_at DESC, c.card_id LIMIT %(limit)s"""


class TagsRoute:
    name = "tags"

    def __call__(self, conn: psycopg.Connection[Any], query: RetrievalQuery, ctx: RouteContext) -> Hits:
        wanted = list(terms(query.text))
        if not wanted:
            return Hits([], "no terms in the query")
        statement = sql.SQL(_SQL).format(s=ctx.s, visible=ctx.visible(query))
        labels = labels_named(wanted)
        rows = conn.execute(statement, {**parameters(query), "terms": wanted, "labels": labels,
                                        "limit": ctx.settings.tags_limit}).fetchall()
        note = "terms: " + " | ".join(wanted) + (f"; labels: {', '.join(labels)}" if labels else "")
        return Hits([row["card_id"] for row in rows], note)
