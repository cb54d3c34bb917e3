"""After the routes: fusion and post-processing in DESIGN §3's order, each step a pure function of
plain data, with a trace of what each step did to each card for ``explain``.

RRF → half-life decay → scope boost → read-your-own-writes overlay → superseded cards dropped
(unless as-of) → contradiction, aging and knowledge-freshness alerts → top n.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any
from uuid import UUID

from domain.rules.cardinality import decide_cardinality
from services.retrieval.scoring import (
    Candidate,
    Contradiction,
    DecayPolicy,
    ScopeBoost,
    aging_facts,
    contradictions,
    decay_anchor,
    route_ranks,
    rrf,
    stale_knowledge,
    top_n,
)


@dataclass(frozen=True)
class PendingWrite:
    """A write the caller made whose events the read models may not hold yet: ``candidate`` is the
    card it created; ``position`` its notification id."""

    position: int
    candidate: Candidate


@dataclass(frozen=True)
class Tuning:
    decay: DecayPolicy = DecayPolicy()
    boosts: ScopeBoost = ScopeBoost()
    rrf_k: int = 60
    top_n: int = 5
    aging_days: int = 180
    knowledge_stale_days: int = 90


@dataclass
class Outcome:
    ranked: list[tuple[UUID, float]]
    candidates: dict[UUID, Candidate]
    contradictions: list[Contradiction]
    aging: list[UUID]
    stale: list[UUID]
    trace: dict[UUID, dict[str, Any]] = field(default_factory=dict)


def overlay(candidates: Mapping[UUID, Candidate], scores: Mapping[UUID, float],
            pending: Sequence[PendingWrite]) -> tuple[dict[UUID, Candidate], dict[UUID, float],
                                                      dict[UUID, str]]:
    """Read-your-own-writes: a single-value state not yet projected marks the cards of its slot as
    superseded and takes the best score among them; other pending writes change nothing here
    (no route found them). Returns the new candidates, scores, and a note per card touched."""
    cards, fused, notes = dict(candidates), dict(scores), {}
    for write in sorted(pending, key=lambda w: w.position):
        new = write.candidate
        if not new.is_single_state:
            continue
        slot = [c for c in cards.values() if c.card_id != new.card_id and _same_slot(c, new)
                and not c.superseded]
        if not slot:
            continue
        for old in slot:
            cards[old.card_id] = replace(old, superseded=True, valid_to=new.valid_from)
            notes[old.card_id] = f"superseded by the unprojected write {new.card_id}"
        cards[new.card_id] = new
        fused[new.card_id] = max(fused.get(new.card_id, 0.0), *(fused.get(c.card_id, 0.0) for c in slot))
        notes[new.card_id] = f"written at position {write.position}, not projected yet"
    return cards, fused, notes


def _same_slot(a: Candidate, b: Candidate) -> bool:
    return a.is_single_state and (a.scope, a.project_id, a.group_id, a.subject, a.label) == (
        b.scope, b.project_id, b.group_id, b.subject, b.label)


def process(rankings: Mapping[str, Sequence[UUID]], candidates: Mapping[UUID, Candidate], *,
            now: datetime, as_of: bool, current_project: str | None, tuning: Tuning = Tuning(),
            pending: Sequence[PendingWrite] = (), top: int | None = None,
            decay_at: datetime | None = None, explain: bool = True,
            fused: Mapping[UUID, float] | None = None) -> Outcome:
    """The whole chain; ``now`` is the query's reference time (the as-of moment for as-of);
    ``decay_at`` where decay counts to, when not ``now`` (a question about April: April's end).
    ``explain=False`` leaves the trace empty: the ranking is the same, and cheaper to make.
    ``fused``: the RRF scores of ``rankings``, when the caller has them already."""
    every = rrf(rankings, tuning.rrf_k) if fused is None else fused
    fused = {card_id: every[card_id] for card_id in candidates if card_id in every}
    ranks = route_ranks(rankings) if explain else {}
    trace: dict[UUID, dict[str, Any]] = {
        card_id: {"routes": ranks[card_id], "rrf": round(score, 6)}
        for card_id, score in fused.items()} if explain else {}
    anchor = decay_at or now
    scores: dict[UUID, float] = {}
    for card_id, score in fused.items():
        card = candidates[card_id]
        days = max(0.0, (anchor - decay_anchor(card)).total_seconds() / 86_400)
        rate = tuning.decay.rate(card)
        factor = math.exp(-rate * days)
        boost = tuning.boosts.factor(card, current_project)
        scores[card_id] = score * factor * boost
        if explain:
            trace[card_id]["decay"] = {"lambda": rate, "days": round(days, 2),
                                       "factor": round(factor, 6), "score": round(score * factor, 6)}
            trace[card_id]["scope_boost"] = {"factor": boost, "score": round(scores[card_id], 6)}
    # a pending write is news of now: an as-of answer is about what was known then
    cards, scores, notes = overlay(candidates, scores, () if as_of else pending)
    for card_id, note in notes.items():
        if explain:
            trace.setdefault(card_id, {"routes": {}, "rrf": 0.0})["overlay"] = note
    kept: dict[UUID, float] = {}
    for card_id, score in scores.items():
        superseded = cards[card_id].superseded
        if superseded and not as_of:
            if explain:
                trace[card_id]["superseded"] = "dropped"
            continue
        kept[card_id] = score
        if superseded and explain:
            trace[card_id]["superseded"] = "kept: the query is as-of"
    ranked = top_n(kept, top or tuning.top_n)
    chosen = [cards[card_id] for card_id, _ in ranked]
    chosen_ids = {c.card_id for c in chosen}
    alive = [cards[card_id] for card_id in kept]
    conflicts = [c for c in contradictions(alive) if chosen_ids & set(c.card_ids)]
    if explain:
        for position, (card_id, score) in enumerate(ranked, start=1):
            trace[card_id]["final"] = {"rank": position, "score": round(score, 6)}
        for card_id in kept.keys() - chosen_ids:
            trace[card_id]["final"] = "below the top n"
    return Outcome(ranked=ranked, candidates=cards, contradictions=conflicts,
                   aging=aging_facts(chosen, now, tuning.aging_days),
                   stale=stale_knowledge(chosen, now, tuning.knowledge_stale_days), trace=trace)


def pending_state(command: Any, result: Any, recorded_at: datetime) -> PendingWrite | None:
    """The overlay entry for a state written by ``remember`` (a ``Remember`` command and its
    ``WriteResult``); None for other kinds, outcomes that created no card, or no position."""
    if command.kind != "state" or command.label is None or result.card_id is None \
            or result.position is None or result.outcome not in ("remembered", "superseded", "overwritten"):
        return None
    cardinality = decide_cardinality(command.label, command.cardinality).cardinality.value
    return PendingWrite(result.position, Candidate(
        card_id=result.card_id, kind="state", cardinality=cardinality, scope=command.scope,
        project_id=command.project_id, subject=command.subject, label=command.label,
        value=command.content, valid_from=command.valid_from or recorded_at, valid_to=None,
        occurred_at=None, recorded_at=recorded_at, verified_at=None, superseded=False,
        group_id=command.group_id))
