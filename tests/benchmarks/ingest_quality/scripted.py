"""A deterministic stand-in for the extraction model, answering from the ground truth.

It knows every fact and event a turn states, and answers them as a model whose labels drift and
that ignores any catalogue of stored labels it is shown: for the current turn,

- one ``state`` candidate per fact value said in that turn: the fact's subject, its value, a label
  from the fact's ``label_variants`` taken round-robin per occurrence of the fact (the first value
  of "city" comes back as ``city``, the next as ``residence`` …), ``cardinality_hint`` null,
  ``occurred_at_hint`` null unless the value's ``valid_from`` is exact and another day than the
  turn's (then that day at 09:00 in the turn's offset), confidence 0.9;
- one ``event`` candidate per event said in that turn, ``occurred_at_hint`` its day at 12:00 in
  the turn's offset.

What it measures is what the server makes of drifting labels (one attribute in one slot, or in
several), never what a model understands: every value and time it gives is true.
"""

from __future__ import annotations

from datetime import datetime, time
from typing import Any

from tests.benchmarks.ingest_quality.dataset import Conversation, Turn

CONFIDENCE = 0.9


def candidate(kind: str, memory_type: str, subject: str, label: str, value: str,
              hint: str | None) -> dict[str, Any]:
    """One candidate in the shape the extraction schema asks for (``existing_label``: null)."""
    return {"kind": kind, "memory_type": memory_type, "subject": subject, "label": label,
            "value": value, "cardinality_hint": None, "tags": [], "occurred_at_hint": hint,
            "confidence": CONFIDENCE, "title": None, "related_concepts": [], "existing_label": None}


def at(day: Any, hour: int, turn: Turn) -> str:
    """``day`` at ``hour``:00 in the offset the turn was said in."""
    return datetime.combine(day, time(hour), tzinfo=turn.said_at.tzinfo).isoformat()


def answers(conversation: Conversation) -> dict[str, dict[str, Any]]:
    """``{turn id: {"candidates": [...]}}`` for every turn of ``conversation``."""
    seen = [0] * len(conversation.facts)  # occurrences of each fact so far: the label's turn
    found: dict[str, dict[str, Any]] = {}
    for turn in conversation.turns:
        cards = []
        for index, fact in enumerate(conversation.facts):
            for value in fact.values:
                if value.said_in != turn.turn_id:
                    continue
                label = fact.labels[seen[index] % len(fact.labels)]
                seen[index] += 1
                exact = value.valid_from is not None and not value.vague
                hint = (at(value.valid_from, 9, turn)
                        if exact and value.valid_from != turn.said_at.date() else None)
                cards.append(candidate("state", "fact", fact.subject, label, value.value, hint))
        for event in conversation.events:
            if event.said_in == turn.turn_id:
                cards.append(candidate("event", "event", "user", "event", event.what,
                                       at(event.occurred_on, 12, turn)))
        found[turn.turn_id] = {"candidates": cards}
    return found


class ScriptedModel:
    """The answers of every turn of ``conversations``, computed once."""

    def __init__(self, conversations: list[Conversation]) -> None:
        self._answers = {c.id: answers(c) for c in conversations}

    def answer(self, conversation_id: str, turn_id: str) -> dict[str, Any]:
        return self._answers.get(conversation_id, {}).get(turn_id, {"candidates": []})
