"""The rows of the key table and where they live: the table port every ring reads and writes
through, and the table kept in the process (``MemoryKeyRing``); the PostgreSQL one is
:mod:`infra.keyring.postgres_table`."""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import cast
from uuid import UUID

from infra.keyring.errors import MissingKeyError, UnitErasedError
from infra.keyring.units import Found, KeyKind
from infra.keyring.wrapping import CHECK_ID

#: Keys made and not yet stored (opaque to callers: rows of the key table).
MadeKeys = Sequence[object]


def after_fork(owner: object, method: str) -> None:
    """Call ``owner.<method>()`` in a forked child, for as long as ``owner`` lives: a lock another
    thread held, a cache or a connection of the parent's must not be used there."""
    ref = weakref.ref(owner)

    def restart() -> None:
        alive = ref()
        if alive is not None:
            getattr(alive, method)()

    os.register_at_fork(after_in_child=restart)


@dataclass(frozen=True)
class Row:
    """A row of the key table (``erasure_keys``)."""

    tenant_id: str
    key_id: UUID
    kind: str
    unit_id: UUID
    slot_id: UUID | None = None
    subject_ref: bytes | None = None
    session: str | None = None
    cards: tuple[UUID, ...] = ()
    material: bytes | None = None  # wrapped; None once destroyed
    erasure_id: UUID | None = None
    #: A card key's: the subject ref of the turn among its ``cards`` (its speaker), copied from
    #: the turn's key when the card's key is stored (:meth:`spoken`); None once destroyed.
    said_by: bytes | None = None

    def lacks(self, known: Row) -> bool:
        """Whether ``known`` (this unit as a caller knows it now) has refs this row lacks."""
        return ((self.slot_id is None and known.slot_id is not None)
                or (self.subject_ref is None and known.subject_ref is not None)
                or (self.session is None and known.session is not None)
                or not set(known.cards) <= set(self.cards))

    def filled(self, known: Row) -> Row:
        return replace(
            self,
            slot_id=known.slot_id if self.slot_id is None else self.slot_id,
            subject_ref=known.subject_ref if self.subject_ref is None else self.subject_ref,
            session=known.session if self.session is None else self.session,
            cards=self.cards + tuple(dict.fromkeys(c for c in known.cards if c not in self.cards)),
        )

    def spoken(self, speaker_of: Callable[[str, UUID], bytes | None]) -> Row:
        """This row with ``said_by`` filled, if it is a card key naming a turn whose speaker
        ``speaker_of`` (tenant, turn id) knows."""
        if self.kind != "card" or self.said_by is not None:
            return self
        ref = next(filter(None, (speaker_of(self.tenant_id, card) for card in self.cards)), None)
        return replace(self, said_by=ref) if ref is not None else self

    def found(self) -> Found:
        return Found(self.key_id, cast(KeyKind, self.kind), self.unit_id, self.slot_id)

    def under(self) -> list[tuple[str, str, UUID]]:
        """The units whose erasure refuses this key (tenant, kind, id): its own, its slot's, and
        the cards' and turns' among its ``cards`` (what it seals quotes them); none for the
        tenant's own key (a tenant erased and used again starts anew)."""
        if self.kind == "tenant":
            return []
        slot = [(self.tenant_id, "slot", self.slot_id)] if self.slot_id is not None else []
        return [(self.tenant_id, self.kind, self.unit_id), *slot,
                *((self.tenant_id, kind, card) for card in self.cards for kind in ("card", "turn"))]


@dataclass(frozen=True)
class Selection:
    """What one lookup of live keys matches (any of it)."""

    cards: frozenset[UUID] = frozenset()
    slots: frozenset[UUID] = frozenset()
    refs: frozenset[bytes] = frozenset()
    sessions: frozenset[str] = frozenset()
    whole: bool = False
    #: Subject refs matched by the ``said_by`` of card keys (the cards written from their turns).
    speakers: frozenset[bytes] = frozenset()

    def covers(self, row: Row) -> bool:
        return (self.whole or (row.kind == "card" and row.unit_id in self.cards)
                or not self.cards.isdisjoint(row.cards)
                or row.slot_id in self.slots or (row.kind == "slot" and row.unit_id in self.slots)
                or row.subject_ref in self.refs or row.session in self.sessions
                or row.said_by in self.speakers)


