"""The read-your-writes overlay's memory: what this process wrote that the read models may not
hold yet (DESIGN §3), each write as the card it created (:func:`pending_state`).

An erasure through this process drops its cards at once (:meth:`PendingWrites.forget`); one
through another process is learnt of before the overlay is used (:meth:`PendingWrites.of`, with
:class:`services.query.overlay_erasures.ErasedCards`), so no worker shows an erased card while
the projector catches up (DESIGN §7).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Collection, Iterable
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

import psycopg

from domain.rules.cardinality import decide_cardinality
from services.command.commands import WriteResult
from services.query.retrieval.scoring import Candidate, PendingWrite

log = logging.getLogger(__name__)


class ErasureCheck(Protocol):
    """What the overlay asks of the store (:class:`services.query.overlay_erasures.ErasedCards`)."""

    def count(self, tenant_id: str) -> int | None:
        """How many times keys were destroyed, by any process (None: not known)."""
        ...

    def erased(self, tenant_id: str, card_ids: Collection[UUID]) -> set[UUID]:
        """Those of ``card_ids`` an erasure reached."""
        ...


class PendingWrites:
    """Per tenant, the states this process wrote that the read models may not hold yet (for the
    overlay), and the slot of each card it wrote lately (so a revise of a card not projected yet
    finds it). Bounded: the oldest go first. ``erasures``: how erasures made by other processes
    are learnt of (none: this process is the only one that erases)."""

    def __init__(self, most: int = 1_000, erasures: ErasureCheck | None = None) -> None:
        self._most = most
        self._erasures = erasures
        self._writes: dict[str, list[PendingWrite]] = {}
        #: Per tenant and card, the count of key destructions its card was last found live at.
        self._checked: dict[str, dict[UUID, int]] = {}
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
                self._keep(tenant_id, writes[-self._most:])

    def of(self, tenant_id: str) -> list[PendingWrite]:
        """The tenant's writes the overlay may show: none another process erased. When keys were
        destroyed since a card was last found live (or it never was), whether it still is is
        asked first; if that cannot be asked, none is shown this time (and none forgotten)."""
        with self._lock:
            writes = list(self._writes.get(tenant_id, ()))
            checked = dict(self._checked.get(tenant_id, {}))
        if not writes or self._erasures is None:
            return writes
        try:
            count = self._erasures.count(tenant_id)
            doubtful = {w.candidate.card_id for w in writes
                        if count is None or checked.get(w.candidate.card_id, -1) < count}
            erased = self._erasures.erased(tenant_id, doubtful) if doubtful else set()
        except (psycopg.Error, OSError) as error:
            log.warning("overlay of %d write(s) withheld: erasures could not be checked (%s)",
                        len(writes), type(error).__name__)
            return []
        asked = {id(w) for w in writes}
        with self._lock:
            kept = [w for w in self._writes.get(tenant_id, ()) if w.candidate.card_id not in erased]
            self._keep(tenant_id, kept)
            if count is not None:
                marks = self._checked.get(tenant_id, {})
                for card_id in doubtful - erased:
                    if card_id in marks:
                        marks[card_id] = max(marks[card_id], count)
            # only what was checked here: a write added meanwhile waits for the next search
            return [w for w in kept if id(w) in asked]

    def projected(self, tenant_id: str, position: int | None) -> None:
        """The read models include ``position``: forget the writes they now hold."""
        if position is None:
            return
        with self._lock:
            self._keep(tenant_id, [w for w in self._writes.get(tenant_id, ()) if w.position > position])

    def forget(self, tenant_id: str, card_ids: Iterable[UUID] | None = None) -> None:
        """Those cards were erased (``None``: the whole tenant): the overlay shows them no more."""
        with self._lock:
            if card_ids is None:
                self._keep(tenant_id, [])
                return
            erased = set(card_ids)
            self._keep(tenant_id, [w for w in self._writes.get(tenant_id, ())
                                   if w.candidate.card_id not in erased])

    def slot_of(self, tenant_id: str, card_id: UUID) -> UUID | None:
        with self._lock:
            return self._slots.get((tenant_id, card_id))

    def _keep(self, tenant_id: str, writes: list[PendingWrite]) -> None:
        """The tenant's writes are now ``writes`` (held lock); a card not among them has no mark."""
        if not writes:
            self._writes.pop(tenant_id, None)
            self._checked.pop(tenant_id, None)
            return
        self._writes[tenant_id] = writes
        marks = self._checked.get(tenant_id, {})
        self._checked[tenant_id] = {w.candidate.card_id: marks.get(w.candidate.card_id, -1)
                                    for w in writes}


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
