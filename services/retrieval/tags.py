"""Tags route: the query's terms (jieba for Chinese with the Traditional dictionary, plain words
for Latin; normalised like card tags, so 資料庫 meets 数据库 and JWT meets "json web token") against
the words each card can be found by (``card_terms``, kept by the database from ``cards``): its
terms and tags, the words of a state card's slot ("fibon launch date" meets ``fibon/launch_date``;
the user's own subject is no evidence), and a label or memory type the query names by a known word
(``services/retrieval/lexicon.py``: "live", 住 → ``address``). Every hit counts, ranked by how many
of those words it shares, then the newest first; ``tags_limit`` only caps a term that half the
cards carry.

The count is read from the words index alone: a common term matches thousands of cards, and
reading their rows would cost a page each. An as-of query then checks the cards it found against
the version known at the time."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from projections.schema import LABEL_WORD, TYPE_WORD
from projections.text import terms
from services.retrieval.lexicon import labels_named, types_named
from services.retrieval.query import (
    Hits,
    PlainRoute,
    RetrievalQuery,
    RouteContext,
    parameters,
    scope_of,
)

_COUNTED = """SELECT t.card_id, count(*) AS shared, max(t.recorded_at) AS recorded_at
    FROM {s}.card_terms t WHERE t.term = ANY(%(terms)s::text[]) AND {live}{scope}
    GROUP BY t.card_id"""

_CURRENT = """SELECT card_id FROM ({counted}) AS hits
ORDER BY shared DESC, recorded_at DESC, card_id LIMIT %(limit)s"""

_AS_OF = """SELECT c.card_id FROM ({counted}) AS hits JOIN {s}.cards c ON c.card_id = hits.card_id
WHERE {visible}
ORDER BY hits.shared DESC, hits.recorded_at DESC, c.card_id LIMIT %(limit)s"""

#: Terms of a query beyond this many are not matched (the first ones are).
MAX_TERMS = 32


def index_words(query_terms: list[str], labels: list[str], types: list[str]) -> list[str]:
    """What the query looks up in ``card_terms``: its terms, and the labels and memory types it
    names in the index's own spelling."""
    return [*query_terms, *(LABEL_WORD + label for label in labels),
            *(TYPE_WORD + kind for kind in types)]


class TagsRoute(PlainRoute):
    name = "tags"

    def idle(self, query: RetrievalQuery, **extra: Any) -> str | None:
        return None if any(terms(query.words)) else "no terms in the query"

    def __call__(self, conn: psycopg.Connection[Any], query: RetrievalQuery, ctx: RouteContext) -> Hits:
        wanted = list(terms(query.words))[:MAX_TERMS]
        if not wanted:
            return Hits([], "no terms in the query")
        labels, types = labels_named(wanted), types_named(wanted)
        counted = sql.SQL(_COUNTED).format(
            s=ctx.s, live=sql.SQL("true" if query.as_of else "t.live"), scope=sql.SQL(" AND ")
            + scope_of("t"))
        statement = (sql.SQL(_AS_OF).format(counted=counted, s=ctx.s, visible=ctx.visible(query))
                     if query.as_of else sql.SQL(_CURRENT).format(counted=counted))
        rows = conn.execute(statement, {
            **parameters(query), "terms": index_words(wanted, labels, types),
            "limit": ctx.settings.tags_limit}).fetchall()
        named = (("labels", labels), ("types", types))
        note = "terms: " + " | ".join(wanted) + "".join(
            f"; {name}: {', '.join(found)}" for name, found in named if found)
        return Hits([row["card_id"] for row in rows], note)
