"""Ranking the loaded candidates (DESIGN §3), in its order, each step a pure function of plain data
with a trace of what it did to each card for ``explain``:

the fused score → half-life decay as a bounded prior (for a question about a current value,
conversation turns latest on the matter first; for one about what was said or done, no age penalty
on turns: ``present``) → scope boost → read-your-own-writes overlay → superseded
cards dropped (unless as-of) → the named slots' valid cards first, then the best of the rest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any
from uuid import UUID

from domain.errors import InvalidCommandError
from services.query.retrieval.asks import Reading
from services.query.retrieval.fuse import Fused, route_ranks
from services.query.retrieval.present import latest_first, question_reading, unaged
from services.query.retrieval.query import RetrievalQuery
from services.query.retrieval.scoring import (
    Candidate,
    DecayPolicy,
    LeadKey,
    PendingWrite,
    age_days,
    decay_anchor,
    slot_key,
    top_n,
    type_key,
)
from services.query.retrieval.tuning import Tuning

Trace = dict[UUID, dict[str, Any]]


@dataclass(frozen=True)
class Asked:
    """What a question asks of the ranking. ``now``: its reference time (the as-of moment for
    as-of); ``decay_at``: where decay counts to, when not ``now`` (a question about April: April's
    end); ``present``: the question asks for a current value (``present.question_reading``), and
    ``reading`` what it was taken for, for ``explain``; ``leads``: what it
    names, whose valid cards come first; ``pending``: the caller's writes the read models do not
    hold yet. ``explain=False`` leaves the trace empty: the ranking is the same, and cheaper to
    make."""

    now: datetime
    as_of: bool = False
    current_project: str | None = None
    top: int | None = None
    decay_at: datetime | None = None
    explain: bool = True
    present: bool = False
    reading: Reading | None = None
    leads: Sequence[LeadKey] = ()
    pending: Sequence[PendingWrite] = ()


def asked(query: RetrievalQuery, leads: Sequence[LeadKey],
          unprojected: Sequence[PendingWrite]) -> Asked:
    reading = question_reading(query)
    return Asked(now=query.reference_time, as_of=query.as_of, current_project=query.project_id,
                 top=query.top_n, decay_at=decay_at(query), explain=query.explain,
                 present=reading.current, reading=reading, leads=leads, pending=unprojected)


def decay_at(query: RetrievalQuery) -> datetime:
    """A question that names a time is about that time: decay counts to the end of the latest
    range it names (never past the reference time); otherwise to the reference time."""
    try:
        ranges = query.time_ranges
    except InvalidCommandError:
        ranges = []
    return min([query.reference_time, *(r.end for r in ranges[-1:])])


@dataclass(frozen=True)
class Ranked:
    """The cards chosen, best first, with their final scores; every candidate as ranked (the
    overlay applied); those kept (not dropped as superseded), and the trace."""

    chosen: list[tuple[UUID, float]]
    candidates: dict[UUID, Candidate]
    kept: tuple[UUID, ...]
    trace: Trace
    #: The chosen cards that lead as a named slot's, whatever their scores.
    led: frozenset[UUID]

    def chosen_cards(self) -> list[Candidate]:
        """The chosen cards, best first."""
        return [self.candidates[card_id] for card_id, _ in self.chosen]


def rank(fused: Fused, candidates: Mapping[UUID, Candidate], asked: Asked,
         tuning: Tuning) -> Ranked:
    """The loaded ``candidates`` of those ``fused`` through every step, in the module's order."""
    as_of, explain = asked.as_of, asked.explain
    # the caller's unprojected writes that were scored (expand.fresh_scores) join the loaded cards
    candidates = {**{w.candidate.card_id: w.candidate for w in asked.pending
                     if w.candidate.card_id in fused.scores and not as_of}, **candidates}
    scores = {card_id: fused.scores[card_id] for card_id in candidates if card_id in fused.scores}
    ranks = route_ranks(fused.rankings) if explain else {}
    question = asked.reading.explained() if asked.reading else {}
    trace: Trace = {card_id: {"routes": ranks.get(card_id, {}), "rrf": round(score, 6),
                              **({"question": question} if question else {})}
                    for card_id, score in scores.items()} if explain else {}
    anchor = asked.decay_at or asked.now
    spoken = _turns(fused, candidates, anchor, asked.present, tuning)
    scores = _decayed(scores, candidates, anchor, asked.current_project, tuning, trace, spoken,
                      asked.present)
    # a pending write is news of now: an as-of answer is about what was known then
    cards, scores, notes = overlay(candidates, scores, () if as_of else asked.pending)
    for card_id, note in notes.items():
        if explain:
            trace.setdefault(card_id, {"routes": {}, "rrf": 0.0})["overlay"] = note
    kept = _unsuperseded(scores, cards, as_of, trace if explain else None)
    chosen = _lead_then_best(kept, cards, list(asked.leads), asked.top or tuning.top_n,
                             tuning.slot_items)
    named: set[LeadKey] = set(asked.leads)
    led = frozenset(card_id for card_id, _ in chosen if leads_for(cards[card_id], named))
    if explain:
        _final(trace, kept, chosen, led)
    return Ranked(chosen=chosen, candidates=cards, kept=tuple(kept), trace=trace, led=led)


