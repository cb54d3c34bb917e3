"""The ``proposals`` read model: one row per consolidation proposal, pending until reviewed.

Registered on :func:`projections.cards.project` (that module imports this one at its end), so the
incremental projector and a rebuild apply the same operations: a ``PutRecord`` when a pair is
proposed, a ``ChangeRecord`` when it is reviewed. ``review`` is NULL while pending, then
``accepted`` or ``rejected``; ``reviewed_at`` is the review event's time.
"""

from __future__ import annotations

from typing import Any

from domain.proposal import Proposal, Review
from projections.cards import plain, project
from projections.ops import ChangeRecord, Op, PutRecord

TABLE = "proposals"


@project.register(Proposal.Proposed)  # type: ignore[attr-defined]
def _(event: Any) -> list[Op]:
    return [PutRecord(TABLE, {
        "tenant_id": event.tenant_id, "proposal_id": event.originator_id, "kind": event.kind,
        "src_id": event.src_id, "dst_id": event.dst_id, "edge": event.edge,
        "rationale": plain(event.rationale), "score": event.score, "proposed_at": event.timestamp,
        "review": None, "reviewed_at": None, "reviewed_by": None, "note": None,
    })]


def _reviewed(review: Review):  # type: ignore[no-untyped-def]
    def op(event: Any) -> list[Op]:
        return [ChangeRecord(TABLE, event.tenant_id, event.originator_id, {
            "review": review.value, "reviewed_at": event.timestamp,
            "reviewed_by": event.reviewed_by, "note": plain(event.note),
        })]
    return op


project.register(Proposal.Accepted, _reviewed(Review.ACCEPTED))  # type: ignore[attr-defined]
project.register(Proposal.Rejected, _reviewed(Review.REJECTED))  # type: ignore[attr-defined]
