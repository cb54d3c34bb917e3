"""The key table in PostgreSQL, ``{schema}.erasure_keys``: its DDL (the guards and the sequence are
:mod:`infra.keyring.destruction`'s), the statements that add keys — over a ring's own connection,
or in the transaction of the events sealed with them (:func:`insert_made_keys`) — and the table a
``PostgresKeyRing`` reads and writes through."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable
from typing import Any, cast
from uuid import UUID

import psycopg
from psycopg import sql

from infra.keyring.destruction import (
    DESTROYED_SEQUENCE,
    ERASURE_LOCK,
    GUARDS_DDL,
    SEQUENCE_DDL,
    destroy_keys,
)
from infra.keyring.errors import MissingKeyError, erased_refusal
from infra.keyring.speakers import SAID_BY_DDL, speaker_of
from infra.keyring.tables import KeyTable, MadeKeys, Row, Selection, after_fork, speakers_among
from infra.keyring.units import Found
from infra.keyring.wrapping import CHECK_ID
from infra.tenancy import apply_tenant

KEY_TABLE = "erasure_keys"

#: The table and the indexes :meth:`KeyRing.find` looks up by.
_TABLE_DDL = """
CREATE TABLE IF NOT EXISTS {table} (
    tenant_id text NOT NULL,
    key_id uuid PRIMARY KEY,
    kind text NOT NULL,
    unit_id uuid NOT NULL,
    slot_id uuid,
    subject_ref bytea,
    session text,
    cards uuid[] NOT NULL DEFAULT '{{}}',
    said_by bytea,
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
CREATE INDEX IF NOT EXISTS erasure_keys_erased ON {table} (tenant_id, kind, unit_id)
    WHERE material IS NULL;
"""

#: What the runtime role may do with the table (never delete: destroying is nulling).
_GRANTS_DDL = """\
REVOKE ALL ON {table} FROM {role};
GRANT SELECT, INSERT ON {table} TO {role};
GRANT UPDATE (slot_id, subject_ref, session, cards, said_by, material, destroyed_at, erasure_id)
    ON {table} TO {role};
"""


def ensure_key_table(conn: psycopg.Connection[Any], schema: str, runtime_role: str) -> None:
    """Create ``{schema}.erasure_keys``, the indexes :meth:`KeyRing.find` looks up by, the
    trigger that keeps a destroyed key destroyed, the trigger that refuses a key of an erased
    unit, the check of a transaction's keys, the sequence each destruction moves on and the
    card keys' speaker (filled once in a table made before it, :mod:`infra.keyring.speakers`); let
    the runtime role read it, add rows and update the columns a ring changes (never delete:
    destroying is nulling). Idempotent; the bootstrap runs it as the administrator."""
    conn.execute(sql.SQL(_TABLE_DDL + SAID_BY_DDL + GUARDS_DDL + _GRANTS_DDL + SEQUENCE_DDL).format(
        schema=sql.Identifier(schema), table=sql.Identifier(schema, KEY_TABLE),
        schema_name=sql.Literal(schema), table_name=sql.Literal(KEY_TABLE),
        lock=sql.Literal(ERASURE_LOCK),
        destroyed=sql.Identifier(schema, DESTROYED_SEQUENCE), role=sql.Identifier(runtime_role)))


_COLUMNS = "key_id, kind, unit_id, slot_id, subject_ref, session, cards, material"

#: Rows added in one statement, whatever their number; a card key naming a turn gets the
#: turn's speaker as its ``said_by`` (given, from a turn's key stored with it, or the stored one).
_INSERT = (
    f"INSERT INTO {{table}} (tenant_id, {_COLUMNS}, said_by) "
    "SELECT t, k, kd, u, sl, r, se, c::uuid[], m, CASE WHEN kd = 'card' THEN "
    f"coalesce(sb, {speaker_of('t', 'c::uuid[]')}) END FROM unnest("
    "%(tenant)s::text[], %(key)s::uuid[], %(kind)s::text[], %(unit)s::uuid[], "
    "%(slot)s::uuid[], %(ref)s::bytea[], %(session)s::text[], %(cards)s::text[], "
    "%(material)s::bytea[], %(said_by)s::bytea[]) AS made(t, k, kd, u, sl, r, se, c, m, sb) "
    "ON CONFLICT (key_id) DO NOTHING")


#: The oldest live key of a unit, or the one given, stored (under the unit's FIRST_KEY_LOCK, so
#: the statement's snapshot sees a key another process made first).
_FIRST_LIVE = (
    f"WITH first AS (SELECT {_COLUMNS}, seq FROM {{table}} WHERE tenant_id = %(t)s "
    "AND kind = %(k)s AND unit_id = %(u)s AND material IS NOT NULL ORDER BY seq LIMIT 1), "
    f"stored AS ({_INSERT.split(' ON CONFLICT')[0]} WHERE NOT EXISTS (SELECT FROM first) "
    f"RETURNING {_COLUMNS}) "
    f"SELECT {_COLUMNS} FROM first UNION ALL SELECT {_COLUMNS} FROM stored")
FIRST_KEY_LOCK = 0x46495253  # "FIRS"


def _insert_params(rows: list[Row]) -> dict[str, list[Any]]:
    turns = speakers_among(rows)  # a turn's key stored with its event card's: not stored yet
    rows = [row.spoken(lambda tenant_id, turn_id: turns.get((tenant_id, turn_id))) for row in rows]
    return {"tenant": [r.tenant_id for r in rows], "key": [r.key_id for r in rows],
            "kind": [r.kind for r in rows], "unit": [r.unit_id for r in rows],
            "slot": [r.slot_id for r in rows], "ref": [r.subject_ref for r in rows],
            "session": [r.session for r in rows],
            "cards": ["{" + ",".join(map(str, r.cards)) + "}" for r in rows],
            "material": [r.material for r in rows], "said_by": [r.said_by for r in rows]}


def insert_made_keys(cursor: psycopg.Cursor[Any], schema: str, made: MadeKeys,
                     used: Iterable[UUID] = ()) -> None:
    """Add the keys ``made`` (:meth:`KeyRing.take_made`) with ``cursor``, in the transaction that
    stores the events sealed with them, and check the stored keys ``used`` for them
    (:meth:`KeyRing.sealing`) are live: the database refuses (:data:`ERASED_SQLSTATE`,
    :func:`erased_refusal`) a key of an erased unit and a key destroyed since it was used, so
    the transaction stores nothing. No extra round trip: the statements are pipelined."""
    rows = cast(list[Row], made)
    if rows:
        cursor.execute(sql.SQL(_INSERT).format(table=sql.Identifier(schema, KEY_TABLE)),  # type: ignore[arg-type]
                       _insert_params(rows))
    stored = list(set(used) - {row.key_id for row in rows})
    if stored:
        cursor.execute(sql.SQL("SELECT {}(%(keys)s::uuid[])").format(
            sql.Identifier(schema, "palimpsest_keys_live")), {"keys": stored})


_ARMS = {  # what Selection's fields match, one indexed lookup each
    "whole": "true",
    "cards": "kind = 'card' AND unit_id = ANY(%(cards)s::uuid[])",
    "held": "cards && %(cards)s::uuid[]",
    "slots": "slot_id = ANY(%(slots)s::uuid[])",
    "slot_units": "kind = 'slot' AND unit_id = ANY(%(slots)s::uuid[])",
    "refs": "subject_ref = ANY(%(refs)s::bytea[])",
    "sessions": "session = ANY(%(sessions)s::text[])",
    "speakers": "said_by = ANY(%(speakers)s::bytea[])",
}


class PostgresTable(KeyTable):
    """``{schema}.erasure_keys`` over one autocommit connection of its own, opened when first
    needed and again after it broke; a forked child opens its own."""

    def __init__(self, connect: Callable[[], psycopg.Connection[Any]], schema: str) -> None:
        self._connect = connect
        self._table = sql.Identifier(schema, KEY_TABLE)
        self._live = sql.Identifier(schema, "palimpsest_keys_live")
        self._destroyed = sql.Identifier(schema, DESTROYED_SEQUENCE).as_string(None)
        self._restart()
        after_fork(self, "_restart")

    def _restart(self) -> None:
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None  # in a child: the parent's, left alone

    def _run(self, query: str, params: dict[str, Any], *, erasing: str | None = None,
             making: str | None = None) -> list[tuple[Any, ...]]:
        """``query``'s rows; ``erasing`` a tenant: in a transaction holding that tenant's erasure
        lock (:data:`ERASURE_LOCK`), which key inserts and checks of the tenant wait for;
        ``making`` a unit's first key: in a transaction holding that unit's lock
        (:data:`FIRST_KEY_LOCK`)."""
        statement = sql.SQL(query).format(table=self._table, live=self._live)  # type: ignore[arg-type]
        with self._lock:
            for attempt in (1, 2):
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect()
                    self._conn.autocommit = True
                conn = self._conn
                try:
                    apply_tenant(conn)  # the request's tenant: row-level security (decision 0018)
                    locked = (ERASURE_LOCK, erasing) if erasing is not None else (
                        (FIRST_KEY_LOCK, making) if making is not None else None)
                    with conn.transaction() if locked is not None else contextlib.nullcontext():
                        if locked is not None:
                            conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", locked)
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

    def _row(self, tenant_id: str, values: tuple[Any, ...]) -> Row:
        key_id, kind, unit_id, slot_id, ref, session, cards, material = values
        return Row(tenant_id, key_id, kind, unit_id, slot_id, ref, session, tuple(cards), material)

    def unit_row(self, tenant_id: str, kind: str, unit_id: UUID) -> Row | None:
        unit = "FROM {table} WHERE tenant_id = %(tenant)s AND kind = %(kind)s AND unit_id = %(unit)s"
        rows = self._run(f"(SELECT {_COLUMNS} {unit} AND material IS NULL LIMIT 1) UNION ALL "
                         f"(SELECT {_COLUMNS} {unit} AND material IS NOT NULL LIMIT 1)",
                         {"tenant": tenant_id, "kind": kind, "unit": unit_id})
        rows.sort(key=lambda values: values[-1] is not None)  # a destroyed one first
        return self._row(tenant_id, rows[0]) if rows else None

    def first_live(self, made: Row) -> Row:
        unit = {"t": made.tenant_id, "k": made.kind, "u": made.unit_id}
        rows = self._run(_FIRST_LIVE, {**_insert_params([made]), **unit},
                         making=f"{made.tenant_id}|{made.kind}|{made.unit_id}")
        return self._row(made.tenant_id, rows[0])

    def add(self, row: Row) -> None:
        self.add_many([row])

    def add_many(self, rows: list[Row]) -> None:
        try:
            self._run(_INSERT, _insert_params(rows))
        except psycopg.Error as error:
            raise erased_refusal(error) or error from error

    def live_or_refuse(self, key_ids: Iterable[UUID]) -> None:
        keys = list(key_ids)
        if not keys:
            return
        try:
            self._run("SELECT {live}(%(keys)s::uuid[])", {"keys": keys})
        except psycopg.Error as error:
            raise erased_refusal(error) or error from error

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

    def fill(self, known: Row) -> None:
        self._run(
            "UPDATE {table} SET slot_id = coalesce(slot_id, %(slot)s::uuid), "
            "subject_ref = coalesce(subject_ref, %(ref)s::bytea), "
            "session = coalesce(session, %(session)s::text), "
            "said_by = coalesce(said_by, CASE WHEN kind = 'card' THEN "
            f"{speaker_of('%(tenant)s', '%(cards)s::uuid[]')} END), "
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

    def matching(self, tenant_id: str, selection: Selection) -> list[Found]:
        wanted = {"whole": selection.whole, "cards": selection.cards, "held": selection.cards,
                  "slots": selection.slots, "slot_units": selection.slots, "refs": selection.refs,
                  "sessions": selection.sessions, "speakers": selection.speakers}
        arms = [_ARMS[name] for name, value in wanted.items() if value]
        if not arms:
            return []
        query = " UNION ".join(
            "SELECT key_id, kind, unit_id, slot_id FROM {table} WHERE tenant_id = %(tenant)s "
            f"AND material IS NOT NULL AND {arm}" for arm in arms)
        params = {"tenant": tenant_id, "cards": list(selection.cards), "slots": list(selection.slots),
                  "refs": list(selection.refs), "sessions": list(selection.sessions),
                  "speakers": list(selection.speakers)}
        return [Found(*values) for values in self._run(query, params)]

    def destroy(self, tenant_id: str, key_ids: list[UUID], erasure_id: UUID) -> int:
        return destroy_keys(self._run, self._destroyed, tenant_id, key_ids, erasure_id)

    def ever_made(self, tenant_id: str, kind: str, unit_id: UUID) -> bool:
        return bool(self._run("SELECT 1 FROM {table} WHERE tenant_id = %(tenant)s AND kind = %(kind)s "
                              "AND unit_id = %(unit)s LIMIT 1",
                              {"tenant": tenant_id, "kind": kind, "unit": unit_id}))

    def made_version(self, tenant_id: str, kind: str, version: int) -> bool:
        return bool(self._run("SELECT 1 FROM {table} WHERE tenant_id = %(tenant)s AND kind = %(kind)s "
                              "AND substr(unit_id::text, 15, 1) = %(version)s LIMIT 1",
                              {"tenant": tenant_id, "kind": kind, "version": format(version, "x")}))

    def sample(self) -> Row | None:
        rows = self._run(f"SELECT tenant_id, {_COLUMNS} FROM {{table}} "
                         "WHERE material IS NOT NULL AND key_id <> %(check)s LIMIT 1", {"check": CHECK_ID})
        return self._row(rows[0][0], rows[0][1:]) if rows else None
