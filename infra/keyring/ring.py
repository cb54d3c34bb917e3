"""The rings: a data key per unit over a key table, with raw keys cached in the process for a few
seconds (read ahead from the table when one is not), the keys made and not yet stored, and the
units the table refused as erased. ``MemoryKeyRing`` keeps its rows in the process,
``PostgresKeyRing`` in ``{schema}.erasure_keys``."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import replace
from typing import Any, Generic, TypeVar, cast
from uuid import UUID, uuid4

import psycopg
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from domain.values import check_tenant
from infra.keyring.errors import MasterKeyError, UnitErasedError
from infra.keyring.postgres_table import PostgresTable
from infra.keyring.tables import KeyTable, MadeKeys, MemoryTable, Row, Selection, after_fork
from infra.keyring.units import KEY_KINDS, Found, KeyKind, Unit, subject_ref, subject_ref_key
from infra.keyring.wrapping import CHECK_ID, CHECK_TEXT, WRONG_MASTER, unwrap_key, wrap_key
from infra.settings import Settings

_DEFAULT_SCHEMA: str = Settings.model_fields["event_schema"].default
#: Keys fetched at once when one is not cached: those the tenant made about when it was made.
_READ_AHEAD = 512

#: The stored keys handed out inside :meth:`KeyRing.sealing`, in this thread (None outside).
_USED: ContextVar[set[UUID] | None] = ContextVar("palimpsest_keys_used", default=None)
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _Cache(Generic[K, V]):
    """Values kept for ``seconds`` (nothing kept when 0); expired ones are swept once a period."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._items: dict[K, tuple[float, V]] = {}
        self._swept = time.monotonic()

    def get(self, key: K) -> V | None:
        item = self._items.get(key)
        return item[1] if item is not None and item[0] > time.monotonic() else None

    def put(self, key: K, value: V) -> None:
        if self.seconds <= 0:
            return
        now = time.monotonic()
        if now - self._swept > self.seconds:
            self._items = {k: item for k, item in self._items.items() if item[0] > now}
            self._swept = now
        self._items[key] = (now + self.seconds, value)

    def drop(self, doomed: Callable[[K, V], bool]) -> None:
        self._items = {k: item for k, item in self._items.items() if not doomed(k, item[1])}


