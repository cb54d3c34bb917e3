"""Personal fields sealed inside stored events, each under the data key of its erasure unit.

The log is append-only, so forgetting cannot edit it (DESIGN §7, decisions 0001 and 0012): the
personal fields of every event — values, labels, subjects, descriptions, titles, bodies, tags,
owners, reasons, notes, a turn's text, what extraction made of it — are encrypted before the event
is stored (AES-GCM), each under the key of the unit that erases it (:mod:`infra.keyring`); a
turn's key names its speaker and a card written from a turn names the turn (:func:`said_in`) and
its speaker, so a person's erasure reaches every turn they spoke and what was made of it. The
structure stays clear: ids, tenant, versions, times, kinds, edges, layers and decisions replay
every rule on their own, and the relay, the broker and the projector's parking read a stored
event's tenant and time without a key.

:class:`SealingMapper` is eventsourcing's mapper with one step more each way. On the way in, a
field named in :data:`PLAN` becomes ``{"_sealed_": "<key id>:<nonce and ciphertext, base64>"}``
(its transcoded JSON, bound to its tenant, key and field name); a state card's personal fields are
sealed inside it, under the card's own key. On the way out, a sealed field opens with its key; a
destroyed key reads as :data:`domain.erased.ERASED` (an empty list for tags and candidates), so a
replay after an erasure rebuilds tombstones, not text. A field already erased is stored as
``{"_sealed_": null}``: nothing to seal, nothing to open.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from functools import lru_cache, partial
from typing import Any
from uuid import UUID

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import EventStore, Mapper, Notification, Recording, StoredEvent, Transcoder
from eventsourcing.postgres import (
    PostgresAggregateRecorder,
    PostgresApplicationRecorder,
    PostgresDatastore,
)
from eventsourcing.utils import get_topic

from domain.cards import StateCard
from domain.erased import ERASED, is_erased
from domain.ingestion import UNNAMED_SPEAKER, Ingestion
from infra.keyring import KeyRing, Unit, erased_refusal, insert_made_keys, tenant_unit
from infra.tenancy import tenant_datastore
from infra.tenant_runs import insert_runs, put_runs

SEALED = "_sealed_"
#: The first byte of a sealed plaintext: a text as UTF-8, or anything else as JSON.
_TEXT, _JSON = b"s", b"j"
#: The fields that read as empty, not as the erased text, once forgotten.
_EMPTY_WHEN_ERASED = frozenset({"tags", "candidates", "rejected"})
#: A state card's personal fields, sealed under the card's key wherever the card travels.
CARD_FIELDS = ("value", "item_key", "perspective")

State = Mapping[str, Any]
#: The unit whose key seals some fields of an event: from the event's state and originator id.
UnitOf = Callable[[State, UUID], Unit]


@dataclass(frozen=True)
class Fields:
    """Fields of an event sealed under one unit's key, and the fields holding state cards."""

    names: tuple[str, ...] = ()
    unit: UnitOf | None = None
    #: Whether the event creates its unit (no key of it can exist yet: none is looked for).
    new: bool = False
    #: Fields holding a state card or a tuple of them (of them, those holding a card the event
    #: creates); the slot they are of, by the event.
    cards: tuple[str, ...] = ()
    new_cards: tuple[str, ...] = ()
    slot_of: Callable[[State, UUID], UUID | None] = lambda state, originator: originator
    #: Whose key (by default the event's ``tenant_id``).
    tenant_of: Callable[[State], str] = lambda state: str(state["tenant_id"])


def _card(state: State, originator: UUID) -> Unit:
    provenance = state.get("provenance")
    return Unit("card", originator, session=_session(provenance),
                cards=said_in(str(state["tenant_id"]), provenance))


def _session(provenance: Any) -> str | None:
    return getattr(provenance, "session_id", None) if provenance is not None else None


def said_in(tenant_id: str, provenance: Any) -> tuple[UUID, ...]:
    """The ingested turn a card was written from, by its provenance's session and turn: the id of
    that turn's ``Ingestion``, which the card's key names among its ``cards`` — so the erasure of
    the turn's speaker, which finds the turn's key, finds the card's too (the turn's own event
    card, and every card extraction wrote from it), while a card's erasure reaches no card made
    from it. The key table copies the turn's speaker onto the card's key as it stores it
    (``said_by``): the speaker's erasure still finds the card once the turn's key is destroyed
    (retention erasing the turn's event card keeps the cards made of it)."""
    session = _session(provenance)
    turn = getattr(provenance, "turn_id", None) if provenance is not None else None
    return (Ingestion.create_id(tenant_id, session, turn),) if session and turn else ()


def _slot(state: State, originator: UUID) -> Unit:
    return Unit("slot", originator, slot_id=originator, subject=state.get("subject"))


