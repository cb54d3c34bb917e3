"""Forgetting on request (DESIGN §7, decision 0012): an erasure is a command and an event, and
the keys of the unit it names are destroyed.

:meth:`ErasureCommands.erase` finds the live data keys of the unit in the key ring — one card's
(with the keys that also quote it: a proposal's rationale, a turn's record), one slot's (its
label and subject and every card of it, its decisions' notes), a subject's (every slot of
theirs, and every turn they spoke with its event card and the cards written from it), an ingested
session's, or the whole tenant's — records ``Erasure.Erased`` naming them by id, then destroys
them. The event comes first: an erasure interrupted between the two is finished by running it
again (the same request id answers from its receipt and destroys what is still live). The
projector turns the named cards into tombstones in every read model; a replay reads the
destroyed keys as erased and rebuilds the same tombstones.

A unit the tenant never had is refused like a missing card; a unit forgotten before is erased
again with nothing left to destroy.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from domain.erasure import Erasure, ErasureUnit, parse_unit
from domain.errors import CardNotFoundError, InvalidCommandError
from domain.rules.cardinality import normalise_label
from infra.keyring import Found, KeyRing
from services.command.application import BaseApplication
from services.command.commands import Erase, ErasureResult, WriteResult
from services.command.keyed_ids import session_target, slot_generations


class ErasureCommands(BaseApplication):
    """The erasure use case, mixed into :class:`services.command.memory.Palimpsest`."""

    def erase(self, tenant_id: str, command: Erase) -> ErasureResult:
        ring = self._ring()
        unit = parse_unit(command.unit)
        target, found = self._unit_keys(tenant_id, unit, command, ring)
        erasure_id = self.new_id(tenant_id, command, "erasure")

        def decide(now: datetime) -> tuple[list[Erasure], WriteResult]:
            erasure = Erasure(
                erasure_id=erasure_id, tenant_id=tenant_id, unit=unit.value, target=target,
                basis=command.basis, reason=command.reason, requested_by=command.requested_by,
                key_ids=tuple(f.key_id for f in found),
                card_ids=_ids(found, "card"), slot_ids=_ids(found, "slot"),
                aggregate_ids=_ids(found, "proposal", "turn", "case"), timestamp=now)
            return [erasure], WriteResult(outcome="erased", aggregate_id=erasure_id)

        written = self._execute(tenant_id, command, decide)
        erasure = self.load(tenant_id, erasure_id, Erasure, "erasure")
        destroyed = ring.destroy(tenant_id, erasure.key_ids, erasure_id)
        self.forget_decoded()
        return ErasureResult(
            erasure_id=erasure_id, unit=unit.value, keys_destroyed=destroyed,
            card_ids=erasure.card_ids, position=written.position, replayed=written.replayed)

    def _ring(self) -> KeyRing:
        if self.keyring is None:
            raise InvalidCommandError("this store keeps events unsealed (seal_events is off): "
                                      "nothing in it can be erased")
        return self.keyring

    def _unit_keys(self, tenant_id: str, unit: ErasureUnit, command: Erase, ring: KeyRing,
                   ) -> tuple[str, list[Found]]:
        """The unit's target as the event names it (ids only), and its live keys."""
        if unit is ErasureUnit.CARD:
            if command.card_id is None:
                raise InvalidCommandError("erasing a card needs its card_id")
            if not ring.ever_made(tenant_id, "card", command.card_id):
                raise CardNotFoundError(f"no card {command.card_id}")
            return str(command.card_id), ring.find(tenant_id, cards=[command.card_id])
        if unit is ErasureUnit.SLOT:
            slots = [command.slot_id] if command.slot_id else self._slot_ids(tenant_id, command, ring)
            if not slots or not ring.ever_made(tenant_id, "slot", slots[0]):
                raise CardNotFoundError(f"no slot {command.slot_id or f'{command.subject}/{command.label}'}")
            return str(slots[-1]), ring.find(tenant_id, slots=slots)
        if unit is ErasureUnit.SUBJECT:
            if command.subject is None:
                raise InvalidCommandError("erasing a subject needs the subject")
            found = ring.find(tenant_id, subjects=[command.subject])
            return str(ring.subject_id(tenant_id, command.subject)), found
        if unit is ErasureUnit.SESSION:
            if command.session_id is None:
                raise InvalidCommandError("erasing a session needs its session_id")
            found = ring.find(tenant_id, sessions=[command.session_id])
            return session_target(ring, tenant_id, command.session_id), found
        return tenant_id, ring.find(tenant_id, whole=True)

    def _slot_ids(self, tenant_id: str, command: Erase, ring: KeyRing) -> list[UUID]:
        """Every generation of the slot a subject and label name that was ever made, oldest
        first (``Slot.create_id``; under its legacy id if it was stored so): forgetting the slot
        forgets them all."""
        if command.subject is None or command.label is None:
            raise InvalidCommandError("erasing a slot needs its slot_id, or its subject and label")
        made: list[UUID] = []
        for ids in slot_generations(ring, tenant_id, command.parsed_scope(), command.subject,
                                    normalise_label(command.label)):
            slot_id = next((i for i in ids if ring.ever_made(tenant_id, "slot", i)), None)
            if slot_id is None:
                return made
            made.append(slot_id)
        raise AssertionError("unreachable: the generations never end")


def _ids(found: list[Found], *kinds: str) -> tuple[UUID, ...]:
    return tuple(dict.fromkeys(f.unit_id for f in found if f.kind in kinds))

