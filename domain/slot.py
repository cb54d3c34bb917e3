"""The slot aggregate: every state card of one ``(tenant, scope, subject, label)``.

The slot is the unit of cardinality and of consistency: a single-value slot holds at most one valid
card at any world time, and because every write to a slot is one event on one aggregate, two
writers racing on the same slot cannot both win.

A slot has at most one pending arbitration case: the first queued write opens it, every later
queued write joins it as one more proposal, and one decision settles them all (decision 0006).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from enum import Enum
from uuid import UUID

from eventsourcing.domain import event

from domain.base import TenantAggregate, derived_id, keyed_id
from domain.cards import StateCard, same_value
from domain.erased import is_erased
from domain.errors import (
    ArbitrationCaseNotFoundError,
    CardinalityError,
    CardNotFoundError,
    InvariantViolation,
    StaleCardError,
)
from domain.policy import Policy
from domain.rules.arbitration import (
    Decision,
    Layer,
    Verdict,
    accepted,
    is_same_turn,
    judge,
    recent_changes,
)
from domain.rules.timeline import Placement, Span, overlapping, overlaps, place
from domain.rules.validation import check_validity
from domain.values import Cardinality, Edge, Scope


class Outcome(str, Enum):
    REMEMBERED = "remembered"
    SUPERSEDED = "superseded"
    UPDATED = "updated"
    OVERWRITTEN = "overwritten"
    QUEUED = "queued"
    VERIFIED = "verified"
    KEPT_OLD = "kept_old"


@dataclass(frozen=True)
class WriteOutcome:
    outcome: Outcome
    card_id: UUID | None
    case_id: UUID | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Proposal:
    """A conflicting write waiting in the arbitration queue, one of its case's proposals."""

    card: StateCard
    reason: str
    target_id: UUID | None


#: (card id, its new valid_to) pairs: a list of pairs travels through JSON, a UUID-keyed dict does not.
Closures = tuple[tuple[UUID, datetime], ...]


def _span(card: StateCard) -> Span:
    return Span(card.card_id, card.valid_from, card.valid_to)


