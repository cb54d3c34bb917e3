"""Palimpsest's commands: remember, revise, verify, correct, link, merge, arbitrate, move.

Each is: load, one domain call, save (through :meth:`BaseApplication._execute`, which checks the
command's text and tenant first: so everything a command parses happens inside its decision).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from domain.arbitration import ArbitrationCase
from domain.cards import StateCard
from domain.commitment import Blocker, Commitment
from domain.erased import is_erased
from domain.errors import (
    ArbitrationCaseNotFoundError,
    CardNotFoundError,
    InvalidKindError,
    InvalidTransitionError,
)
from domain.event_card import EventCard, check_occurred_at
from domain.knowledge import KnowledgeCard
from domain.rules.arbitration import Decision
from domain.rules.cardinality import decide_cardinality, normalise_label
from domain.rules.tags import normalise_tags
from domain.rules.validation import check_aware, check_content, check_not_future
from domain.slot import Outcome, Slot, WriteOutcome
from domain.values import Cardinality, CardKind, Edge, MemoryType, Scope, parse_kind
from services.command.application import BaseApplication
from services.command.commands import (
    Arbitrate,
    CorrectEvent,
    Link,
    Merge,
    Move,
    Remember,
    Rename,
    Revise,
    Verify,
    WriteResult,
)
from services.command.consolidation import ProposalCommands
from services.command.erasure import ErasureCommands
from services.command.keyed_ids import slot_generations
from services.command.retention import RetentionCommands
from services.ingest.commands import IngestCommands


def _result(outcome: WriteOutcome, slot: Slot) -> WriteResult:
    return WriteResult(
        outcome=outcome.outcome.value, card_id=outcome.card_id, aggregate_id=slot.id,
        case_id=outcome.case_id, reason=outcome.reason,
    )


def _parse(enum: Any, value: str, what: str) -> Any:
    try:
        return enum(value)
    except ValueError:
        choices = ", ".join(member.value for member in enum)
        raise InvalidKindError(f"unknown {what} {value!r}; expected one of {choices}") from None


class Palimpsest(IngestCommands, ProposalCommands, ErasureCommands, RetentionCommands,
                 BaseApplication):
    # ---- remember: one entry point for every kind ---------------------------------------

    def remember(self, tenant_id: str, command: Remember) -> WriteResult:
        return self._execute(tenant_id, command, lambda now: self._decide_remember(tenant_id, command, now))

    def _decide_remember(self, tenant_id: str, command: Remember, now: datetime):  # type: ignore[no-untyped-def]
        kind, memory_type = parse_kind(command.kind, command.memory_type)
        command.parsed_perspective()
        decide = self._decide_state
        if kind is CardKind.EVENT:
            decide = self._decide_event
        elif kind is CardKind.KNOWLEDGE:
            decide = self._decide_knowledge
        elif memory_type is MemoryType.COMMITMENT:
            decide = self._decide_commitment
        elif memory_type is MemoryType.BLOCKER:
            decide = self._decide_blocker
        return decide(tenant_id, command, now)

    def _decide_state(self, tenant_id: str, command: Remember, now: datetime):  # type: ignore[no-untyped-def]
        if not command.subject or not command.label:
            raise InvalidKindError("a state card needs a subject and a label (its slot)")
        content = check_content(command.content, self.policy)
        declared = _parse(Cardinality, command.cardinality, "cardinality") \
            if command.cardinality else None
        slot = self._slot(tenant_id, command, declared, now)
        card = StateCard(
            card_id=self.new_id(tenant_id, command, "card"), value=content,
            memory_type=command.memory_type,
            valid_from=check_aware(command.valid_from or now, "valid_from"),
            valid_to=command.valid_to, recorded_at=now, provenance=command.provenance(),
            item_key=command.item_key or " ".join(content.split()).casefold(),
            perspective=command.parsed_perspective(),
            # kept when the slot's cardinality (the table's, or the first declaration's) overrules it
            declared_cardinality=declared.value
            if declared is not None and declared is not slot.cardinality else None,
            stated_at=check_not_future(command.stated_at, now, self.policy, "stated_at")
            if command.stated_at is not None else None,
        )
        new_case = self.new_id(tenant_id, command, "case")
        outcome = slot.write(card, now=now, policy=self.policy, case_id=new_case)
        return [slot, *self._cases(slot, outcome, new_case, now)], _result(outcome, slot)

    def _slot(self, tenant_id: str, command: Remember, declared: Cardinality | None,
              now: datetime) -> Slot:
        scope, label = command.parsed_scope(), normalise_label(command.label or "")
        subject = check_content(command.subject or "", self.policy, "subject")
        slot_id, slot = self.live_slot(tenant_id, scope, subject, label)
        if slot is not None:
            return slot
        decision = decide_cardinality(label, declared)
        return Slot._create(  # type: ignore[attr-defined]
            Slot.Opened, id=slot_id,  # type: ignore[attr-defined]
            tenant_id=tenant_id, scope=scope, subject=subject, label=label,
            cardinality=decision.cardinality.value,
            declared_cardinality=decision.declared.value if decision.declared else None,
            timestamp=now,
        )

    def live_slot(self, tenant_id: str, scope: Scope, subject: str, label: str
                  ) -> tuple[UUID, Slot | None]:
        """The slot a write to ``subject``/``label`` lands in: its id, and the slot unless it is
        new. A generation an erasure forgot is passed over (``Slot.create_id``); a generation
        stored under its legacy id is found under it (``keyed_ids.slot_generations``)."""
        for ids in slot_generations(self.keyring, tenant_id, scope, subject, label):
            slot = None
            for slot_id in ids:  # its keyed id, then its legacy one
                slot = self.find(tenant_id, slot_id, Slot)
                if slot is not None:
                    break
            if slot is None:
                return ids[0], None
            if not slot.forgotten:
                return slot_id, slot
        raise AssertionError("unreachable: the generations never end")

    def _cases(
        self, slot: Slot, outcome: WriteOutcome, new_case: UUID, now: datetime
    ) -> list[ArbitrationCase]:
        """The arbitration case a queued write opened (``new_case``) or joined."""
        if outcome.outcome is not Outcome.QUEUED or outcome.case_id is None:
            return []
        proposal = slot.pending[outcome.case_id][-1]
        if outcome.case_id != new_case:
            pending = self.load(slot.tenant_id, outcome.case_id, ArbitrationCase, "arbitration")
            pending.add_proposal(proposal.card, proposal.reason, now)
            return [pending]
        case = ArbitrationCase(
            case_id=outcome.case_id, tenant_id=slot.tenant_id, slot_id=slot.id, label=slot.label,
            subject=slot.subject,
            current=tuple(slot.valid_at(proposal.card.valid_from) or slot.current_cards),
            proposal=proposal.card, reason=proposal.reason, timestamp=now,
        )
        return [case]

    def _decide_event(self, tenant_id: str, command: Remember, now: datetime):  # type: ignore[no-untyped-def]
        occurred_at = check_occurred_at(command.occurred_at or now, now, self.policy)
        card = EventCard(
            tenant_id=tenant_id, scope=command.parsed_scope(),
            description=check_content(command.content, self.policy, "description"),
            occurred_at=occurred_at, tags=normalise_tags(command.tags, self.policy),
            provenance=command.provenance(), perspective=command.parsed_perspective(),
            timestamp=now,
        )
        for target in command.links:
            self._check_target(tenant_id, target)
            card.link(Edge.AFFECTS, target, now)
        return [card], WriteResult(outcome="recorded", card_id=card.id, aggregate_id=card.id)

    def _decide_knowledge(self, tenant_id: str, command: Remember, now: datetime):  # type: ignore[no-untyped-def]
        body = check_content(command.content, self.policy)
        title = check_content(command.title or body.splitlines()[0][:120], self.policy, "title")
        card = KnowledgeCard(
            tenant_id=tenant_id, scope=command.parsed_scope(), memory_type=command.memory_type,
            title=title, body=body, tags=normalise_tags(command.tags, self.policy),
            provenance=command.provenance(), timestamp=now,
        )
        for event_id in command.links:
            self.load(tenant_id, event_id, EventCard, "event card")
            card.link(Edge.EVIDENCED_BY, event_id, now)
        return [card], WriteResult(outcome="learned", card_id=card.id, aggregate_id=card.id)

    def _decide_commitment(self, tenant_id: str, command: Remember, now: datetime):  # type: ignore[no-untyped-def]
        if not command.owner:
            raise InvalidKindError("a commitment needs an owner")
        card = Commitment(
            tenant_id=tenant_id, scope=command.parsed_scope(),
            description=check_content(command.content, self.policy, "description"),
            owner=command.owner,
            due_at=check_aware(command.due_at, "due_at") if command.due_at else None,
            provenance=command.provenance(), timestamp=now,
        )
        return [card], WriteResult(outcome="open", card_id=card.id, aggregate_id=card.id)

    def _decide_blocker(self, tenant_id: str, command: Remember, now: datetime):  # type: ignore[no-untyped-def]
        card = Blocker(
            tenant_id=tenant_id, scope=command.parsed_scope(),
            description=check_content(command.content, self.policy, "description"),
            provenance=command.provenance(), timestamp=now,
        )
        return [card], WriteResult(outcome="active", card_id=card.id, aggregate_id=card.id)

    # ---- state cards --------------------------------------------------------------------

    def revise(self, tenant_id: str, slot_id: UUID, command: Revise) -> WriteResult:
        def decide(now: datetime):  # type: ignore[no-untyped-def]
            edge = _parse(Edge, command.edge, "edge")
            slot = self.load(tenant_id, slot_id, Slot, "slot")
            if slot.forgotten:  # its subject or label erased: a write by them opens a slot anew
                raise CardNotFoundError(f"slot {slot_id} was erased: remember the value anew")
            target = slot.card(command.card_id)
            if slot.cardinality is not Cardinality.SINGLE:  # an item is revised in place
                _not_erased(target.card_id, target.value)
            content = check_content(command.content, self.policy)
            card = StateCard(
                card_id=self.new_id(tenant_id, command, "card"), value=content,
                memory_type=target.memory_type,
                valid_from=check_aware(command.valid_from or now, "valid_from"),
                valid_to=command.valid_to, recorded_at=now, provenance=command.provenance(),
                item_key=" ".join(content.split()).casefold(), perspective=target.perspective,
            )
            new_case = self.new_id(tenant_id, command, "case")
            outcome = slot.write(card, now=now, policy=self.policy, target_id=target.card_id,
                                 edge=edge, case_id=new_case)
            return [slot, *self._cases(slot, outcome, new_case, now)], _result(outcome, slot)

        return self._execute(tenant_id, command, decide)

    def verify(self, tenant_id: str, aggregate_id: UUID, command: Verify) -> WriteResult:
        def decide(now: datetime):  # type: ignore[no-untyped-def]
            knowledge = self.find(tenant_id, aggregate_id, KnowledgeCard)
            if knowledge is not None:
                knowledge.verify(now)
                return [knowledge], WriteResult(outcome="verified", card_id=knowledge.id,
                                                aggregate_id=knowledge.id)
            slot = self.load(tenant_id, aggregate_id, Slot, "slot")
            return [slot], _result(slot.verify(command.card_id, now), slot)

        return self._execute(tenant_id, command, decide)

    def arbitrate(self, tenant_id: str, command: Arbitrate) -> WriteResult:
        def decide(now: datetime):  # type: ignore[no-untyped-def]
            decision = _parse(Decision, command.decision, "decision")
            try:
                case = self.load(tenant_id, command.case_id, ArbitrationCase, "arbitration")
            except CardNotFoundError:
                raise ArbitrationCaseNotFoundError(f"no arbitration {command.case_id}") from None
            slot = self.load(tenant_id, case.slot_id, Slot, "slot")
            case.decide(decision, command.decided_by, command.note, now, command.card_id)
            outcome = slot.settle(case.id, decision, now, command.card_id)
            return [case, slot], _result(outcome, slot)

        return self._execute(tenant_id, command, decide)

    # ---- event, knowledge, commitment, blocker cards ------------------------------------

    def correct(self, tenant_id: str, command: CorrectEvent) -> WriteResult:
        def decide(now: datetime):  # type: ignore[no-untyped-def]
            card = self.load(tenant_id, command.card_id, EventCard, "event card")
            _not_erased(card.id, card.description)
            card.correct(command.description, command.reason, command.provenance(), now,
                         self.policy, occurred_at=command.occurred_at)
            return [card], WriteResult(outcome="corrected", card_id=card.id, aggregate_id=card.id)

        return self._execute(tenant_id, command, decide)

    def rename(self, tenant_id: str, command: Rename) -> WriteResult:
        def decide(now: datetime):  # type: ignore[no-untyped-def]
            card = self.load(tenant_id, command.card_id, KnowledgeCard, "knowledge card")
            _not_erased(card.id, card.title)
            card.rename(check_content(command.title, self.policy, "title"), now)
            return [card], WriteResult(outcome="renamed", card_id=card.id, aggregate_id=card.id)

        return self._execute(tenant_id, command, decide)

    def merge(self, tenant_id: str, command: Merge) -> WriteResult:
        def decide(now: datetime):  # type: ignore[no-untyped-def]
            card = self.load(tenant_id, command.card_id, KnowledgeCard, "knowledge card")
            survivor = self.load(tenant_id, command.into, KnowledgeCard, "knowledge card")
            card.merge_into(survivor, now)
            return [card, survivor], WriteResult(outcome="merged", card_id=survivor.id,
                                                 aggregate_id=survivor.id)

        return self._execute(tenant_id, command, decide)

    def link(self, tenant_id: str, command: Link) -> WriteResult:
        def decide(now: datetime):  # type: ignore[no-untyped-def]
            edge = _parse(Edge, command.edge, "edge")
            card = self.find(tenant_id, command.card_id, KnowledgeCard) or self.load(
                tenant_id, command.card_id, EventCard)
            self._check_target(tenant_id, command.target_id)
            card.link(edge, command.target_id, now)
            return [card], WriteResult(outcome="linked", card_id=card.id, aggregate_id=card.id)

        return self._execute(tenant_id, command, decide)

    def _check_target(self, tenant_id: str, target_id: UUID) -> None:
        """A link's target is a card of the same tenant: an event, knowledge card or slot."""
        for cls in (EventCard, KnowledgeCard, Slot, Commitment, Blocker):
            if self.find(tenant_id, target_id, cls) is not None:
                return
        raise CardNotFoundError(f"no card {target_id}")

    def move(self, tenant_id: str, command: Move) -> WriteResult:
        def decide(now: datetime):  # type: ignore[no-untyped-def]
            if command.to == "archive":
                blocker = self.load(tenant_id, command.card_id, Blocker, "blocker")
                blocker.archive(command.note, now)
                return [blocker], WriteResult(outcome="archived", card_id=blocker.id,
                                              aggregate_id=blocker.id)
            card = self.load(tenant_id, command.card_id, Commitment, "commitment")
            moves = {"wait": lambda: card.wait(command.note, now),
                     "resolve": lambda: card.resolve(command.note, now),
                     "expire": lambda: card.expire(now)}
            if command.to not in moves:
                raise InvalidTransitionError(
                    f"unknown move {command.to!r}; expected wait, resolve, expire or archive"
                )
            moves[command.to]()
            return [card], WriteResult(outcome=card.status.value, card_id=card.id,
                                       aggregate_id=card.id)

        return self._execute(tenant_id, command, decide)


def _not_erased(card_id: UUID, text: str) -> None:
    """An erased card is never written again: its id stays a tombstone (write a new card)."""
    if is_erased(text):
        raise CardNotFoundError(f"card {card_id} was erased: write a new card instead")