def _case_slot(state: State, originator: UUID) -> Unit:
    return Unit("slot", state["slot_id"], slot_id=state["slot_id"], subject=state.get("subject"))


def _tenant(state: State, originator: UUID) -> Unit:
    return Unit("tenant", tenant_unit(str(state["tenant_id"])))


def _turn(state: State, originator: UUID) -> Unit:
    """A turn's key: its session, its event card, and — from ``Received``, the one event that
    names it — its speaker as the subject (a turn without one is :data:`UNNAMED_SPEAKER`'s)."""
    card = state.get("event_card_id")
    speaker = (state["speaker"] or UNNAMED_SPEAKER) if "speaker" in state else None
    return Unit("turn", originator, session=state.get("session_id"), subject=speaker,
                cards=(card,) if card is not None else ())


def _decision(state: State, originator: UUID) -> Unit:
    """A decision's note is the slot's text (a slot's or its subject's erasure forgets it); one
    decided before the event named its slot stays under its case's key."""
    slot_id = state.get("slot_id")
    return Unit("slot", slot_id, slot_id=slot_id) if slot_id is not None else Unit("case", originator)


#: What is sealed, by event topic. An event not named here holds no personal text.
PLAN: dict[str, Fields] = {
    "domain.slot:Slot.Opened": Fields(("subject", "label"), _slot, new=True),
    "domain.slot:Slot.Remembered": Fields(cards=("card",), new_cards=("card",)),
    "domain.slot:Slot.Superseded": Fields(cards=("card", "continued"), new_cards=("card",)),
    "domain.slot:Slot.Overwritten": Fields(cards=("card", "continued"), new_cards=("card",)),
    "domain.slot:Slot.Contested": Fields(cards=("card",), new_cards=("card",)),
    "domain.slot:Slot.ProposalAdded": Fields(cards=("card",), new_cards=("card",)),
    "domain.slot:Slot.ItemRevised": Fields(
        ("value", "previous_value"), lambda s, o: Unit("card", s["card_id"], slot_id=o)),
    "domain.arbitration:ArbitrationCase.Opened": Fields(
        ("label", "subject"), _case_slot, cards=("current", "proposal"),
        slot_of=lambda s, o: s["slot_id"]),
    "domain.arbitration:ArbitrationCase.ProposalAdded": Fields(
        cards=("proposal",), slot_of=lambda s, o: None),
    "domain.arbitration:ArbitrationCase.Decided": Fields(("note",), _decision),
    "domain.event_card:EventCard.Recorded": Fields(("description", "tags", "perspective"), _card,
                                                   new=True),
    "domain.event_card:EventCard.Corrected": Fields(
        ("description", "previous_description", "reason", "tags"), _card),
    "domain.knowledge:KnowledgeCard.Created": Fields(("title", "body", "tags"), _card, new=True),
    "domain.knowledge:KnowledgeCard.Renamed": Fields(("title", "previous_title", "body", "tags"), _card),
    "domain.knowledge:KnowledgeCard.Absorbed": Fields(("tags",), _card),
    "domain.commitment:Commitment.Opened": Fields(
        ("description", "owner"), lambda s, o: replace(_card(s, o), subject=s.get("owner")),
        new=True),
    "domain.commitment:Commitment.Waiting": Fields(("reason",), _card),
    "domain.commitment:Commitment.Resolved": Fields(("resolution",), _card),
    "domain.commitment:Blocker.Raised": Fields(("description",), _card, new=True),
    "domain.commitment:Blocker.Archived": Fields(("note",), _card),
    "domain.proposal:Proposal.Proposed": Fields(
        ("rationale",), lambda s, o: Unit("proposal", o, cards=(s["src_id"], s["dst_id"])), new=True),
    "domain.proposal:Proposal.Accepted": Fields(("note",), lambda s, o: Unit("proposal", o)),
    "domain.proposal:Proposal.Rejected": Fields(("note",), lambda s, o: Unit("proposal", o)),
    "domain.ingestion:Ingestion.Received": Fields(("text", "speaker"), _turn, new=True),
    "domain.ingestion:Ingestion.Extracted": Fields(("candidates", "rejected"), _turn),
    "domain.ingestion:Ingestion.DeadLettered": Fields(("error",), _turn),
    "domain.receipt:Receipt.Issued": Fields(("fingerprint",), _tenant),
    "domain.erasure:Erasure.Erased": Fields(("reason",), _tenant),
    "projections.decisions:ProjectionDecisions.Skipped": Fields(
        ("error", "reason"), lambda s, o: Unit("tenant", tenant_unit(str(s["event_tenant"]))),
        tenant_of=lambda s: str(s["event_tenant"])),
}