def _turns(fused: Fused, candidates: Mapping[UUID, Candidate], anchor: datetime, present: bool,
           tuning: Tuning) -> dict[UUID, tuple[float, float]]:
    """The conversation turns ranked by the conversation prior, each with (days, factor): for a
    question about a current value those on the matter, latest first; for one about what was
    said or done every turn, undecayed. Empty when the prior is switched off (turns decay as
    events)."""
    if not tuning.conversation.enabled:
        return {}
    if present:
        return latest_first(fused.rankings, candidates, tuning.conversation)
    return unaged(candidates, anchor)


def _decayed(fused: Mapping[UUID, float], candidates: Mapping[UUID, Candidate], anchor: datetime,
             current_project: str | None, tuning: Tuning, trace: Trace,
             spoken: Mapping[UUID, tuple[float, float]], present: bool) -> dict[UUID, float]:
    """Decay (DESIGN rule 5) and scope boost of each fused score; the conversation turns of
    ``spoken`` (days, factor) instead: on the matter of a question about a current value, by how
    long before the latest word they were said; for a question about what was said or done,
    not at all."""
    scores: dict[UUID, float] = {}
    for card_id, score in fused.items():
        card = candidates[card_id]
        days, factor = spoken.get(card_id) or _aged(card, anchor, tuning.decay)
        boost = tuning.boosts.factor(card, current_project)
        scores[card_id] = score * factor * boost
        if trace:
            trace[card_id]["decay"] = {
                "lambda": _rate(card, card_id in spoken, present, tuning),
                "days": round(days, 2), "factor": round(factor, 6), "score": round(score * factor, 6),
                **_why(card_id in spoken, present, days, tuning.decay.exempt(card))}
            trace[card_id]["scope_boost"] = {"factor": boost, "score": round(scores[card_id], 6)}
    return scores


def _aged(card: Candidate, anchor: datetime, policy: DecayPolicy) -> tuple[float, float]:
    days = age_days(card, anchor)
    return days, policy.factor(card, days)


def _rate(card: Candidate, spoken: bool, present: bool, tuning: Tuning) -> float:
    if not spoken:
        return tuning.decay.rate(card)
    return tuning.conversation.rate if present else 0.0


def _why(spoken: bool, present: bool, days: float, exempt: bool) -> dict[str, str]:
    if spoken and not present:
        return {"conversation": "no age penalty: the question asks what was said or done"}
    if spoken:
        return {"conversation": "the latest turn on the matter" if days == 0 else
                "days before the latest turn on the matter"}
    return {"exempt": "the slot's valid value"} if exempt else {}


def overlay(candidates: Mapping[UUID, Candidate], scores: Mapping[UUID, float],
            pending: Sequence[PendingWrite]) -> tuple[dict[UUID, Candidate], dict[UUID, float],
                                                      dict[UUID, str]]:
    """Read-your-own-writes: a single-value state not yet projected marks the cards of its slot as
    superseded and takes the best score among them; another pending write joins the candidates
    when it was scored (``scores``: the question named its slot or shares its words, see
    :func:`services.query.retrieval.expand.fresh_scores`). Returns the new candidates, scores, and
    a note per card touched."""
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


def _unsuperseded(scores: Mapping[UUID, float], cards: Mapping[UUID, Candidate], as_of: bool,
                  trace: Trace | None) -> dict[UUID, float]:
    """The scores of the cards not superseded; all of them for an as-of question, which asks
    about the past."""
    kept: dict[UUID, float] = {}
    for card_id, score in scores.items():
        superseded = cards[card_id].superseded
        if superseded and not as_of:
            if trace is not None:
                trace[card_id]["superseded"] = "dropped"
            continue
        kept[card_id] = score
        if superseded and trace is not None:
            trace[card_id]["superseded"] = "kept: the query is as-of"
    return kept


def leads_for(card: Candidate, named: set[LeadKey]) -> bool:
    """Whether ``card`` is one of what the question names: a card of a named slot, or of a
    named memory type outside any slot."""
    if card.kind != "state":
        return False
    if card.label is None:
        return card.memory_type is not None and type_key(card.memory_type) in named
    return slot_key(card) in named


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


def _final(trace: Trace, kept: Mapping[UUID, float], chosen: list[tuple[UUID, float]],
           led: frozenset[UUID]) -> None:
    """Each kept card's last word in the trace: its rank and score, or below the cut."""
    for position, (card_id, score) in enumerate(chosen, start=1):
        trace[card_id]["final"] = {"rank": position, "score": round(score, 6),
                                   **({"lead": "a slot the question names"} if card_id in led else {})}
    for card_id in kept.keys() - {card_id for card_id, _ in chosen}:
        trace[card_id]["final"] = "below the top n"
