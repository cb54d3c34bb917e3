"""The alert blocks of an answer (DESIGN §3, rules 6–8), raised by the cards it returns:
contradictions (two valid cards of one slot with different values, or joined by ``contradicts``,
at least one of them returned), aging single-value facts, knowledge possibly outdated, and the
arbitration cases pending on the returned cards' slots (one statement; a case shows no erased
value).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql

from services.query.retrieval.load import Loaded
from services.query.retrieval.query import RetrievalQuery, RouteContext
from services.query.retrieval.rank import Ranked
from services.query.retrieval.results import Alerts, ArbitrationAlert, ContradictionAlert
from services.query.retrieval.scoring import Candidate, later
from services.query.retrieval.tuning import Tuning


def alerts(conn: psycopg.Connection[Any], ctx: RouteContext, query: RetrievalQuery, loaded: Loaded,
           tuning: Tuning) -> Alerts:
    """The blocks the answer raises at the query's reference time, with the cases pending on its
    cards' slots."""
    records = loaded.records
    slots = [records[card.card_id]["aggregate_id"] for card in loaded.ranked.chosen_cards()
             if card.card_id in records]
    return raised(loaded.ranked, query.reference_time, tuning,
                  load_arbitrations(conn, ctx, query, slots))


def raised(ranked: Ranked, now: datetime, tuning: Tuning,
           arbitrations: Sequence[ArbitrationAlert] = ()) -> Alerts:
    """The blocks the chosen cards raise at ``now``, with the ``arbitrations`` pending on their
    slots."""
    chosen = ranked.chosen_cards()
    returned = {card.card_id for card in chosen}
    kept = [ranked.candidates[card_id] for card_id in ranked.kept]
    return Alerts(
        contradictions=[ContradictionAlert(card_ids=c.card_ids, reason=c.reason)
                        for c in contradictions(kept) if returned & set(c.card_ids)],
        arbitrations=list(arbitrations),
        aging_facts=aging_facts(chosen, now, tuning.aging_days),
        stale_knowledge=stale_knowledge(chosen, now, tuning.knowledge_stale_days))


@dataclass(frozen=True)
class Contradiction:
    card_ids: tuple[UUID, UUID]  # smaller id first
    reason: str


def _normalised(value: str) -> str:
    return " ".join(value.split()).casefold()


def _pair(a: UUID, b: UUID) -> tuple[UUID, UUID]:
    return (a, b) if a < b else (b, a)


def contradictions(candidates: Iterable[Candidate]) -> list[Contradiction]:
    """Valid (not superseded) cards in conflict: two single-value state cards of one slot (scope, project,
    group, subject, label) whose values differ once casefolded and whitespace-normalised, or two cards
    joined by a ``contradicts`` edge (either direction). Both ends must be among the candidates.
    One entry per pair, sorted by the pair's ids; a pair found both ways carries both reasons."""
    valid = {c.card_id: c for c in candidates if not c.superseded}
    reasons: dict[tuple[UUID, UUID], list[str]] = {}
    slots: dict[tuple[str, str | None, str | None, str | None, str], list[Candidate]] = {}
    for card in valid.values():
        if card.is_single_state and card.label is not None:
            key = (card.scope, card.project_id, card.group_id, card.subject, card.label)
            slots.setdefault(key, []).append(card)
    for (_, _, _, subject, label), cards in slots.items():
        for i, a in enumerate(cards):
            for b in cards[i + 1:]:
                if _normalised(a.value) != _normalised(b.value):
                    reason = f"same slot {subject}/{label} holds different values"
                    reasons.setdefault(_pair(a.card_id, b.card_id), []).append(reason)
    for card in valid.values():
        for edge, other in card.edges:
            if edge == "contradicts" and other in valid and other != card.card_id:
                found = reasons.setdefault(_pair(card.card_id, other), [])
                if "linked by contradicts" not in found:
                    found.append("linked by contradicts")
    return [Contradiction(pair, "; ".join(why)) for pair, why in sorted(reasons.items())]


def aging_facts(candidates: Iterable[Candidate], now: datetime, days: int = 180) -> list[UUID]:
    """Single-value state cards, not superseded, whose later of valid_from (recorded_at when unknown) and
    verified_at is ≥ ``days`` old; oldest first, then by id."""
    facts = [c for c in candidates if c.is_single_state and not c.superseded]
    return _older_than([(later(c.valid_from or c.recorded_at, c.verified_at), c.card_id) for c in facts],
                       now, days)


def stale_knowledge(candidates: Iterable[Candidate], now: datetime, days: int = 90) -> list[UUID]:
    """Knowledge cards whose later of recorded_at and verified_at is ≥ ``days`` old; oldest first."""
    knowledge = [c for c in candidates if c.kind == "knowledge"]
    return _older_than([(later(c.recorded_at, c.verified_at), c.card_id) for c in knowledge], now, days)


def _older_than(anchors: list[tuple[datetime, UUID]], now: datetime, days: float) -> list[UUID]:
    limit = timedelta(days=days)
    return [card_id for anchor, card_id in sorted(anchors) if now - anchor >= limit]


_ARBITRATIONS = """SELECT case_id, slot_id, subject, label,
    array_remove(current_values, NULL) AS current_values, proposed_value, reason,
    opened_at FROM {s}.arbitration_queue
WHERE slot_id = ANY(%(slots)s::uuid[]) AND opened_at <= %(known_at)s::timestamptz
  AND proposed_value IS NOT NULL AND subject IS NOT NULL AND label IS NOT NULL
  AND (decided_at IS NULL OR decided_at > %(known_at)s::timestamptz)
ORDER BY opened_at, case_id"""


def load_arbitrations(conn: psycopg.Connection[Any], ctx: RouteContext, query: RetrievalQuery,
                      slots: Iterable[UUID]) -> list[ArbitrationAlert]:
    """Cases undecided at the query's knowledge time on these slots."""
    wanted = list(dict.fromkeys(slots))
    if not wanted:
        return []
    rows = conn.execute(sql.SQL(_ARBITRATIONS).format(s=ctx.s),
                        {"slots": wanted, "known_at": query.window[1]}).fetchall()
    return [ArbitrationAlert(**row) for row in rows]
