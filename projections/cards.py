"""The cards projection: every domain event → the operations that keep the read models true.

A pure function of the event (no clock, no database): the same event always gives the same
operations, whether it arrives through Kafka or a replay of the log. Events it has nothing to say
about (receipts, a slot's Contested / ProposalAdded / Settled bookkeeping) give no operations and
still advance tracking.

Erasure (DESIGN §7, decision 0012). A text whose key was destroyed decodes as
:data:`domain.erased.ERASED` (tags as ``()``): it is written as NULL (empty for what is made from
it), and a card or slot that holds such a text is marked ``erased_at`` the event's time. An
``Erasure.Erased`` event gives :class:`~projections.ops.Forget`, which tombstones what it names —
rows and versions, setting ``erased_at`` to the erasure's time — so a read model projected before
the erasure and one rebuilt after it end equal.
"""

from __future__ import annotations

import re
from dataclasses import replace
from functools import singledispatch
from typing import Any

from domain.arbitration import ArbitrationCase
from domain.cards import StateCard
from domain.commitment import Blocker, Commitment
from domain.erased import is_erased
from domain.erasure import Erasure, ErasureUnit
from domain.event_card import EventCard
from domain.knowledge import KnowledgeCard
from domain.slot import Slot
from domain.values import CardKind, Provenance, Scope
from projections.ops import (
    AddProposal,
    ChangeCard,
    DecideCase,
    Forget,
    Op,
    PutCard,
    PutCase,
    PutEdge,
    PutErasure,
    PutNode,
    PutSlot,
)
from projections.text import cjk_bigrams, fold, slot_words, tag_terms, terms

NAME = "cards"
#: An erasure's event (made by eventsourcing's ``@event``, so unknown to the type checker).
ERASED: Any = Erasure.Erased  # type: ignore[attr-defined]


def plain(text: Any) -> Any:
    """A personal text as the read models store it: an erased one as NULL."""
    return None if is_erased(text) else text


def erased_at(event: Any, *texts: Any) -> dict[str, Any]:
    """``erased_at`` the event's time when one of its texts reads as erased; nothing otherwise."""
    return {"erased_at": event.timestamp} if any(map(is_erased, texts)) else {}


def _text_columns(content: str | None, *extra: str | None, tags: tuple[str, ...] = ()
                  ) -> dict[str, Any]:
    """What the tags and fuzzy routes match: terms (jieba / words + tags), CJK bigrams, folded text;
    nothing of an erased text."""
    text = " ".join(part for part in (*extra, content) if part and not is_erased(part))
    return {
        "tags": list(tags),
        "terms": list(dict.fromkeys((*tag_terms(tags), *terms(text)))),
        "bigrams": list(cjk_bigrams(text)),
        "fuzzy_text": fold(text),
    }


def _provenance(provenance: Provenance) -> dict[str, Any]:
    return {
        "source": provenance.source.value,
        "inference_confidence": provenance.inference_confidence,
        "agent_id": provenance.agent_id,
        "session_id": provenance.session_id,
        "turn_id": provenance.turn_id,
    }


def _scope(scope: Scope) -> dict[str, Any]:
    return {"scope": scope.kind.value, "project_id": scope.project_id, "group_id": scope.group_id}


def _state_card(event: Any, card: StateCard) -> list[Op]:
    tenant_id, slot_id = event.tenant_id, event.originator_id
    row = {
        "tenant_id": tenant_id, "card_id": card.card_id, "aggregate_id": slot_id,
        "kind": CardKind.STATE.value, "memory_type": card.memory_type,
        "perspective": plain(card.perspective), "item_key": plain(card.item_key),
        "content": plain(card.value), "valid_from": card.valid_from, "valid_to": card.valid_to,
        "recorded_at": card.recorded_at, "updated_at": card.recorded_at,
        "retracted_at": card.retracted_at, "verified_at": card.verified_at,
        **_provenance(card.provenance), **_text_columns(card.value),
        **erased_at(event, card.value),
    }
    ops: list[Op] = [PutNode(tenant_id, card.card_id, "card"), PutCard(row, slot_id=slot_id)]
    if card.edge and card.edge_target:
        ops.append(PutEdge(tenant_id, card.card_id, card.edge_target, card.edge, card.recorded_at))
    return ops