def speakers_among(rows: Iterable[Row]) -> dict[tuple[str, UUID], bytes]:
    """The speakers of the turns whose keys are among ``rows``: (tenant, turn id) → subject ref;
    a card key stored with its turn's key (an ingested turn's event card) names it so."""
    return {(row.tenant_id, row.unit_id): row.subject_ref for row in rows
            if row.kind == "turn" and row.subject_ref is not None and row.material is not None}


class KeyTable(ABC):
    """Where a ring's rows live. Every method may run twice (a retry after a lost connection)."""

    @abstractmethod
    def unit_row(self, tenant_id: str, kind: str, unit_id: UUID) -> Row | None:
        """A destroyed row of the unit if it has one (the unit was erased), else a live one."""

    @abstractmethod
    def first_live(self, made: Row) -> Row:
        """The oldest live key of ``made``'s unit, ``made`` stored first when the unit has none:
        one process at a time, so every process agrees on it (the tenant's key, which keyed ids
        are derived from, must be one key)."""

    @abstractmethod
    def add(self, row: Row) -> None:
        """Add ``row`` (a unit may have several live keys); UnitErasedError when its unit, its
        slot or a card or turn among its cards has a destroyed key (only the tenant's own key is
        made again)."""

    def add_many(self, rows: list[Row]) -> None:
        for row in rows:
            self.add(row)

    def material_around(self, tenant_id: str, key_id: UUID, ahead: int) -> dict[UUID, bytes | None]:
        """The wrapped key of ``key_id``, and of others likely opened next."""
        return {key_id: self.material(tenant_id, key_id)}

    @abstractmethod
    def live_or_refuse(self, key_ids: Iterable[UUID]) -> None:
        """UnitErasedError unless every stored key of ``key_ids`` is live."""

    @abstractmethod
    def fill(self, known: Row) -> None:
        """Fill in the refs the live row ``known.key_id`` lacks; never replace one."""

    @abstractmethod
    def material(self, tenant_id: str, key_id: UUID) -> bytes | None:
        """The wrapped key, None once destroyed; MissingKeyError when there is no such row."""

    @abstractmethod
    def matching(self, tenant_id: str, selection: Selection) -> list[Found]: ...

    @abstractmethod
    def destroy(self, tenant_id: str, key_ids: list[UUID], erasure_id: UUID) -> int: ...

    @abstractmethod
    def ever_made(self, tenant_id: str, kind: str, unit_id: UUID) -> bool: ...

    @abstractmethod
    def made_version(self, tenant_id: str, kind: str, version: int) -> bool: ...

    @abstractmethod
    def sample(self) -> Row | None:
        """Any live data key of any tenant."""

    def has_sealed(self) -> bool:
        """Whether anything here is sealed by a master key (a live key, or the check)."""
        return self.sample() is not None or self.check() is not None

    def check(self) -> bytes | None:
        with contextlib.suppress(MissingKeyError):
            return self.material("", CHECK_ID)
        return None

    @abstractmethod
    def close(self) -> None: ...


