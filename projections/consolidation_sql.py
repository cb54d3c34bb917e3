"""The SQL of consolidation (DESIGN rule 10): what a scan compares, read per tenant as the runtime
role, and the tenants a scan visits, read as the projector role (it reads every tenant).

A scan compares only what may be consolidated: current knowledge cards and the current values of
slots — never an event card (episodic records are never merged or auto-linked), a commitment or a
blocker, and never a tombstone (an erased card has no text to compare). It reads, in one
transaction:

- ``vectors``: those cards with their embeddings, the tenant's ``%(max_cards)s`` newest (the
  scan compares them pairwise in memory: one matrix product, not a distance per pair);
- ``items``: the current items of multi-value slots that hold more than one;
- ``singles``: the current values of single-value slots whose subject has more than one such slot
  in the same scope;
- ``both_valid``: in single-value slots whose arbitration was settled ``both_valid``, the accepted
  proposal and each live card whose stretch of world time touches its own;
- ``cards``, ``links``, ``proposed``: the named cards, and the edges and proposals already between
  them (a pair already linked, merged or proposed is not proposed again);
- ``mark``: the tenant's projected position and embeddings count, which a worker compares to skip
  a tenant nothing happened to since its last scan.
"""

from __future__ import annotations

from psycopg import sql

from infra.postgres import Database
from projections.cards import NAME
from projections.predicates import CURRENT, NOT_ERASED

CARD_COLUMNS = """c.card_id, c.aggregate_id, c.kind, c.memory_type, c.scope, c.project_id,
    c.group_id, c.perspective, c.subject, c.label, c.cardinality, c.content, c.title, c.valid_from,
    c.valid_to, c.recorded_at"""

#: What consolidation compares: knowledge cards and the values of slots, not erased.
COMPARED = ("(c.kind = 'knowledge' OR (c.kind = 'state' AND c.cardinality IS NOT NULL)) AND "
            + NOT_ERASED)

_VECTORS = "SELECT " + CARD_COLUMNS + """, e.model, e.embedding
FROM {s}.cards c JOIN {s}.card_embeddings e ON e.tenant_id = c.tenant_id AND e.card_id = c.card_id
WHERE """ + CURRENT + " AND " + COMPARED + """
ORDER BY c.recorded_at DESC, c.card_id LIMIT %(max_cards)s"""

_ITEMS = "SELECT " + CARD_COLUMNS + " FROM {s}.cards c WHERE " + CURRENT + " AND " + NOT_ERASED + """
    AND c.kind = 'state' AND c.cardinality = 'multi_value'
    AND EXISTS (SELECT 1 FROM {s}.cards o WHERE o.tenant_id = c.tenant_id
                AND o.aggregate_id = c.aggregate_id AND o.card_id <> c.card_id
                AND o.retracted_at IS NULL AND o.valid_to IS NULL AND o.merged_into IS NULL
                AND o.erased_at IS NULL)
ORDER BY c.aggregate_id, c.recorded_at, c.card_id"""

_SINGLES = "SELECT * FROM (SELECT " + CARD_COLUMNS + """, count(*) OVER (
        PARTITION BY c.subject, c.scope, c.project_id, c.group_id) AS slots
    FROM {s}.cards c WHERE """ + CURRENT + " AND " + NOT_ERASED + """ AND c.kind = 'state'
      AND c.cardinality = 'single_value') f
WHERE f.slots > 1 ORDER BY f.subject, f.recorded_at, f.card_id"""

_BOTH_VALID = """SELECT p.card_id AS a_id, n.card_id AS b_id FROM {s}.arbitration_queue q
JOIN {s}.cards p ON p.tenant_id = q.tenant_id AND p.card_id = q.proposed_card_id
JOIN {s}.cards n ON n.tenant_id = q.tenant_id AND n.aggregate_id = q.slot_id
    AND n.card_id <> p.card_id
WHERE q.decision = 'both_valid' AND p.cardinality = 'single_value'
  AND p.retracted_at IS NULL AND n.retracted_at IS NULL
  AND p.erased_at IS NULL AND n.erased_at IS NULL
  AND (n.valid_to = p.valid_from OR p.valid_to = n.valid_from)
ORDER BY q.opened_at, a_id, b_id"""

_CARDS = "SELECT " + CARD_COLUMNS + " FROM {s}.cards c WHERE c.card_id = ANY(%(ids)s::uuid[])"

_LINKS = """SELECT src_id, dst_id FROM {s}.card_relations
WHERE src_id = ANY(%(ids)s::uuid[]) OR dst_id = ANY(%(ids)s::uuid[])"""

_PROPOSED = """SELECT src_id, dst_id FROM {s}.proposals
WHERE src_id = ANY(%(ids)s::uuid[]) OR dst_id = ANY(%(ids)s::uuid[])"""

#: The tenant's proposals, the newest first: all, ``pending`` (not reviewed yet), ``accepted``
#: or ``rejected``.
_PROPOSALS = """SELECT proposal_id, kind, src_id, dst_id, edge, rationale, score, proposed_at,
    review, reviewed_at, reviewed_by, note FROM {s}.proposals
WHERE (%(review)s::text IS NULL OR (%(review)s = 'pending' AND review IS NULL)
       OR review = %(review)s)
ORDER BY proposed_at DESC, proposal_id LIMIT %(limit)s"""

_TENANTS = """SELECT p.tenant_id FROM {s}.projection_position p
WHERE p.projection = %s AND EXISTS (SELECT 1 FROM {s}.cards c WHERE c.tenant_id = p.tenant_id)
ORDER BY p.tenant_id"""

#: What has changed in a tenant since a scan shows in these two: the events projected and the
#: vectors embedded (the embedding projection lags the cards).
_MARK = """SELECT (SELECT position FROM {s}.projection_position WHERE projection = %(projection)s
                   AND tenant_id = %(tenant)s) AS position,
    (SELECT count(*) FROM {s}.card_embeddings) AS embeddings"""

_STATEMENTS = {"vectors": _VECTORS, "items": _ITEMS, "singles": _SINGLES, "both_valid": _BOTH_VALID,
               "cards": _CARDS, "links": _LINKS, "proposed": _PROPOSED, "mark": _MARK,
               "proposals": _PROPOSALS}


def statements(schema: sql.Identifier) -> dict[str, sql.Composed]:
    """Every statement of a scan and of the proposals listing, on the read models in ``schema``."""
    return {name: sql.SQL(text).format(s=schema) for name, text in _STATEMENTS.items()}


def tenants_with_cards(db: Database, schema: str) -> list[str]:
    """The tenants whose read models hold a card, read as the projector role (``db``)."""
    query = sql.SQL(_TENANTS).format(s=sql.Identifier(schema))
    with db.connect() as conn:
        return [row[0] for row in conn.execute(query, (NAME,)).fetchall()]
