"""The SQL of slicing: listings and counts of cards along their six axes (DESIGN §3 "Slicing").

A slice is a set of named filters over the card ``c`` (and, as of a moment, its version ``v``),
joined with AND; each filter names its parameters. The current / as-of predicates are the shared
ones (:mod:`projections.predicates`). Callers pick filters by name from :data:`FILTERS` and a
grouping key from :data:`GROUP_KEYS`: no text of theirs becomes SQL.

Relations: ``card_relations`` joins cards, and a link made to a state card's slot (an event
``affects`` it, knowledge links to it) stands for each card of that slot, so the far end of an
edge is matched on a card's id or its aggregate's.

An erased card is listed as a tombstone (no content, ``erased_at`` set: ``services.query.slicing``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from psycopg import sql

from projections.predicates import CURRENT, NARROWING, SUPERSEDED_AS_OF, VERSION_AS_OF

_EDGE_SEEN = """(%(edge)s::text IS NULL OR r.edge = %(edge)s)
      AND (%(known_at)s::timestamptz IS NULL OR r.recorded_at <= %(known_at)s)"""

#: The far ends of the edges (of type ``%(edge)s``, when given) that touch one of the anchors,
#: as known at ``%(known_at)s`` when given: one index scan per direction.
_ENDS = """{name}_ends (id) AS MATERIALIZED (
    SELECT r.dst_id FROM {s}.card_relations r
      WHERE r.src_id = ANY(ARRAY(SELECT id FROM {name}_anchors)) AND """ + _EDGE_SEEN + """
    UNION ALL SELECT r.src_id FROM {s}.card_relations r
      WHERE r.dst_id = ANY(ARRAY(SELECT id FROM {name}_anchors)) AND """ + _EDGE_SEEN + ")"

#: The cards at those ends: an end's own card, or each card of an end that is a slot.
_AT_ENDS = """, {name}_cards (id) AS MATERIALIZED (SELECT id FROM {name}_ends
    UNION SELECT a.card_id FROM {s}.cards a WHERE a.aggregate_id IN (SELECT id FROM {name}_ends))"""

#: Rows a filter needs once, before any card is read: ``WITH`` entries, by filter.
PRELUDES: dict[str, str] = {
    # the card ``%(related_to)s`` and, for a state card, its slot
    "related_to": """related_anchors (id) AS MATERIALIZED (SELECT %(related_to)s::uuid UNION
    SELECT a.aggregate_id FROM {s}.cards a WHERE a.card_id = %(related_to)s AND a.kind = 'state'),
    """ + (_ENDS + _AT_ENDS).replace("{name}", "related"),
    # the knowledge cards whose tag (normalised: ``%(concept_tag)s``) or title names the concept
    "related_concept": """concept_anchors (id) AS MATERIALIZED (SELECT k.card_id FROM {s}.cards k
    WHERE k.kind = 'knowledge' AND k.retracted_at IS NULL
      AND (%(concept_tag)s::text = ANY(k.tags)
           OR lower(k.title) IN (lower(%(related_concept)s::text), %(concept_tag)s::text))
      AND (%(known_at)s::timestamptz IS NULL OR k.recorded_at <= %(known_at)s)),
    """ + (_ENDS + _AT_ENDS).replace("{name}", "concept"),
    # either end of every edge of type ``%(edge)s``
    "edge": """edge_ends (id) AS MATERIALIZED (
    SELECT r.src_id FROM {s}.card_relations r WHERE """ + _EDGE_SEEN + """
    UNION SELECT r.dst_id FROM {s}.card_relations r WHERE """ + _EDGE_SEEN + ")"
    + _AT_ENDS.replace("{name}", "edge"),
}

#: One condition per filter. ``{valid}`` is the validity seen: the card's, or its version's as of.
FILTERS: dict[str, str] = {
    "kinds": "c.kind = ANY(%(kinds)s::text[])",
    "memory_types": "c.memory_type = ANY(%(memory_types)s::text[])",
    "valid": "{valid} && tstzrange(%(valid_from)s::timestamptz, %(valid_to)s::timestamptz)",
    "recorded_after": "c.recorded_at >= %(recorded_after)s",
    "recorded_before": "c.recorded_at < %(recorded_before)s",
    "occurred_after": "c.occurred_at >= %(occurred_after)s",
    "occurred_before": "c.occurred_at < %(occurred_before)s",
    "recorded_during": "c.recorded_at >= %(recorded_from)s AND c.recorded_at < %(recorded_until)s",
    "occurred_during": "c.occurred_at >= %(occurred_from)s AND c.occurred_at < %(occurred_until)s",
    "scopes": "c.scope = ANY(%(scopes)s::text[])",
    "project_ids": "c.project_id = ANY(%(project_ids)s::text[])",
    "group_ids": "c.group_id = ANY(%(group_ids)s::text[])",
    "subjects": NARROWING["subjects"].format(a="c"),
    "subject_prefix": NARROWING["subject_prefix"].format(a="c"),
    "labels": "c.label = ANY(%(labels)s::text[])",
    "agent_ids": "c.agent_id = ANY(%(agent_ids)s::text[])",
    "session_ids": "c.session_id = ANY(%(session_ids)s::text[])",
    "sources": "c.source = ANY(%(sources)s::text[])",
    "confidence_below": "c.inference_confidence < %(confidence_below)s",
    "confidence_above": "c.inference_confidence > %(confidence_above)s",
    "tags": "c.tags && %(tags)s::text[]",
    "related_to": "c.card_id IN (SELECT id FROM related_cards) AND c.card_id <> %(related_to)s",
    "related_concept": "c.card_id IN (SELECT id FROM concept_cards)",
    "edge": "c.card_id IN (SELECT id FROM edge_cards)",
    "after": "(c.recorded_at, c.card_id) < (%(after_recorded_at)s, %(after_card_id)s)",
}

#: What ``group_by`` may name, and the key each counts under (``t.tag``: one row per tag).
GROUP_KEYS: dict[str, str] = {
    "kind": "c.kind", "memory_type": "c.memory_type", "scope": "c.scope",
    "project_id": "c.project_id", "group_id": "c.group_id", "agent_id": "c.agent_id",
    "session_id": "c.session_id", "source": "c.source", "tag": "t.tag", "subject": "c.subject",
    "label": "c.label",
    "month_recorded": "to_char(c.recorded_at AT TIME ZONE %(time_zone)s::text, 'YYYY-MM')",
}

_COLUMNS = """c.card_id, c.aggregate_id, c.kind, c.memory_type, c.scope, c.project_id, c.group_id,
    c.perspective, c.subject, c.label, {content} AS content, {title} AS title, c.valid_from,
    {valid_to} AS valid_to, c.occurred_at, c.recorded_at, c.retracted_at, {status} AS status,
    c.source, c.inference_confidence, c.agent_id, c.session_id, c.turn_id, c.tags, c.cardinality,
    {verified} AS verified_at, c.due_at, c.owner, c.erased_at, {superseded} AS superseded"""

_CURRENT_COLUMNS = _COLUMNS.format(content="c.content", title="c.title", valid_to="c.valid_to",
                                   status="c.status", verified="c.verified_at",
                                   superseded=f"NOT ({CURRENT})")
_AS_OF_COLUMNS = _COLUMNS.format(content="v.content", title="v.title", valid_to="upper(v.valid)",
                                 status="v.status", verified="v.verified_at",
                                 superseded=SUPERSEDED_AS_OF)


def _source(as_of: bool, include_superseded: bool, join: str = "") -> str:
    """The rows a slice reads: current cards (every card, with ``include_superseded``), or each
    card's version seen as of (valid_at, known_at); ``join`` adds rows to each."""
    if as_of:
        return ("FROM {s}.cards c JOIN {s}.card_versions v ON " + VERSION_AS_OF + join
                + " WHERE true")
    return "FROM {s}.cards c" + join + " WHERE " + ("true" if include_superseded else CURRENT)


def _where(filters: Iterable[str], as_of: bool) -> str:
    valid = "v.valid" if as_of else "c.valid"
    return "".join(" AND (" + FILTERS[name].replace("{valid}", valid) + ")" for name in filters)


def _with(filters: Iterable[str]) -> str:
    preludes = [PRELUDES[name] for name in filters if name in PRELUDES]
    return "WITH " + ", ".join(preludes) + " " if preludes else ""


def listing(schema: sql.Identifier, filters: Sequence[str], as_of: bool, include_superseded: bool
            ) -> sql.Composed:
    """One page of the cards the filters keep, the latest recorded first; ``%(limit)s`` rows
    (with the filter ``after``: those after a page's last card)."""
    text = (_with(filters) + "SELECT " + (_AS_OF_COLUMNS if as_of else _CURRENT_COLUMNS) + " "
            + _source(as_of, include_superseded) + _where(filters, as_of)
            + " ORDER BY c.recorded_at DESC, c.card_id DESC LIMIT %(limit)s")
    return sql.SQL(text).format(s=schema)


def counting(schema: sql.Identifier, filters: Sequence[str], as_of: bool, include_superseded: bool,
             group_by: str | None) -> sql.Composed:
    """Rows ``(whole, key, n)``: ``n`` cards per value ``key`` of ``group_by``, the most first (a
    card counts under each of its tags), and one row ``whole``: every card the filters keep."""
    if group_by is None:
        text = ("SELECT true AS whole, NULL::text AS key, count(*) AS n "
                + _source(as_of, include_superseded) + _where(filters, as_of))
        return sql.SQL(_with(filters) + text).format(s=schema)
    # a card's first tag (or its want of one) counts the card in the whole
    tags, first = ((" LEFT JOIN LATERAL unnest(c.tags) WITH ORDINALITY AS t(tag, nth) ON true",
                    "coalesce(t.nth, 1) = 1") if group_by == "tag" else ("", "true"))
    keyed = ("SELECT " + GROUP_KEYS[group_by] + " AS key, " + first + " AS first "
             + _source(as_of, include_superseded, tags) + _where(filters, as_of))
    text = (_with(filters) + "SELECT GROUPING(key) = 1 AS whole, key, CASE WHEN GROUPING(key) = 1 "
            "THEN count(*) FILTER (WHERE first) ELSE count(*) END AS n FROM (" + keyed
            + ") f GROUP BY GROUPING SETS ((key), ()) ORDER BY whole DESC, n DESC, key")
    return sql.SQL(text).format(s=schema)
