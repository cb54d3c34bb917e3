"""The key ring: a data key per erasure unit, sealed by the master key, kept outside the event log.

Erasure is crypto-shredding (decision 0001, DESIGN §7). The personal fields of an event are sealed
under the data key of their **erasure unit** — a card, a slot, an arbitration case, a proposal, a
conversation turn, or the tenant — and forgetting a unit destroys its key. Keys live in
``{event_schema}.erasure_keys``, beside the log, never in it: a key's material is wrapped by the
master key (AES-GCM, with the tenant and key id as associated data), and destroying a key nulls its
material, session and subject ref but keeps the row (ids, kind, times, which erasure) for the audit.
A trigger refuses to give a destroyed key material again.

An erasure finds its keys by what they protect (:meth:`KeyRing.find`): cards, slots, subjects
(stored only as a keyed hash, :func:`subject_ref`), ingested sessions, or the whole tenant.

``KeyRing`` is the port. ``PostgresKeyRing`` keeps the table, caching keys in the process for a few
seconds; ``MemoryKeyRing`` keeps its rows in the process (tests, ``PALIMPSEST_PERSISTENCE=memory``).
:func:`open_keyring` builds the configured one; :func:`load_master_key` finds the master key.

    PalimpsestError
    ├── MissingKeyError     no key of that id in that tenant (another tenant's key id included)
    └── MasterKeyError      the master key is missing, malformed, or does not open the keys
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import logging
import os
import tempfile
import threading
import time
import unicodedata
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Generic, Literal, Protocol, TypeVar, cast, get_args
from uuid import UUID, uuid4, uuid5

import psycopg
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from psycopg import sql

from domain.base import NAMESPACE
from domain.errors import PalimpsestError
from domain.values import check_tenant
from infra.postgres import admin_database, runtime_database
from infra.settings import Settings

log = logging.getLogger(__name__)

KeyKind = Literal["card", "slot", "case", "proposal", "turn", "tenant"]
KEY_KINDS: tuple[str, ...] = get_args(KeyKind)
KEY_TABLE = "erasure_keys"
#: Keys made and not yet stored (opaque to callers: rows of the key table).
MadeKeys = Sequence[object]
MASTER_KEY_FILE = "master.key"

_TENANT_UNITS = uuid5(NAMESPACE, "erasure unit of a tenant")
#: The row that tells which master key the store's keys are sealed by (tenant '' is no tenant).
_CHECK_ID = uuid5(NAMESPACE, "master key check")
_CHECK_TEXT = b"palimpsest master key check"
_WRONG_MASTER = ("the master key does not open this store's keys: "
                 "set PALIMPSEST_MASTER_KEY to the key it was made with")
_DEFAULT_SCHEMA: str = Settings.model_fields["event_schema"].default


@dataclass(frozen=True)
class Unit:
    """What a data key protects, and what an erasure finds it by."""

    kind: KeyKind
    #: The card / slot / case / proposal / ingestion (turn) id; for "tenant": tenant_unit(tenant_id).
    id: UUID
    #: A card's or case's slot, when known.
    slot_id: UUID | None = None
    #: A slot's subject, in plain; stored only as a keyed hash (:func:`subject_ref`).
    subject: str | None = field(default=None, repr=False)
    #: The ingested session (a caller's session id) a card or turn came from.
    session: str | None = None
    #: Other cards whose text the key protects (a proposal's src/dst; a turn's event card).
    cards: tuple[UUID, ...] = ()


@dataclass(frozen=True)
class Found:
    """A live key an erasure selected."""

    key_id: UUID
    kind: KeyKind
    unit_id: UUID
    slot_id: UUID | None


def tenant_unit(tenant_id: str) -> UUID:
    """The unit id of the tenant-wide key of ``tenant_id``."""
    return uuid5(_TENANT_UNITS, tenant_id)


class MissingKeyError(PalimpsestError):
    """No key of that id in that tenant: never made there (another tenant's key id included)."""

    def __init__(self, tenant_id: str, key_id: UUID) -> None:
        super().__init__(f"no erasure key {key_id} in tenant {tenant_id!r}")
        self.tenant_id = tenant_id
        self.key_id = key_id


class MasterKeyError(PalimpsestError):
    """The master key is missing, malformed, or not the one the store's keys were sealed by."""


class KeyRing(Protocol):
    def data_key(self, tenant_id: str, unit: Unit, *, new: bool = False) -> tuple[UUID, bytes]:
        """A live key of the unit (kind, id): (key id, 32 raw bytes), made with the unit's refs
        when it has none (``new``: the unit is being created, so none is looked for); refs a live
        key lacks and ``unit`` has (slot, subject, session, cards) are filled in. A key made here
        is stored by :meth:`flush`, which must run before anything sealed with it is stored. Two
        processes making a key for one unit at once may make two: an erasure finds every key
        of a unit."""
        ...

    def flush(self) -> None:
        """Store the keys made since the last flush (one statement)."""
        ...

    def take_made(self) -> MadeKeys:
        """The keys made and not stored yet, handed over to be stored in the transaction of the
        events sealed with them (:func:`insert_made_keys`); :meth:`restore_made` if it fails."""
        ...

    def restore_made(self, made: MadeKeys) -> None:
        ...

    def open_key(self, tenant_id: str, key_id: UUID) -> bytes | None:
        """The raw key; None once destroyed; MissingKeyError when the tenant has no such key."""
        ...

    def find(self, tenant_id: str, *, cards: Iterable[UUID] = (), slots: Iterable[UUID] = (),
             subjects: Iterable[str] = (), sessions: Iterable[str] = (), whole: bool = False,
             ) -> list[Found]:
        """Live keys covering any of: a card (its card key, or a key whose ``cards`` hold it), a
        slot (its slot key, or a key whose slot it is), a subject (the keys whose subject it is,
        and everything their slots cover), a session, or the whole tenant. A card found so also
        brings the keys whose ``cards`` hold it."""
        ...

    def destroy(self, tenant_id: str, key_ids: Iterable[UUID], erasure_id: UUID) -> int:
        """Destroy those live keys of the tenant: how many were destroyed (0 the second time).
        A shared ring then moves its count of destructions on, even when none was left
        (:data:`DESTROYED_SEQUENCE`)."""
        ...

    def ever_made(self, tenant_id: str, kind: KeyKind, unit_id: UUID) -> bool:
        """Whether the tenant ever had a key of that unit, live or destroyed."""
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
# wrapping and subject refs


def wrap_key(master: bytes, tenant_id: str, key_id: UUID, key: bytes) -> bytes:
    """``key`` sealed by the master key: a 12-byte random nonce, then AES-GCM's ciphertext and tag;
    the tenant and key id are associated data, so a row moved to another tenant or id opens not."""
    nonce = os.urandom(12)
    return nonce + AESGCM(master).encrypt(nonce, key, f"{tenant_id}|{key_id}".encode())


def unwrap_key(master: bytes, tenant_id: str, key_id: UUID, wrapped: bytes) -> bytes:
    try:
        return AESGCM(master).decrypt(wrapped[:12], wrapped[12:], f"{tenant_id}|{key_id}".encode())
    except InvalidTag:
        raise MasterKeyError(f"erasure key {key_id} of tenant {tenant_id!r} does not open: "
                             f"{_WRONG_MASTER}") from None


def subject_ref_key(master: bytes) -> bytes:
    """The key subject refs are made with, derived from the master key."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                info=b"palimpsest subject ref").derive(master)


def fold_subject(subject: str) -> str:
    """NFKC, case folded, runs of white space as one space: how a subject is compared."""
    return " ".join(unicodedata.normalize("NFKC", subject).casefold().split())


def subject_ref(ref_key: bytes, tenant_id: str, subject: str) -> bytes:
    """A keyed hash of a tenant's subject: equal for equal folded subjects, and nothing else."""
    text = f"{tenant_id}\x1f{fold_subject(subject)}".encode()
    return hmac.new(ref_key, text, hashlib.sha256).digest()


# ----------------------------------------------------------------------------------------------
# rows, and the tables that keep them


@dataclass(frozen=True)
class _Row:
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

    def lacks(self, known: _Row) -> bool:
        """Whether ``known`` (this unit as a caller knows it now) has refs this row lacks."""
        return ((self.slot_id is None and known.slot_id is not None)
                or (self.subject_ref is None and known.subject_ref is not None)
                or (self.session is None and known.session is not None)
                or not set(known.cards) <= set(self.cards))

    def filled(self, known: _Row) -> _Row:
        return replace(
            self,
            slot_id=known.slot_id if self.slot_id is None else self.slot_id,
            subject_ref=known.subject_ref if self.subject_ref is None else self.subject_ref,
            session=known.session if self.session is None else self.session,
            cards=self.cards + tuple(dict.fromkeys(c for c in known.cards if c not in self.cards)),
        )

    def found(self) -> Found:
        return Found(self.key_id, cast(KeyKind, self.kind), self.unit_id, self.slot_id)


@dataclass(frozen=True)
class _Selection:
    """What one lookup of live keys matches (any of it)."""

    cards: frozenset[UUID] = frozenset()
    slots: frozenset[UUID] = frozenset()
    refs: frozenset[bytes] = frozenset()
    sessions: frozenset[str] = frozenset()
    whole: bool = False

    def covers(self, row: _Row) -> bool:
        return (self.whole or (row.kind == "card" and row.unit_id in self.cards)
                or not self.cards.isdisjoint(row.cards)
                or row.slot_id in self.slots or (row.kind == "slot" and row.unit_id in self.slots)
                or row.subject_ref in self.refs or row.session in self.sessions)


class _KeyTable(ABC):
    """Where a ring's rows live. Every method may run twice (a retry after a lost connection)."""

    @abstractmethod
    def live(self, tenant_id: str, kind: str, unit_id: UUID) -> _Row | None: ...

    @abstractmethod
    def add(self, row: _Row) -> None:
        """Add ``row`` (a unit may have several live keys)."""

    def add_many(self, rows: list[_Row]) -> None:
        for row in rows:
            self.add(row)

    def material_around(self, tenant_id: str, key_id: UUID, ahead: int) -> dict[UUID, bytes | None]:
        """The wrapped key of ``key_id``, and of others likely opened next."""
        return {key_id: self.material(tenant_id, key_id)}

    @abstractmethod
    def fill(self, known: _Row) -> None:
        """Fill in the refs the live row ``known.key_id`` lacks; never replace one."""

    @abstractmethod
    def material(self, tenant_id: str, key_id: UUID) -> bytes | None:
        """The wrapped key, None once destroyed; MissingKeyError when there is no such row."""

    @abstractmethod
    def matching(self, tenant_id: str, selection: _Selection) -> list[Found]: ...

    @abstractmethod
    def destroy(self, tenant_id: str, key_ids: list[UUID], erasure_id: UUID) -> int: ...

    @abstractmethod
    def ever_made(self, tenant_id: str, kind: str, unit_id: UUID) -> bool: ...

    @abstractmethod
    def sample(self) -> _Row | None:
        """Any live data key of any tenant."""

    def has_sealed(self) -> bool:
        """Whether anything here is sealed by a master key (a live key, or the check)."""
        return self.sample() is not None or self.check() is not None

    def check(self) -> bytes | None:
        with contextlib.suppress(MissingKeyError):
            return self.material("", _CHECK_ID)
        return None

    @abstractmethod
    def close(self) -> None: ...


class _MemoryTable(_KeyTable):
    def __init__(self) -> None:
        self._rows: dict[UUID, _Row] = {}
        self._live_ids: dict[tuple[str, str, UUID], list[UUID]] = {}  # (tenant, kind, unit) → key ids
        self._lock = threading.Lock()
        _after_fork(self, "_restart")

    def _restart(self) -> None:
        self._lock = threading.Lock()

    def live(self, tenant_id: str, kind: str, unit_id: UUID) -> _Row | None:
        key_ids = self._live_ids.get((tenant_id, kind, unit_id))
        return self._rows[key_ids[-1]] if key_ids else None

    def add(self, row: _Row) -> None:
        with self._lock:
            self._rows[row.key_id] = row
            if row.material is not None:
                self._live_ids.setdefault((row.tenant_id, row.kind, row.unit_id), []).append(row.key_id)

    def fill(self, known: _Row) -> None:
        with self._lock:
            row = self._rows[known.key_id]
            if row.material is not None:
                self._rows[row.key_id] = row.filled(known)

    def material(self, tenant_id: str, key_id: UUID) -> bytes | None:
        row = self._rows.get(key_id)
        if row is None or row.tenant_id != tenant_id:
            raise MissingKeyError(tenant_id, key_id)
        return row.material

    def matching(self, tenant_id: str, selection: _Selection) -> list[Found]:
        with self._lock:
            return [r.found() for r in self._rows.values() if r.tenant_id == tenant_id
                    and r.material is not None and selection.covers(r)]

    def destroy(self, tenant_id: str, key_ids: list[UUID], erasure_id: UUID) -> int:
        with self._lock:
            doomed = [r for r in map(self._rows.get, key_ids)
                      if r is not None and r.tenant_id == tenant_id and r.material is not None]
            for row in doomed:
                self._live_ids[(row.tenant_id, row.kind, row.unit_id)].remove(row.key_id)
                self._rows[row.key_id] = replace(row, material=None, subject_ref=None, session=None,
                                                 erasure_id=erasure_id)
        return len(doomed)

    def ever_made(self, tenant_id: str, kind: str, unit_id: UUID) -> bool:
        with self._lock:
            return any(r.tenant_id == tenant_id and r.kind == kind and r.unit_id == unit_id
                       for r in self._rows.values())

    def sample(self) -> _Row | None:
        with self._lock:
            return next((r for r in self._rows.values()
                         if r.material is not None and r.key_id != _CHECK_ID), None)

    def close(self) -> None:
        pass


_DDL = """
CREATE TABLE IF NOT EXISTS {table} (
    tenant_id text NOT NULL,
    key_id uuid PRIMARY KEY,
    kind text NOT NULL,
    unit_id uuid NOT NULL,
    slot_id uuid,
    subject_ref bytea,
    session text,
    cards uuid[] NOT NULL DEFAULT '{{}}',
    material bytea,
    created_at timestamptz NOT NULL DEFAULT now(),
    destroyed_at timestamptz,
    erasure_id uuid,
    seq bigint GENERATED ALWAYS AS IDENTITY,
    CHECK ((material IS NULL) = (destroyed_at IS NOT NULL))
);
CREATE INDEX IF NOT EXISTS erasure_keys_unit ON {table} (tenant_id, kind, unit_id)
    WHERE material IS NOT NULL;
CREATE INDEX IF NOT EXISTS erasure_keys_made ON {table} (tenant_id, seq);
CREATE INDEX IF NOT EXISTS erasure_keys_slot ON {table} (tenant_id, slot_id)
    WHERE material IS NOT NULL AND slot_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS erasure_keys_subject ON {table} (tenant_id, subject_ref)
    WHERE material IS NOT NULL AND subject_ref IS NOT NULL;
CREATE INDEX IF NOT EXISTS erasure_keys_session ON {table} (tenant_id, session)
    WHERE material IS NOT NULL AND session IS NOT NULL;
CREATE INDEX IF NOT EXISTS erasure_keys_cards ON {table} USING gin (cards)
    WHERE material IS NOT NULL;
CREATE OR REPLACE FUNCTION {schema}.palimpsest_keep_destroyed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.material IS NULL OR NEW.material IS DISTINCT FROM OLD.material AND NEW.material IS NOT NULL THEN
        RAISE EXCEPTION 'erasure key %: a destroyed key stays destroyed, a live one keeps its material',
            OLD.key_id USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS palimpsest_keep_destroyed ON {table};
CREATE TRIGGER palimpsest_keep_destroyed BEFORE UPDATE ON {table}
    FOR EACH ROW EXECUTE FUNCTION {schema}.palimpsest_keep_destroyed();
REVOKE ALL ON {table} FROM {role};
GRANT SELECT, INSERT ON {table} TO {role};
GRANT UPDATE (slot_id, subject_ref, session, cards, material, destroyed_at, erasure_id)
    ON {table} TO {role};
CREATE SEQUENCE IF NOT EXISTS {destroyed};
GRANT USAGE, SELECT ON SEQUENCE {destroyed} TO {role};
"""

#: Moved on by every :meth:`KeyRing.destroy`, once its keys are destroyed: a process that finds it
#: moved since it last looked drops what it decoded before (:func:`destroyed_count`).
DESTROYED_SEQUENCE = "erasure_keys_destroyed"


def destroyed_count(schema: str) -> sql.Composed:
    """An expression: how many times keys of ``schema``'s ring were destroyed (0 before the first)."""
    return sql.SQL("(SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {})").format(
        sql.Identifier(schema, DESTROYED_SEQUENCE))


def ensure_key_table(conn: psycopg.Connection[Any], schema: str, runtime_role: str) -> None:
    """Create ``{schema}.erasure_keys``, the indexes :meth:`KeyRing.find` looks up by, the
    trigger that keeps a destroyed key destroyed and the sequence each destruction moves on; let
    the runtime role read it, add rows and update the columns a ring changes (never delete:
    destroying is nulling). Idempotent; the bootstrap runs it as the administrator."""
    conn.execute(sql.SQL(_DDL).format(
        schema=sql.Identifier(schema), table=sql.Identifier(schema, KEY_TABLE),
        destroyed=sql.Identifier(schema, DESTROYED_SEQUENCE), role=sql.Identifier(runtime_role)))


_COLUMNS = "key_id, kind, unit_id, slot_id, subject_ref, session, cards, material"
#: Rows added in one statement, whatever their number.
_INSERT = (
    f"INSERT INTO {{table}} (tenant_id, {_COLUMNS}) "
    "SELECT t, k, kd, u, sl, r, se, c::uuid[], m FROM unnest("
    "%(tenant)s::text[], %(key)s::uuid[], %(kind)s::text[], %(unit)s::uuid[], "
    "%(slot)s::uuid[], %(ref)s::bytea[], %(session)s::text[], %(cards)s::text[], "
    "%(material)s::bytea[]) AS made(t, k, kd, u, sl, r, se, c, m) "
    "ON CONFLICT (key_id) DO NOTHING")


def _insert_params(rows: list[_Row]) -> dict[str, list[Any]]:
    return {"tenant": [r.tenant_id for r in rows], "key": [r.key_id for r in rows],
            "kind": [r.kind for r in rows], "unit": [r.unit_id for r in rows],
            "slot": [r.slot_id for r in rows], "ref": [r.subject_ref for r in rows],
            "session": [r.session for r in rows],
            "cards": ["{" + ",".join(map(str, r.cards)) + "}" for r in rows],
            "material": [r.material for r in rows]}


def insert_made_keys(cursor: psycopg.Cursor[Any], schema: str, made: MadeKeys) -> None:
    """Add the keys ``made`` (:meth:`KeyRing.take_made`) with ``cursor``: in the transaction that
    stores the events sealed with them."""
    rows = cast(list[_Row], made)
    if rows:
        cursor.execute(sql.SQL(_INSERT).format(table=sql.Identifier(schema, KEY_TABLE)),  # type: ignore[arg-type]
                       _insert_params(rows))
#: Keys fetched at once when one is not cached: those the tenant made about when it was made.
_READ_AHEAD = 512
_ARMS = {  # what _Selection's fields match, one indexed lookup each
    "whole": "true",
    "cards": "kind = 'card' AND unit_id = ANY(%(cards)s::uuid[])",
    "held": "cards && %(cards)s::uuid[]",
    "slots": "slot_id = ANY(%(slots)s::uuid[])",
    "slot_units": "kind = 'slot' AND unit_id = ANY(%(slots)s::uuid[])",
    "refs": "subject_ref = ANY(%(refs)s::bytea[])",
    "sessions": "session = ANY(%(sessions)s::text[])",
}


class _PostgresTable(_KeyTable):
    """``{schema}.erasure_keys`` over one autocommit connection of its own, opened when first
    needed and again after it broke; a forked child opens its own."""

    def __init__(self, connect: Callable[[], psycopg.Connection[Any]], schema: str) -> None:
        self._connect = connect
        self._table = sql.Identifier(schema, KEY_TABLE)
        self._destroyed = sql.Identifier(schema, DESTROYED_SEQUENCE).as_string(None)
        self._restart()
        _after_fork(self, "_restart")

    def _restart(self) -> None:
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None  # in a child: the parent's, left alone

    def _run(self, query: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        statement = sql.SQL(query).format(table=self._table)  # type: ignore[arg-type]
        with self._lock:
            for attempt in (1, 2):
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect()
                    self._conn.autocommit = True
                conn = self._conn
                try:
                    cursor = conn.execute(statement, params)
                    return cursor.fetchall() if cursor.description else []
                except psycopg.OperationalError:
                    if attempt == 2 or not conn.broken:
                        raise
                    self._conn = None
        raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
            self._conn = None

    def _row(self, tenant_id: str, values: tuple[Any, ...]) -> _Row:
        key_id, kind, unit_id, slot_id, ref, session, cards, material = values
        return _Row(tenant_id, key_id, kind, unit_id, slot_id, ref, session, tuple(cards), material)

    def live(self, tenant_id: str, kind: str, unit_id: UUID) -> _Row | None:
        rows = self._run(f"SELECT {_COLUMNS} FROM {{table}} WHERE tenant_id = %(tenant)s "
                         "AND kind = %(kind)s AND unit_id = %(unit)s AND material IS NOT NULL",
                         {"tenant": tenant_id, "kind": kind, "unit": unit_id})
        return self._row(tenant_id, rows[0]) if rows else None

    def add(self, row: _Row) -> None:
        self.add_many([row])

    def add_many(self, rows: list[_Row]) -> None:
        self._run(_INSERT, _insert_params(rows))

    def material_around(self, tenant_id: str, key_id: UUID, ahead: int) -> dict[UUID, bytes | None]:
        """The material of ``key_id`` and of the keys the tenant made just before and after it:
        a replay opens keys in about the order they were made."""
        rows = self._run(
            "SELECT key_id, material FROM {table} WHERE tenant_id = %(tenant)s AND seq >= "
            "(SELECT seq FROM {table} WHERE tenant_id = %(tenant)s AND key_id = %(key)s) - %(behind)s "
            "ORDER BY seq LIMIT %(limit)s",
            {"tenant": tenant_id, "key": key_id, "behind": ahead // 8, "limit": ahead})
        found = {row[0]: row[1] for row in rows}
        if key_id not in found:
            found[key_id] = self.material(tenant_id, key_id)  # beyond the window; or MissingKeyError
        return found

    def fill(self, known: _Row) -> None:
        self._run(
            "UPDATE {table} SET slot_id = coalesce(slot_id, %(slot)s::uuid), "
            "subject_ref = coalesce(subject_ref, %(ref)s::bytea), "
            "session = coalesce(session, %(session)s::text), "
            "cards = cards || ARRAY(SELECT DISTINCT c FROM unnest(%(cards)s::uuid[]) AS c "
            "WHERE c <> ALL(cards)) "
            "WHERE tenant_id = %(tenant)s AND key_id = %(key)s AND material IS NOT NULL",
            {"tenant": known.tenant_id, "key": known.key_id, "slot": known.slot_id,
             "ref": known.subject_ref, "session": known.session, "cards": list(known.cards)})

    def material(self, tenant_id: str, key_id: UUID) -> bytes | None:
        rows = self._run("SELECT material FROM {table} WHERE tenant_id = %(tenant)s AND key_id = %(key)s",
                         {"tenant": tenant_id, "key": key_id})
        if not rows:
            raise MissingKeyError(tenant_id, key_id)
        return cast(bytes | None, rows[0][0])

    def matching(self, tenant_id: str, selection: _Selection) -> list[Found]:
        wanted = {"whole": selection.whole, "cards": selection.cards, "held": selection.cards,
                  "slots": selection.slots, "slot_units": selection.slots, "refs": selection.refs,
                  "sessions": selection.sessions}
        arms = [_ARMS[name] for name, value in wanted.items() if value]
        if not arms:
            return []
        query = " UNION ".join(
            "SELECT key_id, kind, unit_id, slot_id FROM {table} WHERE tenant_id = %(tenant)s "
            f"AND material IS NOT NULL AND {arm}" for arm in arms)
        params = {"tenant": tenant_id, "cards": list(selection.cards), "slots": list(selection.slots),
                  "refs": list(selection.refs), "sessions": list(selection.sessions)}
        return [Found(*values) for values in self._run(query, params)]

    def destroy(self, tenant_id: str, key_ids: list[UUID], erasure_id: UUID) -> int:
        destroyed = len(self._run(
            "UPDATE {table} SET material = NULL, subject_ref = NULL, session = NULL, "
            "destroyed_at = now(), erasure_id = %(erasure)s WHERE tenant_id = %(tenant)s "
            "AND key_id = ANY(%(keys)s::uuid[]) AND material IS NOT NULL RETURNING key_id",
            {"tenant": tenant_id, "keys": key_ids, "erasure": erasure_id}))
        # Once the keys are gone (committed), never before: a process that sees the count move
        # and decodes again must find them destroyed. Moved on even when none was left (an
        # erasure run again after a crash right here), so no process misses one.
        try:
            self._run("SELECT nextval(%(sequence)s::regclass)", {"sequence": self._destroyed})
        except psycopg.errors.UndefinedTable:
            log.warning("the store lacks %s (bootstrapped by an older release): other processes "
                        "learn of this erasure only as their caches expire; run `palimpsest "
                        "init-db`", DESTROYED_SEQUENCE)
        return destroyed

    def ever_made(self, tenant_id: str, kind: str, unit_id: UUID) -> bool:
        return bool(self._run("SELECT 1 FROM {table} WHERE tenant_id = %(tenant)s AND kind = %(kind)s "
                              "AND unit_id = %(unit)s LIMIT 1",
                              {"tenant": tenant_id, "kind": kind, "unit": unit_id}))

    def sample(self) -> _Row | None:
        rows = self._run(f"SELECT tenant_id, {_COLUMNS} FROM {{table}} "
                         "WHERE material IS NOT NULL AND key_id <> %(check)s LIMIT 1", {"check": _CHECK_ID})
        return self._row(rows[0][0], rows[0][1:]) if rows else None


# ----------------------------------------------------------------------------------------------
# the rings

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


def _after_fork(owner: object, method: str) -> None:
    """Call ``owner.<method>()`` in a forked child, for as long as ``owner`` lives: a lock another
    thread held, a cache or a connection of the parent's must not be used there."""
    ref = weakref.ref(owner)

    def restart() -> None:
        alive = ref()
        if alive is not None:
            getattr(alive, method)()

    os.register_at_fork(after_in_child=restart)


class _Ring:
    """What both rings do, over their table; a cache of raw keys in the process."""

    def __init__(self, table: _KeyTable, master: bytes, cache_seconds: float) -> None:
        if len(master) != 32:
            raise MasterKeyError("the master key must be 32 bytes")
        self._table = table
        self._master = master
        self._ref_key = subject_ref_key(master)
        self._cache_seconds = cache_seconds
        self._restart()
        _after_fork(self, "_restart")
        self.check_master()

    def _restart(self) -> None:
        self._lock = threading.Lock()
        self._keys: _Cache[UUID, tuple[str, bytes | None]] = _Cache(self._cache_seconds)
        self._units: _Cache[tuple[str, str, UUID], tuple[_Row, bytes]] = _Cache(self._cache_seconds)
        #: Keys made and not yet stored, by id (:meth:`flush`); the memory ring stores at once.
        self._pending: dict[UUID, _Row] = {}

    def check_master(self) -> None:
        """MasterKeyError unless the master key is the one this store's keys are sealed by; a
        store with no check yet gets one (after one of its live keys, if any, opened)."""
        if self._table.check() is None:
            sample = self._table.sample()
            if sample is not None and sample.material is not None:
                unwrap_key(self._master, sample.tenant_id, sample.key_id, sample.material)
            sealed = wrap_key(self._master, "", _CHECK_ID, _CHECK_TEXT)
            self._table.add(_Row("", _CHECK_ID, "check", _CHECK_ID, material=sealed))
        check = self._table.check()
        try:
            opens = check is not None and unwrap_key(self._master, "", _CHECK_ID, check) == _CHECK_TEXT
        except MasterKeyError:
            opens = False
        if not opens:
            raise MasterKeyError(_WRONG_MASTER)

    def data_key(self, tenant_id: str, unit: Unit, *, new: bool = False) -> tuple[UUID, bytes]:
        known = self._known(check_tenant(tenant_id), unit)
        unit_key = (tenant_id, unit.kind, unit.id)
        with self._lock:
            cached = self._units.get(unit_key)
        if cached is not None and not cached[0].lacks(known):
            return cached[0].key_id, cached[1]
        row = None if new or cached is not None else self._table.live(tenant_id, unit.kind, unit.id)
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
        return row.key_id, raw

    def _made(self, row: _Row) -> None:
        if self._cache_seconds <= 0:  # nothing cached: it must be readable at once
            self._table.add(row)
            return
        with self._lock:
            self._pending[row.key_id] = row

    def _refill(self, known: _Row) -> None:
        with self._lock:
            pending = self._pending.get(known.key_id)
            if pending is not None:
                self._pending[known.key_id] = pending.filled(known)
                return
        self._table.fill(known)

    def take_made(self) -> MadeKeys:
        with self._lock:
            rows, self._pending = list(self._pending.values()), {}
        return rows

    def restore_made(self, made: MadeKeys) -> None:
        with self._lock:
            self._pending = {**{row.key_id: row for row in cast(list[_Row], made)}, **self._pending}

    def flush(self) -> None:
        made = self.take_made()
        if not made:
            return
        try:
            self._table.add_many(cast(list[_Row], made))
        except BaseException:
            self.restore_made(made)  # stored by the next flush; nothing sealed with them was stored
            raise

    def _known(self, tenant_id: str, unit: Unit) -> _Row:
        if unit.kind not in KEY_KINDS:
            raise ValueError(f"unknown erasure unit kind {unit.kind!r}")
        ref = None if unit.subject is None else subject_ref(self._ref_key, tenant_id, unit.subject)
        return _Row(tenant_id, uuid4(), unit.kind, unit.id, unit.slot_id, ref, unit.session,
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
        self.flush()  # keys made here are found like the others
        refs = frozenset(subject_ref(self._ref_key, tenant_id, s) for s in subjects)
        named = set(slots)
        if refs and not whole:  # a subject's keys, and their slots
            for key in self._table.matching(tenant_id, _Selection(refs=refs)):
                slot = key.unit_id if key.kind == "slot" else key.slot_id
                if slot is not None:
                    named.add(slot)
        selection = _Selection(frozenset(cards), frozenset(named), refs, frozenset(sessions), whole)
        found = set(self._table.matching(tenant_id, selection))
        more = {f.unit_id for f in found if f.kind == "card"} - selection.cards
        if more and not whole:  # the keys that also protect a card found
            found |= set(self._table.matching(tenant_id, _Selection(cards=frozenset(more))))
        return sorted(found, key=lambda f: (f.kind, str(f.unit_id)))

    def destroy(self, tenant_id: str, key_ids: Iterable[UUID], erasure_id: UUID) -> int:
        ids = list(dict.fromkeys(key_ids))
        self.flush()
        count = self._table.destroy(check_tenant(tenant_id), ids, erasure_id)  # of none too: the count moves
        self.forget_cached(ids)
        return count

    def ever_made(self, tenant_id: str, kind: KeyKind, unit_id: UUID) -> bool:
        self.flush()
        return self._table.ever_made(check_tenant(tenant_id), kind, unit_id)

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

    def __init__(self, master: bytes, *, _table: _MemoryTable | None = None) -> None:
        super().__init__(_table or _MemoryTable(), master, cache_seconds=0)

    def reopened(self, master: bytes) -> MemoryKeyRing:
        """A ring over these rows under ``master``, as a process restarted with it finds them."""
        return MemoryKeyRing(master, _table=cast(_MemoryTable, self._table))


class PostgresKeyRing(_Ring):
    """Keys in ``{schema}.erasure_keys``, read over a connection of the ring's own; raw keys are
    cached for ``cache_seconds``, so a key another process destroys may still open here that long."""

    def __init__(self, connect: Callable[[], psycopg.Connection[Any]], master: bytes,
                 cache_seconds: float = 5.0, *, schema: str = _DEFAULT_SCHEMA) -> None:
        super().__init__(_PostgresTable(connect, schema), master, cache_seconds)


# ----------------------------------------------------------------------------------------------
# the master key, and the configured ring


def parse_master_key(text: str, source: str) -> bytes:
    """32 bytes from base64 (standard or URL-safe) or 64 hex digits; MasterKeyError naming
    ``source`` (never the text) otherwise."""
    text = text.strip()
    if len(text) == 64:
        with contextlib.suppress(ValueError):
            return bytes.fromhex(text)
    try:
        key = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    except binascii.Error:
        key = b""
    if len(key) != 32:
        raise MasterKeyError(f"{source} must be a 32-byte key: base64 (44 characters) or 64 hex digits")
    return key


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
    return _make_master_file(path)


def _make_master_file(path: Path) -> bytes:
    """A new master key in ``path`` (0600), written whole before it appears; if another process
    made the file first, its key."""
    path.parent.mkdir(parents=True, exist_ok=True)
    key = AESGCM.generate_key(bit_length=256)
    handle, draft = tempfile.mkstemp(dir=path.parent, prefix=f".{MASTER_KEY_FILE}.")  # mode 0600
    try:
        with os.fdopen(handle, "w") as file:
            file.write(base64.b64encode(key).decode() + "\n")
            file.flush()
            os.fsync(file.fileno())
        os.link(draft, path)
    except FileExistsError:
        return parse_master_key(path.read_text(), str(path))
    finally:
        os.unlink(draft)
    return key


def _store_has_keys(settings: Settings) -> bool:
    if settings.persistence == "memory":
        return False
    runtime = runtime_database(admin_database(settings), settings)
    return _sealed_in(_PostgresTable(lambda: runtime.connect(autocommit=True), settings.event_schema))


def _sealed_in(table: _PostgresTable) -> bool:
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

    probe = _PostgresTable(connect, settings.event_schema)  # connects only if asked
    master = load_master_key(settings, keys_exist=lambda: _sealed_in(probe))
    return PostgresKeyRing(connect, master, schema=settings.event_schema)
