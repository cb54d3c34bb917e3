"""Loading the candidates (DESIGN §3): the best fused first, only as many as can still reach the
top, ranked as they come (``rank``), then the cards that would share an alert with a chosen one.
Each load is two statements: the cards as the query sees them (the current row, or for an as-of
query the version known then) and their ``contradicts`` edges. A tombstone (an erased card) is
never loaded, so no route's find of one reaches an answer; nor is a card outside the query's
narrowing (subjects, a namespace, agents, sessions), whichever route found it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql

from projections.predicates import CURRENT, NOT_ERASED, SUPERSEDED_AS_OF, VERSION_AS_OF, narrowed
from services.query.retrieval.fuse import Fused
from services.query.retrieval.query import RetrievalQuery, RouteContext, parameters
from services.query.retrieval.rank import Ranked
from services.query.retrieval.scoring import Candidate, by_score
from services.query.retrieval.tuning import Tuning

#: Candidates loaded before the first ranking: at least this many, or this many per result asked.
LOAD_FIRST, LOAD_PER_RESULT = 40, 8

#: The rank stage for one question, over the candidates loaded so far.
Rank = Callable[[Fused, Mapping[UUID, Candidate]], Ranked]


@dataclass(frozen=True)
class Loaded:
    """The rows of the cards loaded, as an answer shows them, and their ranking."""

    records: dict[UUID, dict[str, Any]]
    ranked: Ranked


def load(conn: psycopg.Connection[Any], ctx: RouteContext, query: RetrievalQuery, fused: Fused,
         rank: Rank, tuning: Tuning, first: Sequence[UUID] = ()) -> Loaded:
    """Load the candidates — the named slots' cards (``first``), then the best fused — and
    only as many as can still reach the top: decay never raises a score and no card is
    boosted more than the query's largest scope boost, so a card left unloaded scores at most
    its fused score times that boost. While the last card chosen on its score does not beat
    that for the best card left, as many again are loaded. Then the cards that would share an
    alert with a chosen one (its slot, a ``contradicts`` edge) are loaded too. ``explain``
    loads every candidate, for the trace."""
    order = list(dict.fromkeys([*first, *by_score(fused.scores)]))
    top = query.top_n or tuning.top_n
    loaded = len(order) if query.explain else max(LOAD_FIRST, LOAD_PER_RESULT * top) + len(first)
    candidates, records = load_candidates(conn, ctx, query, order[:loaded])
    ranked = rank(fused, candidates)
    largest = tuning.boosts.largest(query.project_id)
    while loaded < len(order) and (len(ranked.chosen) < top or _last_scored(ranked)
                                   <= fused.scores.get(order[loaded], 0.0) * largest):
        more, more_records = load_candidates(conn, ctx, query, order[loaded:2 * loaded])
        candidates, records, loaded = candidates | more, records | more_records, 2 * loaded
        ranked = rank(fused, candidates)
    rest = order[loaded:]
    if not rest:
        return Loaded(records, ranked)
    chosen = [card_id for card_id, _ in ranked.chosen if card_id in records]
    slots = [records[card_id]["aggregate_id"] for card_id in chosen
             if ranked.candidates[card_id].is_single_state]
    partners = alert_partners(conn, ctx, chosen, slots, rest)
    if not partners:
        return Loaded(records, ranked)
    more, more_records = load_candidates(conn, ctx, query, partners)
    return Loaded(records | more_records, rank(fused, candidates | more))


def _last_scored(ranked: Ranked) -> float:
    """The lowest score among the cards chosen on their score (the named slots' lead whatever
    their scores)."""
    scored = [score for card_id, score in ranked.chosen if card_id not in ranked.led]
    return min(scored, default=float("inf"))


_FIELDS = """c.card_id, c.aggregate_id, c.kind, c.memory_type, c.scope, c.project_id, c.group_id,
    c.subject, c.label, c.cardinality, {value} AS value, {title} AS title, {status} AS status,
    c.valid_from, {valid_to} AS valid_to, c.occurred_at, c.recorded_at, {verified} AS verified_at,
    {superseded} AS superseded, c.source, c.agent_id, c.inference_confidence, c.owner, c.due_at,
    'conversation' = ANY(c.tags) AS conversation"""

_CURRENT = "SELECT " + _FIELDS.format(
    value="c.content", title="c.title", status="c.status", valid_to="c.valid_to",
    verified="c.verified_at", superseded=f"NOT ({CURRENT})",
) + " FROM {s}.cards c WHERE c.card_id = ANY(%(ids)s::uuid[]) AND " + NOT_ERASED

#: The version each route saw (``projections.predicates.VERSION_AS_OF``): a card the routes found
#: has exactly one.
_AS_OF = "SELECT " + _FIELDS.format(
    value="v.content", title="v.title", status="v.status", valid_to="upper(v.valid)",
    verified="v.verified_at", superseded=SUPERSEDED_AS_OF,
) + """ FROM {s}.cards c JOIN {s}.card_versions v ON """ + VERSION_AS_OF + """
    WHERE c.card_id = ANY(%(ids)s::uuid[]) AND """ + NOT_ERASED


#: Both directions of every ``contradicts`` edge that touches a loaded card, in one statement.
_CONTRADICTS = """SELECT src_id AS card_id, dst_id AS other FROM {s}.card_relations
WHERE src_id = ANY(%(ids)s::uuid[]) AND edge = 'contradicts'
UNION SELECT dst_id, src_id FROM {s}.card_relations
WHERE dst_id = ANY(%(ids)s::uuid[]) AND edge = 'contradicts'"""


def load_candidates(conn: psycopg.Connection[Any], ctx: RouteContext, query: RetrievalQuery,
                    ids: Collection[UUID]) -> tuple[dict[UUID, Candidate], dict[UUID, dict[str, Any]]]:
    """The cards ``ids`` as the query sees them: as candidates to rank, and as the rows an answer
    shows."""
    if not ids:
        return {}, {}
    statement = sql.SQL(_AS_OF if query.as_of else _CURRENT).format(s=ctx.s) + narrowed(
        "c", query.narrowing)
    wanted = list(ids)
    rows = conn.execute(statement, {**parameters(query), "ids": wanted}).fetchall()
    contradicts: dict[UUID, list[UUID]] = {}
    for edge in conn.execute(sql.SQL(_CONTRADICTS).format(s=ctx.s), {"ids": wanted}):
        contradicts.setdefault(edge["card_id"], []).append(edge["other"])
    candidates, records = {}, {}
    for row in rows:
        records[row["card_id"]] = row
        candidates[row["card_id"]] = Candidate(
            # commitments and blockers are states outside any slot: they accumulate, never supersede
            card_id=row["card_id"], kind=row["kind"],
            cardinality=row["cardinality"] or ("multi_value" if row["kind"] == "state" else None),
            scope=row["scope"], project_id=row["project_id"], subject=row["subject"],
            label=row["label"], value=row["value"], valid_from=row["valid_from"],
            valid_to=row["valid_to"], occurred_at=row["occurred_at"], recorded_at=row["recorded_at"],
            # as-of: every card loaded was valid at the moment asked about; being replaced later
            # is reported on the result, not held against it (alerts, the superseded filter)
            verified_at=row["verified_at"], superseded=row["superseded"] and not query.as_of,
            edges=tuple(("contradicts", other) for other in contradicts.get(row["card_id"], ())),
            group_id=row["group_id"], memory_type=row["memory_type"],
            conversation=row["conversation"])
    return candidates, records


#: Every card of the given slots and every ``contradicts`` partner of the chosen cards; which of
#: them are among the unloaded candidates is decided in Python: a few hundred ids sent as a
#: parameter cost the planner more than the whole statement.
_PARTNERS = """SELECT c.card_id FROM {s}.cards c WHERE c.aggregate_id = ANY(%(slots)s::uuid[])
UNION SELECT r.dst_id FROM {s}.card_relations r WHERE r.src_id = ANY(%(chosen)s::uuid[])
    AND r.edge = 'contradicts'
UNION SELECT r.src_id FROM {s}.card_relations r WHERE r.dst_id = ANY(%(chosen)s::uuid[])
    AND r.edge = 'contradicts'"""


def alert_partners(conn: psycopg.Connection[Any], ctx: RouteContext, chosen: Collection[UUID],
                   slots: Collection[UUID], others: Collection[UUID]) -> list[UUID]:
    """Which of ``others`` could share a contradiction alert with a ``chosen`` card: a card of one
    of their single-value ``slots``, or one joined to a chosen card by a ``contradicts`` edge;
    in the order of ``others``."""
    rows = conn.execute(sql.SQL(_PARTNERS).format(s=ctx.s), {
        "slots": list(slots), "chosen": list(chosen)}).fetchall()
    found = {row["card_id"] for row in rows}
    return [card_id for card_id in others if card_id in found]