@singledispatch
def project(event: object) -> list[Op]:
    return []


@project.register(Slot.Opened)  # type: ignore[attr-defined]
def _(event: Any) -> list[Op]:
    return [
        PutNode(event.tenant_id, event.originator_id, "slot"),
        PutSlot({
            "tenant_id": event.tenant_id, "slot_id": event.originator_id, **_scope(event.scope),
            "subject": plain(event.subject), "label": plain(event.label),
            "cardinality": event.cardinality,
            "slot_words": list(slot_words(plain(event.subject), plain(event.label))),
            **erased_at(event, event.subject, event.label),
        }),
    ]


@project.register(Slot.Remembered)  # type: ignore[attr-defined]
def _(event: Any) -> list[Op]:
    return _state_card(event, event.card)


def _fork(event: Any) -> list[Op]:
    tenant, at = event.tenant_id, event.timestamp
    ops: list[Op] = []
    for card_id, valid_to in event.closed:
        ops.append(ChangeCard(tenant, card_id, at, {"valid_to": valid_to}))
    for card_id in event.retracted:
        ops.append(ChangeCard(tenant, card_id, at, {"retracted_at": at}))
    for card in (event.card, *event.continued):
        ops.extend(_state_card(event, card))
    return ops


project.register(Slot.Superseded, _fork)  # type: ignore[attr-defined]
project.register(Slot.Overwritten, _fork)  # type: ignore[attr-defined]


def _new_content(event: Any, text: str, tags: tuple[str, ...] = ()) -> dict[str, Any]:
    """A card's content changed: the content and what is matched on it."""
    return {"content": plain(text), **_text_columns(text, tags=tags), **erased_at(event, text)}


@project.register(Slot.ItemRevised)  # type: ignore[attr-defined]
def _(event: Any) -> list[Op]:
    return [ChangeCard(event.tenant_id, event.card_id, event.timestamp,
                       _new_content(event, event.value))]


@project.register(Slot.Verified)  # type: ignore[attr-defined]
def _(event: Any) -> list[Op]:
    return [ChangeCard(event.tenant_id, event.card_id, event.timestamp,
                       {"verified_at": event.timestamp})]


@project.register(ArbitrationCase.Opened)  # type: ignore[attr-defined]
def _(event: Any) -> list[Op]:
    proposal: StateCard = event.proposal
    return [PutCase({
        "tenant_id": event.tenant_id, "case_id": event.originator_id, "slot_id": event.slot_id,
        "subject": plain(event.subject), "label": plain(event.label),
        "current_values": [plain(card.value) for card in event.current],
        "current_card_ids": [card.card_id for card in event.current],
        "proposed_value": plain(proposal.value), "proposed_card_id": proposal.card_id,
        "proposed_valid_from": proposal.valid_from, "reason": event.reason,
        "opened_at": event.timestamp, **proposed_by(proposal),
    })]


@project.register(ArbitrationCase.ProposalAdded)  # type: ignore[attr-defined]
def _(event: Any) -> list[Op]:
    """One row per case: it shows the latest proposal (the one accept_new takes by default)."""
    proposal: StateCard = event.proposal
    return [AddProposal(event.tenant_id, event.originator_id, plain(proposal.value),
                        proposal.card_id, proposal.valid_from, event.reason, proposed_by(proposal))]


def proposed_by(proposal: StateCard) -> dict[str, Any]:
    """A case's ``PROPOSED_PROVENANCE`` columns: who wrote the proposal, how sure."""
    made = proposal.provenance
    return {"proposed_source": str(made.source.value), "proposed_agent_id": made.agent_id,
            "proposed_session_id": made.session_id,
            "proposed_confidence": made.inference_confidence}


@project.register(ArbitrationCase.Decided)  # type: ignore[attr-defined]
def _(event: Any) -> list[Op]:
    return [DecideCase(event.tenant_id, event.originator_id, event.decision, event.decided_by,
                       event.timestamp)]


