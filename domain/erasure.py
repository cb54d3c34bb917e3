"""An erasure: who asked to forget which unit, when, why, and which keys went with it.

Forgetting is crypto-shredding (DESIGN §7, decision 0012): the event log keeps every event, and
the keys that opened a unit's personal fields are destroyed. The erasure itself is an event like
every decision — the audit of *that* something was forgotten — and holds no personal text: the
unit is named by ids (a subject by its keyed hash), the keys and cards by id, and the reason a
caller gives is sealed under the tenant's key like every other text (``infra.sealing``).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from uuid import UUID

from eventsourcing.domain import event

from domain.base import TenantAggregate
from domain.errors import InvalidCommandError


class ErasureUnit(StrEnum):
    """What a caller can forget at once."""

    #: One card ("forget this").
    CARD = "card"
    #: Everything ever stored under one label of one subject.
    SLOT = "slot"
    #: A person the memory speaks of: every slot of theirs and what is linked to it.
    SUBJECT = "subject"
    #: One ingested conversation session: its turns and what extraction made of them.
    SESSION = "session"
    #: The whole tenant (offboarding).
    TENANT = "tenant"


def parse_unit(unit: str) -> ErasureUnit:
    try:
        return ErasureUnit(unit)
    except ValueError:
        choices = ", ".join(u.value for u in ErasureUnit)
        raise InvalidCommandError(f"unknown erasure unit {unit!r}; expected one of {choices}") from None


class Erasure(TenantAggregate):
    """One request to forget, as carried out."""

    @staticmethod
    def create_id(erasure_id: UUID) -> UUID:
        """An erasure is known by the id its command derived (from the request id, if any)."""
        return erasure_id

    @event("Erased")
    def __init__(
        self, erasure_id: UUID, tenant_id: str, unit: str, target: str, basis: str, reason: str,
        requested_by: str, key_ids: tuple[UUID, ...], card_ids: tuple[UUID, ...], slot_ids: tuple[UUID, ...],
        aggregate_ids: tuple[UUID, ...], timestamp: datetime,
    ) -> None:
        self.tenant_id = tenant_id
        #: An :class:`ErasureUnit`; ``target`` names it: a card or slot id, a subject's keyed
        #: hash, a session id, or the tenant.
        self.unit = ErasureUnit(unit)
        self.target = target
        #: The legal basis the caller named (``gdpr-17``, ``user-request`` …) and why, in words.
        self.basis = basis
        self.reason = reason
        self.requested_by = requested_by
        #: The data keys destroyed; the cards that became tombstones; the slots whose label and
        #: subject were forgotten; every aggregate whose events held a destroyed key's text.
        self.key_ids = tuple(key_ids)
        self.card_ids = tuple(card_ids)
        self.slot_ids = tuple(slot_ids)
        self.aggregate_ids = tuple(aggregate_ids)
        self.erased_at = timestamp
