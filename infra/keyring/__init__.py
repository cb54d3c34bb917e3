"""The key ring: a data key per erasure unit, sealed by the master key, kept outside the event log.

Erasure is crypto-shredding (decision 0001, DESIGN §7). The personal fields of an event are sealed
under the data key of their **erasure unit** — a card, a slot, an arbitration case, a proposal, a
conversation turn, or the tenant — and forgetting a unit destroys its key. Keys live in
``{event_schema}.erasure_keys``, beside the log, never in it: a key's material is wrapped by the
master key (AES-GCM, with the tenant and key id as associated data), and destroying a key nulls its
material, session and subject ref but keeps the row (ids, kind, times, which erasure) for the audit.
A trigger refuses to give a destroyed key material again.

A destroyed key is never re-made: a unit whose keys were destroyed is known by its destroyed row,
and asking for its data key raises :class:`UnitErasedError` (a unit being created is checked where
its new key is inserted: a trigger of the key table refuses a key of a unit that has a destroyed
row, in the transaction of the events sealed with it). A transaction that stores events also
checks that the keys they were sealed under are still live (:func:`insert_made_keys`), so a write
decided before an erasure and stored after it is refused whole, in any process. Both take the
tenant's erasure lock shared (:data:`ERASURE_LOCK`), which :meth:`KeyRing.destroy` holds while it
destroys: a write under way is stored first, and what it stored under the destroyed units is
destroyed after. Only the tenant's own key is made again after a tenant erasure: a tenant used
again starts anew.

An erasure finds its keys by what they protect (:meth:`KeyRing.find`): cards, slots, subjects
(stored only as a keyed hash, :func:`subject_ref`), ingested sessions, or the whole tenant.

``KeyRing`` is the port. ``PostgresKeyRing`` keeps the table, caching keys in the process for a few
seconds; ``MemoryKeyRing`` keeps its rows in the process (tests, ``PALIMPSEST_PERSISTENCE=memory``).
:func:`open_keyring` builds the configured one; :func:`load_master_key` finds the master key.

    PalimpsestError
    ├── MissingKeyError         no key of that id in that tenant (another tenant's key id included)
    ├── MasterKeyError          the master key is missing, malformed, or does not open the keys
    └── NotFoundError
        └── CardNotFoundError
            └── UnitErasedError an erasure destroyed the unit's keys: nothing is written under it

One concern a module: ``units`` (what a key protects; subjects as keyed hashes), ``wrapping`` (the
master key and what it seals), ``tables`` (the rows, the table port, the table in the process),
``postgres_table`` (the table in PostgreSQL and the statements that add keys), ``destruction``
(destroying keys, the erasure lock, the guards and the count of destructions), ``speakers`` (the
speaker a card key written from a turn names), ``ring`` (the rings, their cache and read-ahead)
and ``errors``. Every public name is imported from here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import Any, Protocol
from uuid import UUID

import psycopg
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from infra.keyring.destruction import DESTROYED_SEQUENCE, ERASURE_LOCK, destroyed_count
from infra.keyring.errors import (
    ERASED_SQLSTATE,
    MasterKeyError,
    MissingKeyError,
    UnitErasedError,
    erased_refusal,
)
from infra.keyring.postgres_table import KEY_TABLE, PostgresTable, ensure_key_table, insert_made_keys
from infra.keyring.ring import MemoryKeyRing, PostgresKeyRing
from infra.keyring.tables import MadeKeys
from infra.keyring.units import (
    KEY_KINDS,
    Found,
    KeyKind,
    Unit,
    fold_subject,
    subject_ref,
    subject_ref_key,
    tenant_unit,
)
from infra.keyring.wrapping import MASTER_KEY_FILE, make_master_file, parse_master_key, unwrap_key, wrap_key
from infra.postgres import admin_database, runtime_database
from infra.settings import Settings

__all__ = [
    "DESTROYED_SEQUENCE", "ERASED_SQLSTATE", "ERASURE_LOCK", "KEY_KINDS", "KEY_TABLE", "MASTER_KEY_FILE",
    "Found", "KeyKind", "KeyRing", "MadeKeys", "MasterKeyError", "MemoryKeyRing", "MissingKeyError",
    "PostgresKeyRing", "Unit", "UnitErasedError", "destroyed_count", "ensure_key_table", "erased_refusal",
    "fold_subject", "insert_made_keys", "load_master_key", "open_keyring", "parse_master_key",
    "subject_ref", "subject_ref_key", "tenant_unit", "unwrap_key", "wrap_key",
]


class KeyRing(Protocol):
    def data_key(self, tenant_id: str, unit: Unit, *, new: bool = False) -> tuple[UUID, bytes]:
        """A live key of the unit (kind, id): (key id, 32 raw bytes), made with the unit's refs
        when it has none (``new``: the unit is being created, so none is looked for); refs a live
        key lacks and ``unit`` has (slot, subject, session, cards) are filled in. A key made here
        is stored by :meth:`flush`, which must run before anything sealed with it is stored. Two
        processes making a key for one unit at once may make two: an erasure finds every key
        of a unit. UnitErasedError when an erasure destroyed the unit's keys (a ``new`` unit's
        when its key is stored)."""
        ...

    def sealing(self) -> contextlib.AbstractContextManager[set[UUID]]:
        """Inside, the stored keys :meth:`data_key` hands out in this thread are collected (their
        ids): the transaction that stores what was sealed with them checks they are still live."""
        ...

    def flush(self, tenant_id: str | None = None) -> None:
        """Store the keys made since the last flush (of ``tenant_id`` only, if given), in one
        statement."""
        ...

    def check_live(self, key_ids: Iterable[UUID]) -> None:
        """UnitErasedError unless every stored key of ``key_ids`` is live."""
        ...

    def take_made(self, tenant_id: str | Collection[str] | None = None) -> MadeKeys:
        """The keys made and not stored yet (of ``tenant_id`` — one or several — only, if given: a
        transaction writes those tenants' rows), handed over to be stored in the transaction of
        the events sealed with them (:func:`insert_made_keys`); :meth:`restore_made` if it fails."""
        ...

    def restore_made(self, made: MadeKeys, refused: UnitErasedError | None = None) -> None:
        """Hand back keys :meth:`take_made` took and could not store; with ``refused`` (the
        events' transaction refused a key of that erased unit), every one of them is dropped
        instead, from the cache too: the save is decided again and sealed anew, and no key of it
        is stored without its events."""
        ...

    def open_key(self, tenant_id: str, key_id: UUID) -> bytes | None:
        """The raw key; None once destroyed; MissingKeyError when the tenant has no such key."""
        ...

    def find(self, tenant_id: str, *, cards: Iterable[UUID] = (), slots: Iterable[UUID] = (),
             subjects: Iterable[str] = (), sessions: Iterable[str] = (), whole: bool = False,
             ) -> list[Found]:
        """Live keys covering any of: a card (its card key, or a key whose ``cards`` hold it), a
        slot (its slot key, or a key whose slot it is), a subject (the keys whose subject it is,
        everything their slots cover, of each turn they spoke the cards its key holds and the
        cards written from it, and the card keys naming the subject as their speaker — those
        cards alone, not their slots, and even once the turn's key is destroyed), a session, or
        the whole tenant. A card found so also brings
        the keys whose ``cards`` hold it."""
        ...

    def destroy(self, tenant_id: str, key_ids: Iterable[UUID], erasure_id: UUID) -> int:
        """Destroy those live keys of the tenant: how many were destroyed (0 the second time).
        Then, as :meth:`find` would select them, the live keys a write under way stored
        meanwhile: other keys of the same units, of cards of a destroyed slot, quoting a
        destroyed card (a shared ring waits for such writes: :data:`ERASURE_LOCK`). A shared ring
        then moves its count of destructions on, even when none was left
        (:data:`DESTROYED_SEQUENCE`)."""
        ...

    def ever_made(self, tenant_id: str, kind: KeyKind, unit_id: UUID) -> bool:
        """Whether the tenant ever had a key of that unit, live or destroyed."""
        ...

    def made_version(self, tenant_id: str, kind: KeyKind, version: int) -> bool:
        """Whether the tenant ever had a key of a unit of that kind whose id is a UUID of that
        ``version`` (slots opened under the unkeyed ids: 5; ``services.command.keyed_ids``)."""
        ...

    def subject_id(self, tenant_id: str, subject: str) -> UUID:
        """A subject as an id: its keyed hash, which names it without its name."""
        ...

    def forget_cached(self, key_ids: Iterable[UUID]) -> None:
        """Drop those keys from this process's cache (another process destroyed them)."""
        ...

    def forget_every_cached(self) -> None:
        """Drop every key from this process's cache (another process destroyed some)."""
        ...


# ----------------------------------------------------------------------------------------------
# the master key, and the configured ring


def load_master_key(settings: Settings, *, keys_exist: Callable[[], bool] | None = None) -> bytes:
    """The master key: ``PALIMPSEST_MASTER_KEY``, else the file ``master.key`` in the data folder.
    The file is made (random, mode 0600) only while the store holds nothing sealed — a new master
    key over sealed keys would open none of them — so with sealed keys and no key, MasterKeyError.
    ``keys_exist`` asks the store (default: the configured database, as the runtime role)."""
    if settings.master_key is not None:
        return parse_master_key(settings.master_key.get_secret_value(), "PALIMPSEST_MASTER_KEY")
    path = Path(settings.data_dir) / MASTER_KEY_FILE
    if path.exists():
        return parse_master_key(path.read_text(), str(path))
    if (keys_exist or (lambda: _store_has_keys(settings)))():
        raise MasterKeyError(f"this store's keys are sealed by a master key that is not here: set "
                             f"PALIMPSEST_MASTER_KEY to it, or put back {path}")
    return make_master_file(path)


def _store_has_keys(settings: Settings) -> bool:
    if settings.persistence == "memory":
        return False
    runtime = runtime_database(admin_database(settings), settings)
    return _sealed_in(PostgresTable(lambda: runtime.connect(autocommit=True), settings.event_schema))


def _sealed_in(table: PostgresTable) -> bool:
    try:
        return table.has_sealed()
    except psycopg.errors.UndefinedTable:  # not bootstrapped yet: nothing is sealed
        return False
    finally:
        table.close()


def open_keyring(settings: Settings) -> KeyRing:
    """The configured ring: in memory under a random master key (nothing outlives the process),
    or the PostgreSQL table as the runtime role — on a store already bootstrapped, as
    :func:`infra.eventlog.event_store_env` leaves it."""
    if settings.persistence == "memory":
        return MemoryKeyRing(AESGCM.generate_key(bit_length=256))
    runtime = runtime_database(admin_database(settings), settings)

    def connect() -> psycopg.Connection[Any]:
        return runtime.connect(autocommit=True)

    probe = PostgresTable(connect, settings.event_schema)  # connects only if asked
    master = load_master_key(settings, keys_exist=lambda: _sealed_in(probe))
    return PostgresKeyRing(connect, master, schema=settings.event_schema)