class Slot(TenantAggregate):
    @staticmethod
    def create_id(key: bytes | None, tenant_id: str, scope: Scope, subject: str, label: str,
                  generation: int = 0) -> UUID:
        """The slot of ``(tenant, scope, subject, label)``: a keyed hash under ``key``, a secret
        the tenant's data key derives (``services.command.keyed_ids``), so a reader of the log
        or of a dump cannot confirm a guessed subject and label against it, and a tenant's
        erasure takes the means of computing it. ``None`` (a store that seals nothing: its
        events hold subject and label in clear anyway) gives the unkeyed :meth:`legacy_id`.

        A slot whose subject and label were erased stays forgotten (its key is gone): the next
        write to the same subject and label opens the next ``generation``, a slot of its own,
        with nothing of the old one's history."""
        if key is None:
            return Slot.legacy_id(tenant_id, scope, subject, label, generation)
        return keyed_id(key, "slot", tenant_id, scope.key, subject, label,
                        *((generation,) if generation else ()))

    @staticmethod
    def legacy_id(tenant_id: str, scope: Scope, subject: str, label: str, generation: int = 0
                  ) -> UUID:
        """The unkeyed id slots had before ids were keyed (a UUIDv5 of the same parts): anyone
        can compute it. A store written then keeps its slots under it (the log is append-only);
        lookups fall back to it (``services.command.keyed_ids.slot_generations``)."""
        return derived_id("slot", tenant_id, scope.key, subject, label,
                          *((generation,) if generation else ()))

    @property
    def forgotten(self) -> bool:
        """Whether an erasure took the slot's subject or label (its key is destroyed)."""
        return is_erased(self.subject) or is_erased(self.label)

    @event("Opened")
    def __init__(
        self, tenant_id: str, scope: Scope, subject: str, label: str, cardinality: str,
        declared_cardinality: str | None, timestamp: datetime,
    ) -> None:
        self.tenant_id = tenant_id
        self.scope = scope
        self.subject = subject
        self.label = label
        self.cardinality = Cardinality(cardinality)
        self.declared_cardinality = declared_cardinality
        self.cards: dict[UUID, StateCard] = {}
        self.change_times: list[datetime] = []
        #: Pending arbitration cases, each with its proposals in the order they came. One per
        #: slot since decision 0006 (a log written before it may hold several).
        self.pending: dict[UUID, tuple[Proposal, ...]] = {}

    # ---- reading the slot -------------------------------------------------------------------

    @property
    def live_cards(self) -> list[StateCard]:
        return [card for card in self.cards.values() if card.live]

    @property
    def current_cards(self) -> list[StateCard]:
        return [card for card in self.cards.values() if card.current]

    def valid_at(self, moment: datetime) -> list[StateCard]:
        return [
            card for card in self.live_cards
            if card.valid_from <= moment and (card.valid_to is None or moment < card.valid_to)
        ]

    @property
    def open_case(self) -> UUID | None:
        """The pending case a queued write joins: the one opened last."""
        return next(reversed(self.pending), None)

    def card(self, card_id: UUID) -> StateCard:
        try:
            return self.cards[card_id]
        except KeyError:
            raise CardNotFoundError(f"card {card_id} is not in this slot") from None

    # ---- commands ---------------------------------------------------------------------------

    def write(
        self, card: StateCard, *, now: datetime, policy: Policy, case_id: UUID,
        target_id: UUID | None = None, edge: Edge = Edge.SUPERSEDES,
    ) -> WriteOutcome:
        """Remember ``card`` in this slot, or revise ``target_id`` with it along ``edge``.
        ``case_id``: the id of the arbitration case the write opens if it is queued and none is
        pending (a queued write joins the pending case)."""
        check_validity(card.valid_from, card.valid_to, now, policy)
        target = self._current_target(target_id) if target_id else None
        if self.cardinality is Cardinality.SINGLE:
            return self._write_single(card, target, edge, now, policy, case_id)
        return self._write_multi(card, target, edge, now, policy, case_id)

    def verify(self, card_id: UUID | None, now: datetime) -> WriteOutcome:
        if card_id is None:
            current = self.current_cards
            if len(current) != 1:
                raise CardNotFoundError(
                    f"slot {self.label!r} has {len(current)} current values; name the card to verify"
                )
            card_id = current[0].card_id
        card = self._current_target(card_id)
        self._verify(card_id=card.card_id, timestamp=now)
        return WriteOutcome(Outcome.VERIFIED, card.card_id)

    def settle(
        self, case_id: UUID, decision: Decision, now: datetime, card_id: UUID | None = None
    ) -> WriteOutcome:
        """Apply a person's decision on a pending case (the arbitration case decides too):
        ``keep_old`` rejects every proposal; ``accept_new`` applies the proposal ``card_id``, by
        default the latest (of each item, multi-value); ``both_valid`` gives every proposal its
        own stretch of world time (a separate item, multi-value)."""
        proposals = self.pending.get(case_id)
        if proposals is None:
            raise ArbitrationCaseNotFoundError(f"no pending arbitration {case_id} on this slot")
        cards = accepted(tuple(p.card for p in proposals), decision, card_id,
                         by_item=self.cardinality is Cardinality.MULTI)
        self._settle(case_id=case_id, decision=decision.value, timestamp=now)
        outcome = WriteOutcome(Outcome.KEPT_OLD, None, case_id)
        for card in cards:
            outcome = self._apply(replace(card, recorded_at=now), decision, now, case_id)
        return outcome

    def _apply(
        self, card: StateCard, decision: Decision, now: datetime, case_id: UUID
    ) -> WriteOutcome:
        if self.cardinality is Cardinality.MULTI:
            return self._settle_multi(card, decision, now, case_id)
        if decision is Decision.BOTH_VALID:
            later = [c.valid_from for c in self.live_cards if c.valid_from > card.valid_from]
            if later:
                card = replace(card, valid_to=min([*later, *filter(None, [card.valid_to])]))
        return self._fork(card, now, Layer.ARBITRATED, case_id, retract=())

    # ---- deciding ---------------------------------------------------------------------------

    def _write_single(
        self, card: StateCard, target: StateCard | None, edge: Edge, now: datetime,
        policy: Policy, case_id: UUID,
    ) -> WriteOutcome:
        if edge not in (Edge.SUPERSEDES, Edge.UPDATES):
            raise CardinalityError(
                f"slot {self.label!r} is single-value: revise it with 'supersedes' or 'updates', "
                f"not {edge.value!r}"
            )
        if target is not None:
            card = replace(card, edge=edge.value, edge_target=target.card_id)
        met = [c for c in self.live_cards if overlaps(_span(c), card.valid_from, card.valid_to)]
        if not met:
            self._remember(card=card, timestamp=now)
            return WriteOutcome(Outcome.REMEMBERED, card.card_id)
        if all(same_value(c.value, card.value) for c in met):
            holder = next((c for c in met if _contains(c, card)), None)
            if holder is not None:  # a re-statement of what the slot already says
                self._verify(card_id=holder.card_id, timestamp=now)
                return WriteOutcome(Outcome.VERIFIED, holder.card_id)
            return self._fork(card, now, Layer.AUTOMATIC, None, retract=())  # same value, longer
        latest = max(met, key=lambda c: c.recorded_at)
        verdict = self._judge(card, latest, now, policy)
        if verdict.layer is Layer.QUEUED:
            return self._queue(card, verdict, target, now, case_id)
        if verdict.layer is Layer.SAME_TURN:  # the correction replaces the slip wholesale
            card = replace(card, valid_from=min(card.valid_from, latest.valid_from))
            return self._fork(card, now, verdict.layer, None, retract=(latest.card_id,))
        return self._fork(card, now, verdict.layer, None, retract=())

    def _write_multi(
        self, card: StateCard, target: StateCard | None, edge: Edge, now: datetime,
        policy: Policy, case_id: UUID,
    ) -> WriteOutcome:
        if target is not None:
            card = replace(card, edge=edge.value, edge_target=target.card_id)
            if edge is Edge.UPDATES:
                card = replace(card, item_key=target.item_key)
        revising = target is not None and edge in (Edge.UPDATES, Edge.SUPERSEDES)
        existing = target if revising else self._item(card.item_key)
        if existing is None:
            self._remember(card=card, timestamp=now)
            return WriteOutcome(Outcome.REMEMBERED, card.card_id)
        if same_value(existing.value, card.value):
            return self.verify(existing.card_id, now)
        verdict = self._judge(card, existing, now, policy)
        if verdict.layer is Layer.QUEUED:
            return self._queue(card, verdict, existing, now, case_id)
        if target is not None and edge is Edge.SUPERSEDES:
            return self._fork(card, now, verdict.layer, None, retract=())
        self._revise_item(
            card_id=existing.card_id, value=card.value, previous_value=existing.value,
            provenance=card.provenance, layer=verdict.layer.value, case_id=None, timestamp=now,
        )
        return WriteOutcome(Outcome.UPDATED, existing.card_id, reason=verdict.reason)

    def _settle_multi(
        self, card: StateCard, decision: Decision, now: datetime, case_id: UUID
    ) -> WriteOutcome:
        existing = self._item(card.item_key)
        if decision is Decision.BOTH_VALID or existing is None:
            if existing is not None:
                card = replace(card, item_key=f"{card.item_key}#{card.card_id.hex[:8]}")
            self._remember(card=card, timestamp=now)
            return WriteOutcome(Outcome.REMEMBERED, card.card_id, case_id)
        self._revise_item(
            card_id=existing.card_id, value=card.value, previous_value=existing.value,
            provenance=card.provenance, layer=Layer.ARBITRATED.value, case_id=case_id,
            timestamp=now,
        )
        return WriteOutcome(Outcome.UPDATED, existing.card_id, case_id)

    def _judge(
        self, card: StateCard, latest: StateCard, now: datetime, policy: Policy
    ) -> Verdict:
        same_turn = is_same_turn(latest.provenance, latest.recorded_at, card.provenance, now, policy)
        stated = card.stated_at or now  # a backfilled statement is judged when it was made
        changes = recent_changes(self.change_times, stated, policy)
        return judge(
            same_turn=same_turn, changes=changes, valid_from=card.valid_from, now=stated,
            policy=policy,
        )

    def _queue(
        self, card: StateCard, verdict: Verdict, target: StateCard | None, now: datetime,
        case_id: UUID,
    ) -> WriteOutcome:
        target_id = target.card_id if target else None
        pending = self.open_case
        if pending is not None:  # one case per slot: the write joins it
            self._add_proposal(case_id=pending, card=card, reason=verdict.reason,
                               target_id=target_id, timestamp=now)
            return WriteOutcome(Outcome.QUEUED, card.card_id, pending, verdict.reason)
        self._contest(
            case_id=case_id, card=card, reason=verdict.reason, target_id=target_id, timestamp=now
        )
        return WriteOutcome(Outcome.QUEUED, card.card_id, case_id, verdict.reason)

    def _fork(
        self, card: StateCard, now: datetime, layer: Layer, case_id: UUID | None,
        retract: tuple[UUID, ...],
    ) -> WriteOutcome:
        spans = [_span(c) for c in self.live_cards if c.card_id not in retract]
        if self.cardinality is Cardinality.MULTI and card.edge_target is not None:
            spans = [s for s in spans if s.card_id == card.edge_target]
        placement = place(spans, card.valid_from, card.valid_to)
        replaced = (*retract, *placement.touched)
        if card.edge_target is None and replaced:
            card = replace(card, edge=Edge.SUPERSEDES.value, edge_target=replaced[0])
        if not placement.touched and not retract:
            self._remember(card=card, timestamp=now)
            return WriteOutcome(Outcome.REMEMBERED, card.card_id, case_id)
        continued = self._continuations(card, placement, now)
        fork = self._overwrite if layer is Layer.SAME_TURN else self._supersede
        fork(
            card=card, closed=tuple(placement.closed.items()), retracted=(*retract, *placement.retracted),
            continued=continued, layer=layer.value, case_id=case_id, timestamp=now,
        )
        outcome = Outcome.OVERWRITTEN if layer is Layer.SAME_TURN else Outcome.SUPERSEDED
        return WriteOutcome(outcome, card.card_id, case_id)

    def _continuations(
        self, card: StateCard, placement: Placement, now: datetime
    ) -> tuple[StateCard, ...]:
        return tuple(
            replace(
                self.cards[part.source_id],
                card_id=derived_id("continuation", card.card_id, part.source_id),
                valid_from=part.valid_from, valid_to=part.valid_to, recorded_at=now,
                verified_at=None, edge=Edge.DERIVES.value, edge_target=part.source_id,
            )
            for part in placement.continued
        )

    def _current_target(self, card_id: UUID) -> StateCard:
        card = self.card(card_id)
        if not card.current:
            raise StaleCardError(
                f"card {card_id} is no longer current in slot {self.label!r}; reload and decide again"
            )
        return card

    def _item(self, item_key: str | None) -> StateCard | None:
        if is_erased(item_key):  # an erased key names no item
            return None
        return next((c for c in self.current_cards
                     if c.item_key == item_key and not is_erased(c.item_key)), None)

    # ---- events: deterministic appliers -----------------------------------------------------

    @event("Remembered")
    def _remember(self, card: StateCard, timestamp: datetime) -> None:
        self.cards[card.card_id] = card
        self._check_invariant()

    @event("Superseded")
    def _supersede(
        self, card: StateCard, closed: Closures, retracted: tuple[UUID, ...],
        continued: tuple[StateCard, ...], layer: str, case_id: UUID | None, timestamp: datetime,
    ) -> None:
        self._apply_fork(card, closed, retracted, continued, timestamp)
        self.change_times.append(card.stated_at or timestamp)

    @event("Overwritten")
    def _overwrite(
        self, card: StateCard, closed: Closures, retracted: tuple[UUID, ...],
        continued: tuple[StateCard, ...], layer: str, case_id: UUID | None, timestamp: datetime,
    ) -> None:
        self._apply_fork(card, closed, retracted, continued, timestamp)

    @event("ItemRevised")
    def _revise_item(
        self, card_id: UUID, value: str, previous_value: str, provenance: object, layer: str,
        case_id: UUID | None, timestamp: datetime,
    ) -> None:
        self.cards[card_id] = self.cards[card_id].revalued(value, provenance)  # type: ignore[arg-type]
        self.change_times.append(timestamp)

    @event("Contested")
    def _contest(
        self, case_id: UUID, card: StateCard, reason: str, target_id: UUID | None,
        timestamp: datetime,
    ) -> None:
        self.pending[case_id] = (Proposal(card, reason, target_id),)

    @event("ProposalAdded")
    def _add_proposal(
        self, case_id: UUID, card: StateCard, reason: str, target_id: UUID | None,
        timestamp: datetime,
    ) -> None:
        self.pending[case_id] = (*self.pending[case_id], Proposal(card, reason, target_id))

    @event("Settled")
    def _settle(self, case_id: UUID, decision: str, timestamp: datetime) -> None:
        del self.pending[case_id]

    @event("Verified")
    def _verify(self, card_id: UUID, timestamp: datetime) -> None:
        self.cards[card_id] = self.cards[card_id].verified(timestamp)

    def _apply_fork(
        self, card: StateCard, closed: Closures, retracted: tuple[UUID, ...],
        continued: tuple[StateCard, ...], timestamp: datetime,
    ) -> None:
        for card_id, valid_to in closed:
            self.cards[card_id] = self.cards[card_id].closed_at(valid_to)
        for card_id in retracted:
            self.cards[card_id] = self.cards[card_id].retracted(timestamp)
        for new_card in (card, *continued):
            self.cards[new_card.card_id] = new_card
        self._check_invariant()

    def _check_invariant(self) -> None:
        if self.cardinality is not Cardinality.SINGLE:
            return
        clash = overlapping(_span(c) for c in self.live_cards)
        if clash is not None:
            raise InvariantViolation(
                f"slot {self.label!r} would hold two values at once: cards {clash[0].card_id} "
                f"and {clash[1].card_id}"
            )


def _contains(existing: StateCard, card: StateCard) -> bool:
    """``existing`` already covers all the world time ``card`` claims."""
    if card.valid_from < existing.valid_from:
        return False
    if existing.valid_to is None:
        return True
    return card.valid_to is not None and card.valid_to <= existing.valid_to
