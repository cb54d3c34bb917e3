"""Widening what the routes found (DESIGN §3), after fusion: the graph route's 1-hop walk from the
best fused cards, its RRF added to theirs (RRF is a sum per route); then the caller's writes the
read models do not hold yet, which no route can find, scored as the best card found when the
question names their slot or shares a word with them. Both come after fusion: the walk starts
from the routes' best, and the best card found counts the walk's.
"""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from projections.text import query_terms
from services.query.retrieval.fuse import Fused, rrf
from services.query.retrieval.graph import GraphRoute
from services.query.retrieval.query import RetrievalQuery
from services.query.retrieval.routes import Found, RouteRunner
from services.query.retrieval.scoring import LeadKey, PendingWrite, by_score, slot_key
from services.query.retrieval.tuning import Tuning


def expand(runner: RouteRunner, graph: GraphRoute, tenant_id: str, query: RetrievalQuery,
           fused: Fused, tuning: Tuning, *, unprojected: Sequence[PendingWrite] = (),
           leads: Sequence[LeadKey] = ()) -> tuple[Fused, Found]:
    """``fused`` with the graph's neighbours of its ``graph_seeds`` best cards, within
    ``graph_budget_ms``, and the ``unprojected`` writes the question reaches (``leads``: the
    slots it names); and what the walk found."""
    settings = runner.ctx.settings
    walked = runner.run(tenant_id, query, [graph], settings.graph_budget_ms,
                        seeds=by_score(fused.scores)[:settings.graph_seeds])
    rankings = {name: hits.ranking() for name, hits in walked.hits.items()}
    scores = dict(fused.scores)
    for card_id, score in rrf(rankings, tuning.rrf_k, tuning.weights).items():
        scores[card_id] = scores.get(card_id, 0.0) + score
    if not query.as_of:
        kept = [w for w in unprojected if query.keeps(w.candidate.subject, w.agent_id, w.session_id)]
        scores |= fresh_scores(kept, query, leads, scores)
    return Fused(scores, {**fused.rankings, **rankings}), walked


def fresh_scores(unprojected: Sequence[PendingWrite], query: RetrievalQuery,
                 leads: Sequence[LeadKey], fused: dict[UUID, float]) -> dict[UUID, float]:
    """The caller's writes the read models do not hold yet, that no route could find, scored as
    the best card found: those in a slot the question names, or sharing one of its terms (in the
    subject, label or value). What they supersede, if anything, the overlay marks (``rank``)."""
    terms = set(query_terms(query.text))
    named = set(leads)
    best = max(fused.values(), default=1.0)
    scores = {}
    for write in unprojected:
        card = write.candidate
        if card.card_id in fused:
            continue
        words = query_terms(" ".join(filter(None, (card.subject, card.label, card.value))))
        if (card.is_single_state and slot_key(card) in named) or terms.intersection(words):
            scores[card.card_id] = best
    return scores