def _card_row(event: Any, kind: CardKind, memory_type: str, content: str, **extra: Any) -> dict:
    return {
        "tenant_id": event.tenant_id, "card_id": event.originator_id,
        "aggregate_id": event.originator_id, "kind": kind.value, "memory_type": memory_type,
        **_scope(event.scope), "content": plain(content), "valid_from": event.timestamp,
        "recorded_at": event.timestamp, "updated_at": event.timestamp,
        **_provenance(event.provenance), **erased_at(event, content), **extra,
    }


@project.register(EventCard.Recorded)  # type: ignore[attr-defined]
def _(event: Any) -> list[Op]:
    row = _card_row(event, CardKind.EVENT, "event", event.description,
                    perspective=plain(event.perspective), occurred_at=event.occurred_at,
                    valid_from=event.occurred_at,
                    **_text_columns(event.description, tags=tuple(event.tags)))
    return [PutNode(event.tenant_id, event.originator_id, "card"), PutCard(row)]


@project.register(EventCard.Corrected)  # type: ignore[attr-defined]
def _(event: Any) -> list[Op]:
    return [ChangeCard(event.tenant_id, event.originator_id, event.timestamp,
                       _new_content(event, event.description, tuple(event.tags)))]


def _link(event: Any) -> list[Op]:
    return [PutEdge(event.tenant_id, event.originator_id, event.target_id, event.edge,
                    event.timestamp)]


project.register(EventCard.Linked, _link)  # type: ignore[attr-defined]
project.register(KnowledgeCard.Linked, _link)  # type: ignore[attr-defined]


@project.register(KnowledgeCard.Created)  # type: ignore[attr-defined]
def _(event: Any) -> list[Op]:
    tags = tuple(event.tags)
    row = _card_row(event, CardKind.KNOWLEDGE, event.memory_type, event.body,
                    title=plain(event.title),
                    verified_at=event.timestamp,
                    **_text_columns(event.body, event.title, tags=tags))
    return [PutNode(event.tenant_id, event.originator_id, "card"), PutCard(row)]


@project.register(KnowledgeCard.Renamed)  # type: ignore[attr-defined]
def _(event: Any) -> list[Op]:
    text = _text_columns(event.body, event.title, tags=tuple(event.tags))
    return [ChangeCard(event.tenant_id, event.originator_id, event.timestamp,
                       {"title": plain(event.title), **text, **erased_at(event, event.title)})]


@project.register(KnowledgeCard.Merged)  # type: ignore[attr-defined]
def _(event: Any) -> list[Op]:
    return [
        ChangeCard(event.tenant_id, event.originator_id, event.timestamp,
                   {"status": "merged", "merged_into": event.survivor_id}),
        PutEdge(event.tenant_id, event.survivor_id, event.originator_id, "supersedes",
                event.timestamp),
    ]


@project.register(KnowledgeCard.Absorbed)  # type: ignore[attr-defined]
def _(event: Any) -> list[Op]:
    """A new version even when no tag is new: erased tags read as none, and a replay after an
    erasure must make the versions the projection made before it."""
    return [ChangeCard(event.tenant_id, event.originator_id, event.timestamp,
                       {"added_tags": list(event.tags), "added_terms": list(tag_terms(event.tags))})]


@project.register(KnowledgeCard.Verified)  # type: ignore[attr-defined]
def _(event: Any) -> list[Op]:
    return [ChangeCard(event.tenant_id, event.originator_id, event.timestamp,
                       {"verified_at": event.timestamp})]


@project.register(Commitment.Opened)  # type: ignore[attr-defined]
def _(event: Any) -> list[Op]:
    row = _card_row(event, CardKind.STATE, "commitment", event.description, status="open",
                    owner=plain(event.owner), due_at=event.due_at,
                    **_text_columns(event.description))
    return [PutNode(event.tenant_id, event.originator_id, "card"), PutCard(row)]


@project.register(Blocker.Raised)  # type: ignore[attr-defined]
def _(event: Any) -> list[Op]:
    row = _card_row(event, CardKind.STATE, "blocker", event.description, status="active",
                    **_text_columns(event.description))
    return [PutNode(event.tenant_id, event.originator_id, "card"), PutCard(row)]


