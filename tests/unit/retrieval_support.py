"""Cards, and the read path's pure stages run on them (fusion, ranking, the alerts), without a
database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from services.query.retrieval.alerts import raised
from services.query.retrieval.fuse import Fused, rrf
from services.query.retrieval.rank import Asked, Ranked, rank
from services.query.retrieval.results import Alerts
from services.query.retrieval.scoring import Candidate, Rankings
from services.query.retrieval.tuning import Tuning

NOW = datetime(2026, 11, 1, 12, tzinfo=UTC)


def ago(days: float) -> datetime:
    return NOW - timedelta(days=days)


def card(card_id: UUID, **fields: Any) -> Candidate:
    base: dict[str, Any] = dict(
        card_id=card_id, kind="state", cardinality="single_value", scope="personal", project_id=None,
        subject="user", label="address", value="Taipei", valid_from=NOW, valid_to=None, occurred_at=None,
        recorded_at=NOW, verified_at=None, superseded=False,
    )
    base.update(fields)
    return Candidate(**base)


def labelled(card_id: UUID, **fields: Any) -> Candidate:
    """A single-value card in a slot of its own, so that no two of them contradict."""
    return card(card_id, label=f"label-{card_id.int}", **fields)


def event(card_id: UUID, days: float, **fields: Any) -> Candidate:
    return card(card_id, kind="event", cardinality=None, label=None, subject=None,
                occurred_at=ago(days), valid_from=ago(days), **fields)


def by_id(*cards: Candidate) -> dict[UUID, Candidate]:
    return {c.card_id: c for c in cards}


def run(rankings: Rankings, cards: dict[UUID, Candidate], tuning: Tuning | None = None,
        **asked: Any) -> Ranked:
    """``cards`` ranked as the retriever ranks what it loaded, ``rankings`` fused first;
    ``asked``: the fields of :class:`Asked` (``now``: :data:`NOW` unless given)."""
    tuning = tuning or Tuning()
    fused = Fused(rrf(rankings, tuning.rrf_k, tuning.weights), rankings)
    return rank(fused, cards, Asked(**{"now": NOW, **asked}), tuning)


def flagged(rankings: Rankings, cards: dict[UUID, Candidate], tuning: Tuning | None = None,
            **asked: Any) -> Alerts:
    """The alerts the cards :func:`run` chooses raise."""
    tuning = tuning or Tuning()
    return raised(run(rankings, cards, tuning, **asked), asked.get("now", NOW), tuning)


def ids(ranked: Ranked) -> list[UUID]:
    return [card_id for card_id, _ in ranked.chosen]