class SealingMapper(Mapper[UUID]):
    """eventsourcing's mapper that seals the personal fields of :data:`PLAN` with ``ring``."""

    def __init__(self, transcoder: Transcoder, ring: KeyRing) -> None:
        super().__init__(transcoder=transcoder)
        self.ring = ring

    def to_stored_event(self, domain_event: DomainEventProtocol[UUID]) -> StoredEvent:
        fields = PLAN.get(get_topic(type(domain_event)))
        if fields is None:
            return super().to_stored_event(domain_event)
        state = dict(vars(domain_event))
        sealed = _Seal(self, fields.tenant_of(state))
        originator = state["originator_id"]
        if fields.names:
            assert fields.unit is not None
            unit = fields.unit(state, originator)
            for name in fields.names:
                if state.get(name) is not None:
                    state[name] = sealed.field(unit, name, state[name], fields.new)
        slot_id = fields.slot_of(state, originator)
        for name in fields.cards:
            state[name] = _each_card(state.get(name), partial(sealed.card, slot_id=slot_id,
                                                              new=name in fields.new_cards))
        copy = object.__new__(type(domain_event))
        object.__setattr__(copy, "__dict__", state)
        return super().to_stored_event(copy)

    def to_domain_event(self, stored_event: StoredEvent) -> DomainEventProtocol[UUID]:
        domain_event = super().to_domain_event(stored_event)
        fields = PLAN.get(stored_event.topic)
        if fields is None:
            return domain_event
        state = vars(domain_event)
        opened = _Open(self, fields.tenant_of(state))
        for name in fields.names:
            if isinstance(state.get(name), dict) and SEALED in state[name]:
                state[name] = opened.field(name, state[name])
        for name in fields.cards:
            state[name] = _each_card(state.get(name), opened.card)
        return domain_event


def _each_card(held: Any, change: Callable[[StateCard], StateCard]) -> Any:
    if isinstance(held, StateCard):
        return change(held)
    if isinstance(held, tuple | list):
        return tuple(change(card) if isinstance(card, StateCard) else card for card in held)
    return held


class _Seal:
    """Sealing the fields of one event, of one tenant."""

    def __init__(self, mapper: SealingMapper, tenant_id: str) -> None:
        self.mapper = mapper
        self.tenant_id = tenant_id

    def field(self, unit: Unit, name: str, value: Any, new: bool = False) -> dict[str, str | None]:
        if is_erased(value):
            return {SEALED: None}
        key_id, key = self.mapper.ring.data_key(self.tenant_id, unit, new=new)
        nonce = os.urandom(12)
        # a text as itself (most fields are one); anything else as the event's own JSON
        plain = _TEXT + value.encode() if type(value) is str else _JSON + self.mapper.transcoder.encode(value)
        key_text = str(key_id)
        sealed = AESGCM(key).encrypt(nonce, plain, _bound(self.tenant_id, key_text, name))
        return {SEALED: f"{key_text}:{base64.b64encode(nonce + sealed).decode('ascii')}"}

    def card(self, card: StateCard, *, slot_id: UUID | None, new: bool) -> StateCard:
        unit = Unit("card", card.card_id, slot_id=slot_id, session=card.provenance.session_id,
                    cards=said_in(self.tenant_id, card.provenance))
        changes: dict[str, Any] = {name: self.field(unit, name, getattr(card, name), new)
                                   for name in CARD_FIELDS if getattr(card, name) is not None}
        return replace(card, **changes)


class _Open:
    """Opening the sealed fields of one event, of one tenant."""

    def __init__(self, mapper: SealingMapper, tenant_id: str) -> None:
        self.mapper = mapper
        self.tenant_id = tenant_id

    def field(self, name: str, sealed: Mapping[str, str | None]) -> Any:
        envelope = sealed[SEALED]
        if envelope is None:
            return _erased(name)
        key_text, _, payload = envelope.partition(":")
        key = self.mapper.ring.open_key(self.tenant_id, _key_id(key_text))
        if key is None:
            return _erased(name)
        raw = base64.b64decode(payload)
        plain = AESGCM(key).decrypt(raw[:12], raw[12:], _bound(self.tenant_id, key_text, name))
        if plain[:1] == _TEXT:
            return plain[1:].decode()
        return self.mapper.transcoder.decode(plain[1:])  # as an unsealed event decodes it

    def card(self, card: StateCard) -> StateCard:
        changes = {name: self.field(name, value) for name in CARD_FIELDS
                   if isinstance(value := getattr(card, name), dict) and SEALED in value}
        return replace(card, **changes) if changes else card


def _erased(name: str) -> Any:
    return [] if name in _EMPTY_WHEN_ERASED else ERASED