class _Ring:
    """What both rings do, over their table; a cache of raw keys in the process."""

    def __init__(self, table: KeyTable, master: bytes, cache_seconds: float) -> None:
        if len(master) != 32:
            raise MasterKeyError("the master key must be 32 bytes")
        self._table = table
        self._master = master
        self._ref_key = subject_ref_key(master)
        self._cache_seconds = cache_seconds
        self._restart()
        after_fork(self, "_restart")
        self.check_master()

    def _restart(self) -> None:
        self._lock = threading.Lock()
        self._keys: _Cache[UUID, tuple[str, bytes | None]] = _Cache(self._cache_seconds)
        self._units: _Cache[tuple[str, str, UUID], tuple[Row, bytes]] = _Cache(self._cache_seconds)
        #: Keys made and not yet stored, by id (:meth:`flush`); the memory ring stores at once.
        self._pending: dict[UUID, Row] = {}
        #: Units the table refused a key of (an erasure destroyed theirs): refused here at once.
        self._erased: set[tuple[str, str, UUID]] = set()

    def check_master(self) -> None:
        """MasterKeyError unless the master key is the one this store's keys are sealed by; a
        store with no check yet gets one (after one of its live keys, if any, opened)."""
        if self._table.check() is None:
            sample = self._table.sample()
            if sample is not None and sample.material is not None:
                unwrap_key(self._master, sample.tenant_id, sample.key_id, sample.material)
            sealed = wrap_key(self._master, "", CHECK_ID, CHECK_TEXT)
            self._table.add(Row("", CHECK_ID, "check", CHECK_ID, material=sealed))
        check = self._table.check()
        try:
            opens = check is not None and unwrap_key(self._master, "", CHECK_ID, check) == CHECK_TEXT
        except MasterKeyError:
            opens = False
        if not opens:
            raise MasterKeyError(WRONG_MASTER)

    def data_key(self, tenant_id: str, unit: Unit, *, new: bool = False) -> tuple[UUID, bytes]:
        known = self._known(check_tenant(tenant_id), unit)
        unit_key = (tenant_id, unit.kind, unit.id)
        with self._lock:
            cached = self._units.get(unit_key)
            erased = [unit for unit in known.under() if unit in self._erased]
        if erased:
            raise UnitErasedError(*erased[0])
        if cached is not None and not cached[0].lacks(known):
            return self._handed(cached[0], cached[1])
        if unit.kind == "tenant":
            return self._tenant_key(known)
        row = None if new or cached is not None else self._table.unit_row(tenant_id, unit.kind, unit.id)
        if row is not None and row.material is None:
            raise UnitErasedError(*unit_key)  # never made again: nothing is written under it
        if cached is not None:  # a key of ours that has learned a ref
            row = cached[0]
        if row is None:
            raw = AESGCM.generate_key(bit_length=256)
            row = replace(known, material=wrap_key(self._master, tenant_id, known.key_id, raw))
            self._made(row)
        else:
            if row.lacks(known):
                self._refill(replace(known, key_id=row.key_id))
                row = row.filled(known)
            assert row.material is not None
            raw = unwrap_key(self._master, tenant_id, row.key_id, row.material)
        with self._lock:
            self._units.put(unit_key, (row, raw))
            self._keys.put(row.key_id, (tenant_id, raw))
        return self._handed(row, raw)

    def _tenant_key(self, known: Row) -> tuple[UUID, bytes]:
        """The tenant's own key: its oldest live one, or one made and stored at once (a tenant
        erased and used again gets a new one). One key, whichever process asks: keyed ids (slot
        ids, the embedding cache's hashes) are derived from it."""
        raw = AESGCM.generate_key(bit_length=256)
        made = replace(known, material=wrap_key(self._master, known.tenant_id, known.key_id, raw))
        row = self._table.first_live(made)
        if row.key_id != made.key_id:
            assert row.material is not None
            raw = unwrap_key(self._master, known.tenant_id, row.key_id, row.material)
        with self._lock:
            self._units.put((known.tenant_id, known.kind, known.unit_id), (row, raw))
            self._keys.put(row.key_id, (known.tenant_id, raw))
        return self._handed(row, raw)

    def _handed(self, row: Row, raw: bytes) -> tuple[UUID, bytes]:
        """``row``'s key, noted for :meth:`sealing` when it is stored (not one made now)."""
        used = _USED.get()
        if used is not None and row.kind != "tenant":
            with self._lock:
                stored = row.key_id not in self._pending
            if stored:
                used.add(row.key_id)
        return row.key_id, raw

    @contextlib.contextmanager
    def sealing(self) -> Iterator[set[UUID]]:
        used: set[UUID] = set()
        token = _USED.set(used)
        try:
            yield used
        finally:
            _USED.reset(token)

    def check_live(self, key_ids: Iterable[UUID]) -> None:
        """UnitErasedError unless every stored key of ``key_ids`` is live (in the table)."""
        self._table.live_or_refuse(key_ids)

    def _made(self, row: Row) -> None:
        if self._cache_seconds <= 0:  # nothing cached: it must be readable at once
            try:
                self._table.add(row)
            except UnitErasedError as refused:
                self._refused(refused)
                raise
            return
        with self._lock:
            self._pending[row.key_id] = row

    def _refill(self, known: Row) -> None:
        with self._lock:
            pending = self._pending.get(known.key_id)
            if pending is not None:
                self._pending[known.key_id] = pending.filled(known)
                return
        self._table.fill(known)

    def take_made(self, tenant_id: str | Collection[str] | None = None) -> MadeKeys:
        def taken(row: Row) -> bool:
            return (tenant_id is None or row.tenant_id == tenant_id
                    or (not isinstance(tenant_id, str) and row.tenant_id in tenant_id))

        with self._lock:
            rows = [row for row in self._pending.values() if taken(row)]
            self._pending = {key: row for key, row in self._pending.items() if not taken(row)}
        return rows

    def restore_made(self, made: MadeKeys, refused: UnitErasedError | None = None) -> None:
        rows = cast(list[Row], made)
        if refused is not None:
            # A save refused as erased is decided again and sealed anew: none of its keys is ever
            # stored (a key without its events, under an erased person's ref, would link a dump's
            # reader to that person), and none is handed out again from the cache.
            self._refused(refused)
            self.forget_cached(row.key_id for row in rows)
            return
        with self._lock:
            self._pending = {**{row.key_id: row for row in rows}, **self._pending}

    def _refused(self, refused: UnitErasedError) -> None:
        """The table refused a key under ``refused``'s unit: it is erased, the keys under it are
        never stored, and none is handed out again."""
        with self._lock:
            self._erased.add(refused.unit)
            self._units.drop(lambda _, entry: refused.unit in entry[0].under())
            self._pending = {key_id: row for key_id, row in self._pending.items()
                             if refused.unit not in row.under()}

    def flush(self, tenant_id: str | None = None) -> None:
        made = self.take_made(tenant_id)
        if not made:
            return
        try:
            self._table.add_many(cast(list[Row], made))
        except UnitErasedError as refused:
            self._refused(refused)  # the others are stored by the next flush
            self.restore_made([row for row in cast(list[Row], made) if refused.unit not in row.under()])
            raise
        except BaseException:
            self.restore_made(made)  # stored by the next flush; nothing sealed with them was stored
            raise

    def _known(self, tenant_id: str, unit: Unit) -> Row:
        if unit.kind not in KEY_KINDS:
            raise ValueError(f"unknown erasure unit kind {unit.kind!r}")
        ref = None if unit.subject is None else subject_ref(self._ref_key, tenant_id, unit.subject)
        return Row(tenant_id, uuid4(), unit.kind, unit.id, unit.slot_id, ref, unit.session,
                   tuple(dict.fromkeys(unit.cards)))

    def open_key(self, tenant_id: str, key_id: UUID) -> bytes | None:
        with self._lock:
            cached = self._keys.get(key_id)
        if cached is not None and cached[0] == tenant_id:
            return cached[1]
        with self._lock:
            pending = self._pending.get(key_id)
        if pending is not None and pending.tenant_id == tenant_id:
            assert pending.material is not None
            return unwrap_key(self._master, tenant_id, key_id, pending.material)
        around = self._table.material_around(check_tenant(tenant_id), key_id, _READ_AHEAD)
        opened = {found: None if wrapped is None else unwrap_key(self._master, tenant_id, found, wrapped)
                  for found, wrapped in around.items()}
        with self._lock:
            for found, raw in opened.items():
                self._keys.put(found, (tenant_id, raw))  # a destroyed key stays destroyed
        return opened[key_id]

    def find(self, tenant_id: str, *, cards: Iterable[UUID] = (), slots: Iterable[UUID] = (),
             subjects: Iterable[str] = (), sessions: Iterable[str] = (), whole: bool = False,
             ) -> list[Found]:
        check_tenant(tenant_id)
        self.flush(tenant_id)  # keys made here are found like the others
        refs = frozenset(subject_ref(self._ref_key, tenant_id, s) for s in subjects)
        named, said = set(slots), set(cards)
        if refs and not whole:  # a subject's keys, their slots, and what their turns said
            for key in self._table.matching(tenant_id, Selection(refs=refs)):
                slot = key.unit_id if key.kind == "slot" else key.slot_id
                if slot is not None:
                    named.add(slot)
                if key.kind == "turn":
                    said |= self._said(tenant_id, key.unit_id)
        # and the cards written from their turns, by the speaker their keys name (``said_by``):
        # found so even after the turn's key was destroyed, and without their slots
        selection = Selection(frozenset(said), frozenset(named), refs, frozenset(sessions), whole,
                              speakers=refs)
        found = set(self._table.matching(tenant_id, selection))
        more = {f.unit_id for f in found if f.kind == "card"} - selection.cards
        if more and not whole:  # the keys that also protect a card found
            found |= set(self._table.matching(tenant_id, Selection(cards=frozenset(more))))
        return sorted(found, key=lambda f: (f.kind, str(f.unit_id)))

    def _said(self, tenant_id: str, turn_id: UUID) -> set[UUID]:
        """What a speaker's turn reaches: its id, which the keys of the cards written from it
        name (``infra.sealing.said_in``), and the cards its own key names — its event card,
        however that card's key was made (before cards named their turn, too)."""
        row = self._table.unit_row(tenant_id, "turn", turn_id)
        return {turn_id, *(row.cards if row is not None else ())}

    def destroy(self, tenant_id: str, key_ids: Iterable[UUID], erasure_id: UUID) -> int:
        ids = list(dict.fromkeys(key_ids))
        self.flush(tenant_id)
        count = self._table.destroy(check_tenant(tenant_id), ids, erasure_id)  # of none too: the count moves
        self.forget_cached(ids)
        return count

    def ever_made(self, tenant_id: str, kind: KeyKind, unit_id: UUID) -> bool:
        self.flush(tenant_id)
        return self._table.ever_made(check_tenant(tenant_id), kind, unit_id)

    def made_version(self, tenant_id: str, kind: KeyKind, version: int) -> bool:
        return self._table.made_version(check_tenant(tenant_id), kind, version)

    def subject_id(self, tenant_id: str, subject: str) -> UUID:
        return UUID(bytes=subject_ref(self._ref_key, check_tenant(tenant_id), subject)[:16])

    def forget_cached(self, key_ids: Iterable[UUID]) -> None:
        ids = set(key_ids)
        with self._lock:
            self._keys.drop(lambda key_id, _: key_id in ids)
            self._units.drop(lambda _, entry: entry[0].key_id in ids)

    def forget_every_cached(self) -> None:
        with self._lock:
            self._keys.drop(lambda *_: True)
            self._units.drop(lambda *_: True)

    def close(self) -> None:
        self._table.close()


class MemoryKeyRing(_Ring):
    """Keys in this process, lost with it (tests, ``PALIMPSEST_PERSISTENCE=memory``)."""

    def __init__(self, master: bytes, *, _table: MemoryTable | None = None) -> None:
        super().__init__(_table or MemoryTable(), master, cache_seconds=0)

    def reopened(self, master: bytes) -> MemoryKeyRing:
        """A ring over these rows under ``master``, as a process restarted with it finds them."""
        return MemoryKeyRing(master, _table=cast(MemoryTable, self._table))


class PostgresKeyRing(_Ring):
    """Keys in ``{schema}.erasure_keys``, read over a connection of the ring's own; raw keys are
    cached for ``cache_seconds``, so a key another process destroys may still open here that long."""

    def __init__(self, connect: Callable[[], psycopg.Connection[Any]], master: bytes,
                 cache_seconds: float = 5.0, *, schema: str = _DEFAULT_SCHEMA) -> None:
        super().__init__(PostgresTable(connect, schema), master, cache_seconds)
