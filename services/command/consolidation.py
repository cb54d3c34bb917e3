"""Consolidation (DESIGN rule 10): a background scan proposes, a reviewer decides.

A scan reads one tenant's read models and finds duplicates and contradictions
(:mod:`services.command.consolidation_rules` says which, and what accepting each does). Each becomes a
:class:`domain.proposal.Proposal` with its rationale and score, and nothing else is written:
pairs already proposed, linked or merged are left alone, and event cards never take part.
Accepting runs the ordinary command — Merge, Link or Revise, so cardinality and the three
arbitration layers apply as to any write — then records ``Accepted``; rejecting records
``Rejected`` and nothing else.

:class:`ConsolidationWorker` scans every tenant that has cards every
``consolidation_interval_seconds``; ``palimpsest serve`` runs one
(:func:`consolidation_worker`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from domain.cards import StateCard
from domain.errors import CardNotFoundError, InvalidKindError
from domain.event_card import EventCard
from domain.knowledge import KnowledgeCard
from domain.proposal import Proposal, ProposalEdge, ReviewDecision, parse_decision
from domain.slot import Slot
from infra.postgres import Database, Lease
from infra.redact import described, traced
from infra.settings import Settings
from projections.consolidation_sql import tenants_with_cards
from services.command.application import BaseApplication
from services.command.commands import Command, Link, Merge, ReviewProposal, Revise, WriteResult
from services.command.consolidation_rules import Candidate, find_candidates
from services.periodic import Periodic

if TYPE_CHECKING:
    from services.command.memory import Palimpsest
    from services.query.readmodels import ReadModels

log = logging.getLogger(__name__)


class Propose(Command):
    """Record a consolidation proposal (the scan's command)."""

    kind: str
    src_id: UUID
    dst_id: UUID
    edge: str
    rationale: str = Field(min_length=1, max_length=2_000)
    score: float = Field(ge=0.0, le=1.0)


class ProposalCommands(BaseApplication):
    """The command side of consolidation, a mixin of :class:`services.command.memory.Palimpsest`."""

    def propose(self, tenant_id: str, command: Propose) -> WriteResult:
        """Record a proposal. A pair proposed before (the same kind, in either order) is answered
        ``already_proposed`` and nothing is stored."""
        proposal_id = Proposal.create_id(tenant_id, command.kind, command.src_id, command.dst_id)
        known = WriteResult(outcome="already_proposed", aggregate_id=proposal_id)
        if self.find(tenant_id, proposal_id, Proposal) is not None:
            return known

        def decide(now: datetime) -> tuple[list[Proposal], WriteResult]:
            if self.find(tenant_id, proposal_id, Proposal) is not None:  # another scan, meanwhile
                return [], known
            self._check_pair(tenant_id, command)
            proposal = Proposal.propose(
                tenant_id=tenant_id, kind=command.kind, src_id=command.src_id,
                dst_id=command.dst_id, edge=command.edge, rationale=command.rationale,
                score=command.score, timestamp=now)
            return [proposal], WriteResult(outcome="proposed", aggregate_id=proposal.id)

        return self._execute(tenant_id, command, decide)

    def _check_pair(self, tenant_id: str, command: Propose) -> None:
        """Never an event card; a merge or a ``contradicts`` link pairs knowledge cards, a
        ``related_to`` link starts at one (state cards live in slots: their edges are Revise's)."""
        for card_id in (command.src_id, command.dst_id):
            if self.find(tenant_id, card_id, EventCard) is not None:
                raise InvalidKindError(f"card {card_id} is an event card: event cards are never "
                                       "proposed for consolidation")
        knowledge = {ProposalEdge.MERGE.value: (command.src_id, command.dst_id),
                     ProposalEdge.CONTRADICTS.value: (command.src_id, command.dst_id),
                     ProposalEdge.RELATED_TO.value: (command.src_id,)}
        for card_id in knowledge.get(command.edge, ()):
            self.load(tenant_id, card_id, KnowledgeCard, "knowledge card")

    def record_review(self, tenant_id: str, command: ReviewProposal) -> WriteResult:
        """Record a review (``Accepted`` or ``Rejected``) and nothing else; a proposal is
        reviewed once. :meth:`Consolidator.review` runs an acceptance's command first."""
        def decide(now: datetime) -> tuple[list[Proposal], WriteResult]:
            proposal = self.load(tenant_id, command.proposal_id, Proposal, "proposal")
            proposal.decide(parse_decision(command.decision), command.reviewed_by, command.note,
                            now)
            return [proposal], WriteResult(outcome=proposal.review or "", aggregate_id=proposal.id)

        return self._execute(tenant_id, command, decide)


class ReviewResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    proposal_id: UUID
    #: accepted | rejected
    review: str
    kind: str
    edge: str
    #: The ordinary command's answer when accepted (merged, linked, superseded, updated,
    #: verified — or queued: a history rewrite waits for arbitration like any other).
    applied: WriteResult | None = None
    #: The notification id of the review event.
    position: int | None = None


class Consolidator:
    """Scans a tenant for proposals (:meth:`scan`) and carries out a reviewer's decision
    (:meth:`review`) through the Palimpsest app's ordinary commands."""

    def __init__(self, read_models: ReadModels, app: Palimpsest, settings: Settings) -> None:
        self.read = read_models
        self.app = app
        self.settings = settings

    def candidates(self, tenant_id: str) -> list[Candidate]:
        """What the tenant's cards show now (:func:`find_candidates`), proposed or not."""
        s = self.settings
        rows = self.read.consolidation_rows(tenant_id, s.consolidation_max_cards)
        return find_candidates(rows, s.consolidation_similarity,
                               s.consolidation_contradiction_similarity)

    def mark(self, tenant_id: str) -> tuple[int, int]:
        """What changes whenever a scan of the tenant could find something new."""
        return self.read.consolidation_mark(tenant_id)

    def propose(self, tenant_id: str, candidates: list[Candidate]) -> dict[UUID, Candidate]:
        """Record each candidate; the ones stored now, by proposal id."""
        created = {}
        for c in candidates:
            result = self.app.propose(tenant_id, Propose(
                kind=c.kind.value, src_id=c.src_id, dst_id=c.dst_id, edge=c.edge.value,
                rationale=c.rationale, score=c.score))
            if result.outcome == "proposed" and result.aggregate_id is not None:
                created[result.aggregate_id] = c
        return created

    def scan(self, tenant_id: str) -> list[UUID]:
        """Propose what the tenant's cards show; the ids of the proposals made now."""
        return list(self.propose(tenant_id, self.candidates(tenant_id)))

    def review(self, tenant_id: str, proposal_id: UUID, decision: str, reviewed_by: str,
               note: str = "") -> ReviewResult:
        """Accept (the ordinary command first, then ``Accepted``) or reject (``Rejected`` only).
        A proposal reviewed before is refused (InvalidTransitionError) before anything runs; an
        acceptance cut short between its command and its record is finished by a second call
        (the command's request id answers it from its receipt)."""
        command = ReviewProposal(proposal_id=proposal_id, decision=decision,
                                 reviewed_by=reviewed_by, note=note)
        proposal = self.app.load(tenant_id, proposal_id, Proposal, "proposal")
        proposal.check_reviewable(command.reviewed_by)
        applied = None
        if parse_decision(command.decision) is ReviewDecision.ACCEPT:
            applied = self._apply(tenant_id, proposal)
        recorded = self.app.record_review(tenant_id, command)
        return ReviewResult(proposal_id=proposal.id, review=recorded.outcome, kind=proposal.kind,
                            edge=proposal.edge, applied=applied, position=recorded.position)

    def _apply(self, tenant_id: str, proposal: Proposal) -> WriteResult:
        edge, src, dst = ProposalEdge(proposal.edge), proposal.src_id, proposal.dst_id
        request = f"proposal:{proposal.id}"
        if edge is ProposalEdge.MERGE:
            return self.app.merge(tenant_id, Merge(card_id=src, into=dst, request_id=request))
        if edge in (ProposalEdge.RELATED_TO, ProposalEdge.CONTRADICTS):
            target = dst if self.app.find(tenant_id, dst, KnowledgeCard) else self._slot_of(
                tenant_id, dst)
            return self.app.link(tenant_id, Link(card_id=src, edge=edge.value, target_id=target,
                                                 request_id=request))
        slot, card = self._state(tenant_id, src)
        dst_slot, survivor = self._state(tenant_id, dst)
        if edge is ProposalEdge.UPDATES:
            revise = Revise(card_id=src, content=survivor.value, edge="updates", request_id=request)
        elif dst_slot.id == slot.id:  # one slot's history: the later value over both stretches
            revise = Revise(card_id=dst, content=survivor.value, valid_from=card.valid_from,
                            request_id=request)
        else:
            revise = Revise(card_id=src, content=survivor.value, request_id=request)
        return self.app.revise(tenant_id, slot.id, revise)

    def _slot_of(self, tenant_id: str, card_id: UUID) -> UUID:
        found = self.read.card_aggregates(tenant_id, [card_id]).get(card_id)
        if found is None:
            raise CardNotFoundError(f"no card {card_id}")
        return found

    def _state(self, tenant_id: str, card_id: UUID) -> tuple[Slot, StateCard]:
        slot = self.app.load(tenant_id, self._slot_of(tenant_id, card_id), Slot, "slot")
        return slot, slot.card(card_id)


class ConsolidationWorker(Periodic):
    """Scans every tenant that has cards every ``interval`` seconds until stopped, with one log
    line per scan and its counts. A tenant nothing happened to since its last scan (the same
    :meth:`Consolidator.mark`) is skipped; one whose scan fails is logged and scanned next time."""

    name = "consolidation"

    def __init__(self, consolidator: Consolidator, tenants: Callable[[], list[str]],
                 interval: float, stop: threading.Event | None = None,
                 lease: Lease | None = None) -> None:
        super().__init__(interval, stop, lease=lease)
        self.consolidator = consolidator
        self.tenants = tenants
        self._marks: dict[str, tuple[int, int]] = {}

    def scan_all(self) -> Counter[str]:
        """One scan of every tenant: new proposals by kind, and how many tenants were
        ``scanned``, ``unchanged`` (skipped) and ``failed``."""
        started, counts = time.monotonic(), Counter[str]()
        try:
            tenants = self.tenants()
        except Exception as error:  # the database is away: the next scan tries again
            log.warning("consolidation: cannot list the tenants: %s", described(error))
            return counts
        for tenant in tenants:
            if self.stopping.is_set():
                break
            counts[self._scan(tenant, counts)] += 1
        log.info("consolidation: scanned %d tenants (%d unchanged, %d failed) in %.2f s: %d new "
                 "proposals (%d duplicate, %d contradiction)", counts["scanned"],
                 counts["unchanged"], counts["failed"], time.monotonic() - started,
                 counts["duplicate"] + counts["contradiction"], counts["duplicate"],
                 counts["contradiction"])
        return counts

    def _scan(self, tenant: str, counts: Counter[str]) -> str:
        try:
            mark = self.consolidator.mark(tenant)  # read first: what moves meanwhile is seen next
            if self._marks.get(tenant) == mark:
                return "unchanged"
            created = self.consolidator.propose(tenant, self.consolidator.candidates(tenant))
        except Exception as error:  # one tenant's failure never stops the others' scans
            log.error("consolidation: scanning tenant %s failed: %s", tenant, traced(error))
            return "failed"
        self._marks[tenant] = mark
        counts.update(c.kind.value for c in created.values())
        return "scanned"

    def tick(self) -> Counter[str]:
        return self.scan_all()


def consolidation_worker(app: Palimpsest, read_models: ReadModels, monitor: Database,
                         settings: Settings, stop: threading.Event | None = None,
                         lease: Lease | None = None) -> ConsolidationWorker:
    """The worker ``serve`` runs: tenants listed as the projector role (``monitor``), scanned
    as the runtime role (``read_models``), proposals recorded through ``app``; with ``lease``,
    only while this process holds it."""
    return ConsolidationWorker(
        Consolidator(read_models, app, settings),
        lambda: tenants_with_cards(monitor, settings.read_schema),
        settings.consolidation_interval_seconds, stop, lease)