def _status(status: str):  # type: ignore[no-untyped-def]
    def op(event: Any) -> list[Op]:
        return [ChangeCard(event.tenant_id, event.originator_id, event.timestamp,
                           {"status": status})]
    return op


project.register(Commitment.Waiting, _status("waiting"))  # type: ignore[attr-defined]
project.register(Commitment.Resolved, _status("resolved"))  # type: ignore[attr-defined]
project.register(Commitment.Expired, _status("expired"))  # type: ignore[attr-defined]
project.register(Blocker.Archived, _status("archived"))  # type: ignore[attr-defined]


@project.register(ERASED)
def _(event: Any) -> list[Op]:
    return [PutErasure({
        "tenant_id": event.tenant_id, "erasure_id": event.originator_id, "unit": event.unit,
        "target": event.target, "basis": event.basis, "requested_by": event.requested_by,
        "erased_at": event.timestamp, "keys_destroyed": len(event.key_ids),
        "cards": len(event.card_ids),
    }), forget(event)]


def forget(event: Any) -> Forget:
    """What an erasure forgets in the read models (also applied on its own: a rebuild as known
    before the erasure still shows its tombstones, :mod:`projections.fold`)."""
    return Forget(event.tenant_id, event.timestamp, tuple(event.card_ids), tuple(event.slot_ids),
                  tuple(event.aggregate_ids), whole_tenant=event.unit == ErasureUnit.TENANT.value)


# ---- text PostgreSQL can store ---------------------------------------------------------------

#: What PostgreSQL's ``text`` cannot hold: NUL, and a lone surrogate (no Unicode character at all).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
#: What replaces each of them: U+FFFD, Unicode's replacement character.
REPLACEMENT = "\ufffd"


def storable(text: str) -> str:
    """``text`` with every NUL and lone surrogate replaced by U+FFFD."""
    return _UNSTORABLE.sub(REPLACEMENT, text)


def operations(event: object, clean: bool = False) -> list[Op]:
    """The event's operations (:func:`project`), their text storable.

    The command boundary refuses NUL bytes and lone surrogates, but events stored before it did
    stay in the log. Every text of their operations — derived columns included — gets U+FFFD for
    each: deterministic, so the incremental projector and a rebuild store the same rows, and an
    upgrade needs no manual step. Operations with clean text (all but those) come back as they are,
    after one search over their joined text — none when the caller knows the event is ``clean``
    (its stored form shows it: :func:`projections.projector.clean_state`)."""
    ops = project(event)
    if clean or _UNSTORABLE.search(_joined(ops)) is None:
        return ops
    return [_storable_op(op) for op in ops]


#: Columns made from other columns' text (clean when that is): not searched, only replaced.
_DERIVED = frozenset({"terms", "bigrams", "fuzzy_text", "slot_words", "added_terms"})


def _joined(ops: list[Op]) -> str:
    """The text of ``ops`` their other columns are made from: string fields, the strings of rows
    and changes, and the items of their lists."""
    parts: list[str] = []
    for op in ops:
        for field in vars(op).values():
            if field.__class__ is str:
                parts.append(field)
            elif field.__class__ is dict:
                for column, value in field.items():
                    kind = value.__class__
                    if kind is str:
                        parts.append(value)
                    elif (kind is list or kind is tuple) and column not in _DERIVED:
                        parts.extend(item for item in value if item.__class__ is str)
    return "".join(parts)


def _storable_value(value: Any) -> Any:
    kind = value.__class__
    if kind is str:
        return storable(value)
    if kind is list or kind is tuple:
        return kind(_storable_value(item) for item in value)
    if kind is dict:
        return {key: _storable_value(item) for key, item in value.items()}
    return value


def _storable_op(op: Op) -> Op:
    return replace(op, **{name: _storable_value(value) for name, value in vars(op).items()})


# Handlers of other aggregates' events register on ``project`` when their module is imported.
import projections.ingestions  # noqa: E402, F401
import projections.proposals  # noqa: E402, F401
