"""Three-layer arbitration of a conflicting write to a slot (DESIGN §2.4).

1. same-turn self-correction: the same session, the same turn (or within the turn window) → overwrite;
2. low-frequency change: fewer than 3 changes in the trailing 30 days → applied automatically;
3. high-frequency (≥ 3 changes in 30 days, the incoming change included: the third change in 30
   days is the one that is queued) or large-span (valid_from ≥ 30 days back) → queued for a
   person, who decides keep_old, accept_new or both_valid.

A slot has one pending case at a time; every write queued while it is pending joins it, and one
decision settles every proposal (:func:`accepted`; decision 0006).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from uuid import UUID

from domain.cards import StateCard, same_value
from domain.erased import is_erased
from domain.errors import CardNotFoundError, InvalidCommandError
from domain.policy import Policy
from domain.values import Provenance


class Layer(str, Enum):
    SAME_TURN = "same_turn"
    AUTOMATIC = "automatic"
    QUEUED = "arbitration_queue"
    ARBITRATED = "arbitrated"


class Decision(str, Enum):
    KEEP_OLD = "keep_old"
    ACCEPT_NEW = "accept_new"
    BOTH_VALID = "both_valid"


@dataclass(frozen=True)
class Verdict:
    layer: Layer
    reason: str


def is_same_turn(
    previous: Provenance, previous_at: datetime, incoming: Provenance, now: datetime,
    policy: Policy,
) -> bool:
    if not previous.session_id or previous.session_id != incoming.session_id:
        return False
    if previous.turn_id and incoming.turn_id:
        return previous.turn_id == incoming.turn_id
    return abs(now - previous_at) <= policy.turn_window


def recent_changes(change_times: Iterable[datetime], now: datetime, policy: Policy) -> int:
    since = now - policy.frequency_window
    return sum(1 for moment in change_times if since < moment <= now)


def judge(
    *, same_turn: bool, changes: int, valid_from: datetime, now: datetime, policy: Policy
) -> Verdict:
    """``changes``: the slot's changes already made in the trailing window; the incoming write
    would be one more."""
    if same_turn:
        return Verdict(Layer.SAME_TURN, "same-turn self-correction")
    if changes + 1 >= policy.high_frequency_changes:
        return Verdict(
            Layer.QUEUED,
            f"high frequency: {changes + 1} changes in the trailing {policy.frequency_window.days} "
            "days, this one included",
        )
    reach = now - valid_from
    if reach >= policy.large_span:
        return Verdict(
            Layer.QUEUED, f"large span: rewrites history {reach.days} days back"
        )
    return Verdict(
        Layer.AUTOMATIC,
        f"low frequency: {changes + 1} changes in the trailing {policy.frequency_window.days} days, "
        "this one included",
    )


def accepted(
    proposals: tuple[StateCard, ...], decision: Decision, card_id: UUID | None, by_item: bool
) -> tuple[StateCard, ...]:
    """The proposals (in the order they came) a decision on a case applies, in that order:

    - ``keep_old``: none;
    - ``accept_new``: the one named by ``card_id``, else the latest — of each item when
      ``by_item`` (a multi-value slot's proposals about different items do not compete);
    - ``both_valid``: each distinct value once, the proposal that claims it earliest in world
      time: each then holds from its ``valid_from`` to the next value that starts after it.
    """
    if card_id is not None:
        if decision is not Decision.ACCEPT_NEW:
            raise InvalidCommandError(f"{decision.value} names no proposal: only accept_new takes a card id")
        named = tuple(card for card in proposals if card.card_id == card_id)
        if not named:
            raise CardNotFoundError(f"card {card_id} is no proposal of this arbitration")
        return named
    if decision is Decision.KEEP_OLD:
        return ()
    if decision is Decision.ACCEPT_NEW:
        latest = {_item(card) if by_item else None: card for card in proposals}.values()
        return tuple(card for card in proposals if card in latest)
    earliest: list[StateCard] = []
    for card in sorted(proposals, key=lambda c: c.valid_from):
        if not any(same_value(card.value, kept.value) for kept in earliest):
            earliest.append(card)
    return tuple(card for card in proposals if card in earliest)


def _item(card: StateCard) -> object:
    """The item a card of a multi-value slot is of: its key; an erased key is an item of its own."""
    return card.card_id if is_erased(card.item_key) else card.item_key