def _bound(tenant_id: str, key_text: str, name: str) -> bytes:
    """The associated data a sealed field is bound to: a ciphertext moved to another tenant,
    key or field does not open."""
    return f"{tenant_id}\x1f{key_text}\x1f{name}".encode()


@lru_cache(maxsize=65_536)
def _key_id(key_text: str) -> UUID:
    return UUID(key_text)


class SealedPostgresRecorder(PostgresApplicationRecorder):
    """eventsourcing's PostgreSQL recorder that adds the keys a batch's events are sealed with
    in the transaction that inserts the events: one round trip fewer, and no key without its
    events nor events without their key. Its connections carry the request's tenant
    (:func:`infra.tenancy.tenant_datastore`): row-level security sees to the rest."""

    def __init__(self, datastore: PostgresDatastore, **kwargs: Any) -> None:
        super().__init__(tenant_datastore(datastore), **kwargs)

    def _insert_events(self, curs: Any, stored_events: Sequence[StoredEvent], **kwargs: Any) -> None:
        super()._insert_events(curs, stored_events, **kwargs)
        if kwargs.get("tenant_runs") is not None:
            return  # each run's keys, after its tenant is set (infra.tenant_runs)
        insert_made_keys(curs, self.datastore.schema, kwargs.get("made_keys") or (),
                         kwargs.get("used_keys") or ())

    def _insert_stored_events(self, curs: Any, stored_events: Sequence[StoredEvent], **kwargs: Any,
                              ) -> None:
        runs = kwargs.get("tenant_runs")
        if runs is None:
            super()._insert_stored_events(curs, stored_events, **kwargs)
            return
        self._lock_table(curs)
        self._notify_channel(curs)
        insert_runs(curs, self.datastore.schema, stored_events, runs,
                    partial(PostgresAggregateRecorder._insert_stored_events, self))

    def _fetch_ids_after_insert_events(self, curs: Any, stored_events: Sequence[StoredEvent],
                                       **kwargs: Any) -> Sequence[int] | None:
        runs = kwargs.get("tenant_runs")
        if runs is not None:
            return runs.ids()
        return super()._fetch_ids_after_insert_events(curs, stored_events, **kwargs)


class SealedEventStore(EventStore[UUID]):
    """eventsourcing's event store that stores the keys its mapper made before the events sealed
    with them (:meth:`KeyRing.flush`): a key is durable before anything needs it."""

    def put(self, domain_events: Sequence[DomainEventProtocol[UUID]], **kwargs: Any,
            ) -> list[Recording[UUID]]:
        mapper = self.mapper
        ring = mapper.ring if isinstance(mapper, SealingMapper) else None
        tenants = kwargs.pop("tenant_runs", None)  # a batch of several tenants' requests
        if tenants is not None and ring is not None and isinstance(self.recorder, SealedPostgresRecorder):
            return put_runs(self, ring, domain_events, tenants, **kwargs)
        with ring.sealing() if ring is not None else nullcontext(set()) as used:  # keys still live?
            stored_events = [self.mapper.to_stored_event(event) for event in domain_events]
        if ring is not None and isinstance(self.recorder, SealedPostgresRecorder):
            made = ring.take_made(made_for(domain_events))  # stored in the events' own transaction
            try:
                notification_ids = self.recorder.insert_events(stored_events, made_keys=made,
                                                               used_keys=used, **kwargs)
            except BaseException as error:
                refused = erased_refusal(error)  # a key of an erased unit: refused, dropped
                ring.restore_made(made, refused)
                if refused is not None:
                    raise refused from error
                raise
        else:
            if ring is not None:
                ring.flush()
                ring.check_live(used)
            notification_ids = self.recorder.insert_events(stored_events, **kwargs)
        if not notification_ids:
            return []
        assert len(notification_ids) == len(stored_events)
        return [Recording(event, Notification(id=n_id, originator_id=stored.originator_id,
                                              originator_version=stored.originator_version,
                                              topic=stored.topic, state=stored.state))
                for event, stored, n_id in zip(domain_events, stored_events, notification_ids,
                                               strict=True)]


def made_for(domain_events: Sequence[DomainEventProtocol[UUID]]) -> set[str]:
    """The tenants whose keys sealing ``domain_events`` may have made: their keys, and no other
    tenant's, are stored in the events' transaction (it writes those tenants' rows only)."""
    found = set()
    for event in domain_events:
        fields = PLAN.get(get_topic(type(event)))
        if fields is not None:
            found.add(fields.tenant_of(vars(event)))
    return found


def sealing_mapper(transcoder: Transcoder, ring: KeyRing | None) -> SealingMapper | None:
    """The sealing mapper with ``ring``; None without one."""
    return SealingMapper(transcoder, ring) if ring is not None else None
