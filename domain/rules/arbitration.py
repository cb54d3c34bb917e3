"""Three-layer arbitration of a conflicting write to a slot (DESIGN §2.4).

1. same-turn self-correction: the same session, the same turn (or within the turn window) → overwrite;
2. low-frequency change: fewer than 3 changes in the trailing 30 days → applied automatically;
3. high-frequency (≥ 3 changes in 30 days, the incoming change included: the third change in 30
   days is the one that is queued) or large-span (valid_from ≥ 30 days back) → queued for a
   person, who decides keep_old, accept_new or both_valid.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import Enum

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
