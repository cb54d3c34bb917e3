"""A consolidation proposal: two cards that look like duplicates or contradict each other, and
what a reviewer made of it (DESIGN rule 10: consolidation is advisory).

The background worker finds the pair and records ``Proposed`` with its rationale and a score;
nothing about the cards changes. A reviewer accepts (the ordinary command the proposal's ``edge``
names runs first, then ``Accepted``) or rejects (``Rejected``, and nothing else). A proposal is
reviewed once.

    pending ──Accepted──▶ accepted
       └─────Rejected──▶ rejected

One proposal per (tenant, kind, pair): its id is derived from them with the two card ids sorted,
so a scan that meets the same pair again, in either order, names the same aggregate.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from uuid import UUID

from eventsourcing.domain import event

from domain.base import TenantAggregate, derived_id
from domain.errors import EmptyContentError, InvalidCommandError, InvalidKindError, InvalidTransitionError


class ProposalKind(StrEnum):
    DUPLICATE = "duplicate"
    CONTRADICTION = "contradiction"


class ProposalEdge(StrEnum):
    """What accepting the proposal does to ``src`` and ``dst``."""

    #: Knowledge ``src`` is merged into knowledge ``dst`` (Merge).
    MERGE = "merge"
    #: Knowledge ``src`` links ``related_to`` the card ``dst`` — or its slot, a state card (Link).
    RELATED_TO = "related_to"
    #: Knowledge ``src`` links ``contradicts`` knowledge ``dst`` (Link).
    CONTRADICTS = "contradicts"
    #: The value of state card ``dst`` takes the place of state card ``src`` (Revise, supersedes).
    SUPERSEDES = "supersedes"
    #: Item ``src`` of a multi-value slot is revised in place to read as item ``dst`` (Revise,
    #: updates): the slot's audited in-place update.
    UPDATES = "updates"


#: The edges each kind of proposal may make.
KIND_EDGES: dict[ProposalKind, frozenset[ProposalEdge]] = {
    ProposalKind.DUPLICATE: frozenset({ProposalEdge.MERGE, ProposalEdge.RELATED_TO,
                                       ProposalEdge.UPDATES}),
    ProposalKind.CONTRADICTION: frozenset({ProposalEdge.CONTRADICTS, ProposalEdge.SUPERSEDES}),
}


class Review(StrEnum):
    """What a reviewed proposal reads as."""

    ACCEPTED = "accepted"
    REJECTED = "rejected"


class ReviewDecision(StrEnum):
    """What a reviewer decides."""

    ACCEPT = "accept"
    REJECT = "reject"


def parse_decision(decision: str) -> ReviewDecision:
    try:
        return ReviewDecision(decision)
    except ValueError:
        raise InvalidKindError(f"unknown review decision {decision!r}; expected accept or reject"
                               ) from None


def parse_kind(kind: str) -> ProposalKind:
    try:
        return ProposalKind(kind)
    except ValueError:
        choices = ", ".join(k.value for k in ProposalKind)
        raise InvalidKindError(f"unknown proposal kind {kind!r}; expected one of {choices}") from None


def parse_edge(kind: ProposalKind, edge: str) -> ProposalEdge:
    allowed = KIND_EDGES[kind]
    if edge not in {e.value for e in allowed}:
        choices = ", ".join(sorted(e.value for e in allowed))
        raise InvalidKindError(f"a {kind.value} proposal makes {choices}, not {edge!r}")
    return ProposalEdge(edge)


class Proposal(TenantAggregate):
    @staticmethod
    def create_id(tenant_id: str, kind: str, src_id: UUID, dst_id: UUID) -> UUID:
        """The same pair, in either order, of the same kind: the same proposal."""
        first, second = sorted((str(src_id), str(dst_id)))
        return derived_id("proposal", tenant_id, kind, first, second)

    @classmethod
    def propose(
        cls, tenant_id: str, kind: str, src_id: UUID, dst_id: UUID, edge: str, rationale: str,
        score: float, timestamp: datetime,
    ) -> Proposal:
        """A new proposal, its parts checked first (nothing is stored when one is wrong)."""
        parsed = parse_kind(kind)
        parse_edge(parsed, edge)
        if src_id == dst_id:
            raise InvalidCommandError("a proposal pairs two different cards")
        if not rationale.strip():
            raise EmptyContentError("a proposal says why: its rationale is empty")
        if not 0.0 <= score <= 1.0:
            raise InvalidCommandError(f"a proposal's score is between 0 and 1, not {score}")
        return cls(tenant_id=tenant_id, kind=parsed.value, src_id=src_id, dst_id=dst_id, edge=edge,
                   rationale=rationale.strip(), score=float(score), timestamp=timestamp)

    @event("Proposed")
    def __init__(
        self, tenant_id: str, kind: str, src_id: UUID, dst_id: UUID, edge: str, rationale: str,
        score: float, timestamp: datetime,
    ) -> None:
        self.tenant_id = tenant_id
        self.kind = kind
        self.src_id = src_id
        self.dst_id = dst_id
        self.edge = edge
        self.rationale = rationale
        self.score = score
        self.proposed_at = timestamp
        self.review: str | None = None
        self.reviewed_by: str | None = None
        self.note = ""
        self.reviewed_at: datetime | None = None

    @property
    def pending(self) -> bool:
        return self.review is None

    def decide(self, decision: ReviewDecision, reviewed_by: str, note: str, now: datetime) -> None:
        """Record the review: ``Accepted`` or ``Rejected``, once."""
        self.check_reviewable(reviewed_by)
        if decision is ReviewDecision.ACCEPT:
            self._accept(reviewed_by=reviewed_by, note=note, timestamp=now)
        else:
            self._reject(reviewed_by=reviewed_by, note=note, timestamp=now)

    def check_reviewable(self, reviewed_by: str) -> None:
        """Refuse a review without a reviewer, or of a proposal reviewed before."""
        if not reviewed_by.strip():
            raise InvalidCommandError("a review names its reviewer (reviewed_by)")
        if self.review is not None:
            raise InvalidTransitionError(
                f"proposal {self.id} was already {self.review} by {self.reviewed_by} at "
                f"{self.reviewed_at.isoformat() if self.reviewed_at else '?'}; a proposal is "
                "reviewed once"
            )

    @event("Accepted")
    def _accept(self, reviewed_by: str, note: str, timestamp: datetime) -> None:
        self._reviewed(Review.ACCEPTED, reviewed_by, note, timestamp)

    @event("Rejected")
    def _reject(self, reviewed_by: str, note: str, timestamp: datetime) -> None:
        self._reviewed(Review.REJECTED, reviewed_by, note, timestamp)

    def _reviewed(self, review: Review, reviewed_by: str, note: str, timestamp: datetime) -> None:
        self.review = review.value
        self.reviewed_by = reviewed_by
        self.note = note
        self.reviewed_at = timestamp
