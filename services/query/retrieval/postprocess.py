"""After the routes: fusion and post-processing in DESIGN §3's order, each step a pure function of
plain data, with a trace of what each step did to each card for ``explain``.

RRF (with each route's strengths and weight) → half-life decay as a bounded prior (for a question
about now, conversation turns latest on the matter first: ``present``) → scope boost →
read-your-own-writes overlay → superseded cards dropped (unless as-of) → the named slots' valid
cards first, then the best of the rest → contradiction, aging and knowledge-freshness alerts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any
from uuid import UUID

from domain.rules.cardinality import decide_cardinality
from services.query.retrieval.present import ConversationPrior, latest_first
from services.query.retrieval.scoring import (
    Candidate,
    Contradiction,
    DecayPolicy,
    Rankings,
    ScopeBoost,
    age_days,
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
    #: The write's provenance, for a question narrowed to agents or sessions.
    agent_id: str | None = None
    session_id: str | None = None


SlotKey = tuple[str, str | None, str | None, str | None, str | None]
#: What a question can name to be answered first: a slot, or a memory type outside any slot
#: (``("=type", "blocker")``: "where are we stuck").
LeadKey = SlotKey | tuple[str, str]


def slot_key(card: Candidate) -> SlotKey:
    """Which slot a state card belongs to: scope, project, group, subject, label."""
    return (card.scope, card.project_id, card.group_id, card.subject, card.label)


def type_key(memory_type: str) -> tuple[str, str]:
    return ("=type", memory_type)


def leads_for(card: Candidate, named: set[LeadKey]) -> bool:
    """Whether ``card`` is one of what the question names: a card of a named slot, or of a
    named memory type outside any slot."""
    if card.kind != "state":
        return False
    if card.label is None:
        return card.memory_type is not None and type_key(card.memory_type) in named
    return slot_key(card) in named


@dataclass(frozen=True)
class Tuning:
    decay: DecayPolicy = DecayPolicy()
    boosts: ScopeBoost = ScopeBoost()
    rrf_k: int = 60
    top_n: int = 5
    aging_days: int = 180
    knowledge_stale_days: int = 90
    #: Each route's weight in the fusion (a route not named weighs 1).
    weights: Mapping[str, float] = field(default_factory=dict)
    #: Most cards of named slots that lead an answer (every item of a multi-value slot, up to this).
    slot_items: int = 20
    conversation: ConversationPrior = ConversationPrior()


@dataclass
class Outcome:
    ranked: list[tuple[UUID, float]]
    candidates: dict[UUID, Candidate]
    contradictions: list[Contradiction]
    aging: list[UUID]
    stale: list[UUID]
    trace: dict[UUID, dict[str, Any]] = field(default_factory=dict)
    #: The chosen cards that lead as a named slot's, whatever their scores.
    led: frozenset[UUID] = frozenset()


def overlay(candidates: Mapping[UUID, Candidate], scores: Mapping[UUID, float],
            pending: Sequence[PendingWrite]) -> tuple[dict[UUID, Candidate], dict[UUID, float],
                                                      dict[UUID, str]]:
    """Read-your-own-writes: a single-value state not yet projected marks the cards of its slot as
    superseded and takes the best score among them; another pending write joins the candidates
    when the caller scored it (``scores``: the question named its slot or shares its words, see
    :func:`services.query.retrieval.retriever.fresh_scores`). Returns the new candidates, scores, and a
    note per card touched."""
    cards, fused, notes = dict(candidates), dict(scores), {}
    for write in sorted(pending, key=lambda w: w.position):
        new = write.candidate
        slot = [c for c in cards.values() if c.card_id != new.card_id and _same_slot(c, new)
                and not c.superseded] if new.is_single_state else []
        if not slot:
            if new.card_id in fused:
                cards.setdefault(new.card_id, new)
                notes[new.card_id] = f"written at position {write.position}, not projected yet"
            continue
        for old in slot:
            cards[old.card_id] = replace(old, superseded=True, valid_to=new.valid_from)
            notes[old.card_id] = f"superseded by the unprojected write {new.card_id}"
        cards[new.card_id] = new
        fused[new.card_id] = max(fused.get(new.card_id, 0.0), *(fused.get(c.card_id, 0.0) for c in slot))
        notes[new.card_id] = f"written at position {write.position}, not projected yet"
    return cards, fused, notes


def _same_slot(a: Candidate, b: Candidate) -> bool:
    return a.is_single_state and slot_key(a) == slot_key(b)


def process(rankings: Rankings, candidates: Mapping[UUID, Candidate], *,
            now: datetime, as_of: bool, current_project: str | None, tuning: Tuning = Tuning(),
            pending: Sequence[PendingWrite] = (), top: int | None = None,
            decay_at: datetime | None = None, explain: bool = True,
            fused: Mapping[UUID, float] | None = None, leads: Sequence[LeadKey] = (),
            present: bool = False) -> Outcome:
    """The whole chain; ``now`` is the query's reference time (the as-of moment for as-of);
    ``decay_at`` where decay counts to, when not ``now`` (a question about April: April's end);
    ``present``: the question is about now (``present.asks_about_now``).
    ``explain=False`` leaves the trace empty: the ranking is the same, and cheaper to make.
    ``fused``: the RRF scores of ``rankings``, when the caller has them already. ``leads``: the
    slots the question names, whose valid cards come first."""
    every = rrf(rankings, tuning.rrf_k, tuning.weights) if fused is None else fused
    # the caller's unprojected writes that it scored (fresh_scores) stand with the loaded cards
    candidates = {**{w.candidate.card_id: w.candidate for w in pending
                     if w.candidate.card_id in every and not as_of}, **candidates}
    fused = {card_id: every[card_id] for card_id in candidates if card_id in every}
    ranks = route_ranks(rankings) if explain else {}
    trace: dict[UUID, dict[str, Any]] = {
        card_id: {"routes": ranks.get(card_id, {}), "rrf": round(score, 6)}
        for card_id, score in fused.items()} if explain else {}
    spoken = latest_first(rankings, candidates, tuning.conversation) \
        if present and tuning.conversation.enabled else {}
    scores = _decayed(fused, candidates, decay_at or now, current_project, tuning, trace, spoken)
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
    named: set[LeadKey] = set(leads)
    ranked = _lead_then_best(kept, cards, list(leads), top or tuning.top_n, tuning.slot_items)
    chosen = [cards[card_id] for card_id, _ in ranked]
    chosen_ids = {c.card_id for c in chosen}
    led = frozenset(c.card_id for c in chosen if leads_for(c, named))
    alive = [cards[card_id] for card_id in kept]
    conflicts = [c for c in contradictions(alive) if chosen_ids & set(c.card_ids)]
    if explain:
        for position, (card_id, score) in enumerate(ranked, start=1):
            trace[card_id]["final"] = {"rank": position, "score": round(score, 6),
                                       **({"lead": "a slot the question names"} if card_id in led else {})}
        for card_id in kept.keys() - chosen_ids:
            trace[card_id]["final"] = "below the top n"
    return Outcome(ranked=ranked, candidates=cards, contradictions=conflicts,
                   aging=aging_facts(chosen, now, tuning.aging_days),
                   stale=stale_knowledge(chosen, now, tuning.knowledge_stale_days), trace=trace,
                   led=led)


def _decayed(fused: Mapping[UUID, float], candidates: Mapping[UUID, Candidate], anchor: datetime,
             current_project: str | None, tuning: Tuning, trace: dict[UUID, dict[str, Any]],
             spoken: Mapping[UUID, tuple[float, float]]) -> dict[UUID, float]:
    """Decay (DESIGN rule 5) and scope boost of each fused score; the conversation turns on the
    matter of a question about now (``spoken``: days before the latest word, factor) instead
    by how long before the latest word they were said."""
    scores: dict[UUID, float] = {}
    for card_id, score in fused.items():
        card = candidates[card_id]
        days, factor = spoken.get(card_id) or _aged(card, anchor, tuning.decay)
        boost = tuning.boosts.factor(card, current_project)
        scores[card_id] = score * factor * boost
        if trace:
            trace[card_id]["decay"] = {
                "lambda": tuning.conversation.rate if card_id in spoken else tuning.decay.rate(card),
                "days": round(days, 2), "factor": round(factor, 6), "score": round(score * factor, 6),
                **_why(card_id in spoken, days, tuning.decay.exempt(card))}
            trace[card_id]["scope_boost"] = {"factor": boost, "score": round(scores[card_id], 6)}
    return scores


def _aged(card: Candidate, anchor: datetime, policy: DecayPolicy) -> tuple[float, float]:
    days = age_days(card, anchor)
    return days, policy.factor(card, days)


def _why(spoken: bool, days: float, exempt: bool) -> dict[str, str]:
    if spoken:
        return {"conversation": "the latest turn on the matter" if days == 0 else
                "days before the latest turn on the matter"}
    return {"exempt": "the slot's valid value"} if exempt else {}


def _lead_then_best(kept: Mapping[UUID, float], cards: Mapping[UUID, Candidate],
                    leads: Sequence[LeadKey], top: int, most_led: int) -> list[tuple[UUID, float]]:
    """The valid cards of the named slots first — the surest named first (``leads`` is in that
    order), then the best scored; as many as there are, up to ``most_led`` — then the best of the
    rest up to ``top`` in all."""
    priority = {key: rank for rank, key in reversed(list(enumerate(leads)))}
    led = {card_id: score for card_id, score in kept.items() if leads_for(cards[card_id], set(priority))}
    newer = {card_id: decay_anchor(cards[card_id]) for card_id in kept}

    def lead_rank(card_id: UUID) -> int:
        card = cards[card_id]
        key = slot_key(card) if card.label is not None else type_key(card.memory_type or "")
        return priority[key]

    first = sorted(top_n(led, len(led), newer), key=lambda item: lead_rank(item[0]))[:most_led]
    rest = top_n({c: s for c, s in kept.items() if c not in led}, max(0, top - len(first)), newer)
    return first + rest


def pending_state(command: Any, result: Any, recorded_at: datetime) -> PendingWrite | None:
    """The overlay entry for a card written by ``remember`` (a ``Remember`` command and its
    ``WriteResult``): a state of a slot, an event or a knowledge card; None for outcomes that
    created no card, or no position."""
    if result.card_id is None or result.position is None \
            or result.outcome not in ("remembered", "superseded", "overwritten", "recorded",
                                      "learned"):
        return None
    if command.kind == "state":
        if command.label is None:
            return None
        cardinality = decide_cardinality(command.label, command.cardinality).cardinality.value
        return PendingWrite(result.position, Candidate(
            card_id=result.card_id, kind="state", cardinality=cardinality, scope=command.scope,
            project_id=command.project_id, subject=command.subject, label=command.label,
            value=command.content, valid_from=command.valid_from or recorded_at, valid_to=None,
            occurred_at=None, recorded_at=recorded_at, verified_at=None, superseded=False,
            group_id=command.group_id), command.agent_id, command.session_id)
    if command.kind not in ("event", "knowledge"):
        return None
    occurred = (command.occurred_at or recorded_at) if command.kind == "event" else None
    return PendingWrite(result.position, Candidate(
        card_id=result.card_id, kind=command.kind, cardinality=None, scope=command.scope,
        project_id=command.project_id, subject=command.subject, label=None,
        value=command.content, valid_from=occurred or recorded_at, valid_to=None,
        occurred_at=occurred, recorded_at=recorded_at, verified_at=None, superseded=False,
        group_id=command.group_id, memory_type=command.memory_type), command.agent_id,
        command.session_id)