class MemoryTable(KeyTable):
    def __init__(self) -> None:
        self._rows: dict[UUID, Row] = {}
        self._live_ids: dict[tuple[str, str, UUID], list[UUID]] = {}  # (tenant, kind, unit) → key ids
        self._erased: dict[tuple[str, str, UUID], UUID] = {}  # (tenant, kind, unit) → a destroyed key
        self._lock = threading.Lock()
        after_fork(self, "_restart")

    def _restart(self) -> None:
        self._lock = threading.Lock()

    def unit_row(self, tenant_id: str, kind: str, unit_id: UUID) -> Row | None:
        destroyed = self._erased.get((tenant_id, kind, unit_id))
        if destroyed is not None:
            return self._rows[destroyed]
        key_ids = self._live_ids.get((tenant_id, kind, unit_id))
        return self._rows[key_ids[-1]] if key_ids else None

    def first_live(self, made: Row) -> Row:
        with self._lock:
            key_ids = self._live_ids.get((made.tenant_id, made.kind, made.unit_id))
            if key_ids:
                return self._rows[key_ids[0]]
        self.add(made)
        return made

    def add(self, row: Row) -> None:
        self.add_many([row])

    def add_many(self, rows: list[Row]) -> None:
        with self._lock:  # all or none, as the table's one statement
            speaker_of = self._speaker_in(rows)
            rows = [row.spoken(speaker_of) for row in rows]
            for row in rows:
                if row.key_id not in self._rows:
                    for unit in row.under():
                        if unit in self._erased:
                            raise UnitErasedError(*unit)
            for row in rows:
                if row.key_id in self._rows:  # stored before (a retry): as ON CONFLICT DO NOTHING
                    continue
                self._rows[row.key_id] = row
                if row.material is not None:
                    self._live_ids.setdefault((row.tenant_id, row.kind, row.unit_id), []).append(row.key_id)

    def _speaker_in(self, rows: list[Row]) -> Callable[[str, UUID], bytes | None]:
        """A turn's speaker (its key's subject ref) by its key among ``rows`` or its live one here."""
        batch = speakers_among(rows)

        def speaker_of(tenant_id: str, turn_id: UUID) -> bytes | None:
            key_ids = self._live_ids.get((tenant_id, "turn", turn_id))
            return batch.get((tenant_id, turn_id)) or next(
                filter(None, (self._rows[key_id].subject_ref for key_id in key_ids or ())), None)
        return speaker_of

    def live_or_refuse(self, key_ids: Iterable[UUID]) -> None:
        """UnitErasedError unless every stored key of ``key_ids`` is live."""
        with self._lock:
            for key_id in key_ids:
                row = self._rows.get(key_id)
                if row is not None and row.material is None:
                    raise UnitErasedError(row.tenant_id, row.kind, row.unit_id)

    def fill(self, known: Row) -> None:
        with self._lock:
            row = self._rows[known.key_id]
            if row.material is not None:
                self._rows[row.key_id] = row.filled(known).spoken(self._speaker_in([]))

    def material(self, tenant_id: str, key_id: UUID) -> bytes | None:
        row = self._rows.get(key_id)
        if row is None or row.tenant_id != tenant_id:
            raise MissingKeyError(tenant_id, key_id)
        return row.material

    def matching(self, tenant_id: str, selection: Selection) -> list[Found]:
        with self._lock:
            return [r.found() for r in self._rows.values() if r.tenant_id == tenant_id
                    and r.material is not None and selection.covers(r)]

    def destroy(self, tenant_id: str, key_ids: list[UUID], erasure_id: UUID) -> int:
        with self._lock:
            doomed = [r for r in map(self._rows.get, key_ids)
                      if r is not None and r.tenant_id == tenant_id and r.material is not None]
            units = {(row.kind, row.unit_id) for row in doomed}
            slots = {unit_id for kind, unit_id in units if kind == "slot"}
            cards = {unit_id for kind, unit_id in units if kind == "card"}
            named = {row.key_id for row in doomed}
            doomed += [row for row in self._rows.values()  # as the shared table's second pass
                       if row.tenant_id == tenant_id and row.material is not None
                       and row.key_id not in named and ((row.kind, row.unit_id) in units
                                                        or row.slot_id in slots
                                                        or not cards.isdisjoint(row.cards))]
            for row in doomed:
                unit = (row.tenant_id, row.kind, row.unit_id)
                self._live_ids[unit].remove(row.key_id)
                self._erased.setdefault(unit, row.key_id)
                self._rows[row.key_id] = replace(row, material=None, subject_ref=None, session=None,
                                                 said_by=None, erasure_id=erasure_id)
        return len(doomed)

    def ever_made(self, tenant_id: str, kind: str, unit_id: UUID) -> bool:
        with self._lock:
            return any(r.tenant_id == tenant_id and r.kind == kind and r.unit_id == unit_id
                       for r in self._rows.values())

    def made_version(self, tenant_id: str, kind: str, version: int) -> bool:
        with self._lock:
            return any(r.tenant_id == tenant_id and r.kind == kind and r.unit_id.version == version
                       for r in self._rows.values())

    def sample(self) -> Row | None:
        with self._lock:
            return next((r for r in self._rows.values()
                         if r.material is not None and r.key_id != CHECK_ID), None)

    def close(self) -> None:
        pass
