"""Commitments read as ``overdue`` once their due date has passed unresolved (DESIGN rule 11).

``overdue`` is not a state a commitment moves into: it is how an ``open`` or ``waiting``
commitment reads at a moment after its due date, so an answer as of last week says what was
overdue then.
"""

from __future__ import annotations

from datetime import datetime

OVERDUE = "overdue"
#: The statuses a commitment can be overdue in: not yet resolved or expired.
UNRESOLVED = frozenset({"open", "waiting"})


def reads_as(memory_type: str | None, status: str | None, due_at: datetime | None,
             moment: datetime) -> str | None:
    """The status a card shows at ``moment``: its own, or ``overdue`` for an unresolved commitment
    past its due date."""
    if memory_type == "commitment" and status in UNRESOLVED and due_at is not None and due_at < moment:
        return OVERDUE
    return status
