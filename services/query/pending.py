"""The read-your-writes overlay's memory: what this process wrote that the read models may not
hold yet (DESIGN §3), each write as the card it created (:func:`pending_state`)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from datetime import datetime
from typing import Any
from uuid import UUID

from domain.rules.cardinality import decide_cardinality
from services.command.commands import WriteResult
from services.query.retrieval.scoring import Candidate, PendingWrite


class PendingWrites:
    """Per tenant, the states this process wrote that the read models may not hold yet (for the
    overlay), and the slot of each card it wrote lately (so a revise of a card not projected yet
    finds it). Bounded: the oldest go first."""

    def __init__(self, most: int = 1_000) -> None:
        self._most = most
        self._writes: dict[str, list[PendingWrite]] = {}
        self._slots: OrderedDict[tuple[str, UUID], UUID] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, tenant_id: str, result: WriteResult, write: PendingWrite | None) -> None:
        with self._lock:
            if result.card_id is not None and result.aggregate_id is not None:
                self._slots[(tenant_id, result.card_id)] = result.aggregate_id
                while len(self._slots) > self._most:
                    self._slots.popitem(last=False)
            if write is not None:
                writes = self._writes.setdefault(tenant_id, [])
                writes.append(write)
                del writes[:-self._most]

    def of(self, tenant_id: str) -> list[PendingWrite]:
        with self._lock:
            return list(self._writes.get(tenant_id, ()))

    def projected(self, tenant_id: str, position: int | None) -> None:
        """The read models include ``position``: forget the writes they now hold."""
        if position is None:
            return
        with self._lock:
            kept = [w for w in self._writes.get(tenant_id, ()) if w.position > position]
            if kept:
                self._writes[tenant_id] = kept
            else:
                self._writes.pop(tenant_id, None)

    def forget(self, tenant_id: str, card_ids: Iterable[UUID] | None = None) -> None:
        """Those cards were erased (``None``: the whole tenant): the overlay shows them no more."""
        with self._lock:
            if card_ids is None:
                self._writes.pop(tenant_id, None)
                return
            erased = set(card_ids)
            kept = [w for w in self._writes.get(tenant_id, ()) if w.candidate.card_id not in erased]
            if kept:
                self._writes[tenant_id] = kept
            else:
                self._writes.pop(tenant_id, None)

    def slot_of(self, tenant_id: str, card_id: UUID) -> UUID | None:
        with self._lock:
            return self._slots.get((tenant_id, card_id))


def pending_state(command: Any, result: Any, recorded_at: datetime) -> PendingWrite | None:
    """The overlay entry for a card written by ``remember`` (a ``Remember`` command and its
    ``WriteResult``): a state of a slot, an event or a knowledge card; None for outcomes that
    created no card, or no position."""
    if result.card_id is None or result.position is None \
            or result.outcome not in ("remembered", "superseded", "overwritten", "recorded",
                                      "learned"):
        return None
    if command.kind == "state":
        if command.label is None:
            return None
        cardinality = decide_cardinality(command.label, command.cardinality).cardinality.value
        return PendingWrite(result.position, Candidate(
            card_id=result.card_id, kind="state", cardinality=cardinality, scope=command.scope,
            project_id=command.project_id, subject=command.subject, label=command.label,
            value=command.content, valid_from=command.valid_from or recorded_at, valid_to=None,
            occurred_at=None, recorded_at=recorded_at, verified_at=None, superseded=False,
            group_id=command.group_id), command.agent_id, command.session_id)
    if command.kind not in ("event", "knowledge"):
        return None
    occurred = (command.occurred_at or recorded_at) if command.kind == "event" else None
    return PendingWrite(result.position, Candidate(
        card_id=result.card_id, kind=command.kind, cardinality=None, scope=command.scope,
        project_id=command.project_id, subject=command.subject, label=None,
        value=command.content, valid_from=occurred or recorded_at, valid_to=None,
        occurred_at=occurred, recorded_at=recorded_at, verified_at=None, superseded=False,
        group_id=command.group_id, memory_type=command.memory_type), command.agent_id,
        command.session_id)
