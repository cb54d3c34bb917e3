"""Destruction, and what keeps a destroyed key destroyed: the tenant's erasure lock, the triggers
that refuse a key of an erased unit and a write under a destroyed key, the statements that
destroy keys (and the keys a write under way stored meanwhile), and the sequence every
destruction moves on so that other processes drop what they decoded before."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql

log = logging.getLogger(__name__)

#: How a table runs a statement: its rows; ``erasing`` a tenant, holding its :data:`ERASURE_LOCK`.
Run = Callable[..., list[tuple[Any, ...]]]

#: The first key of the two-key advisory lock a tenant's erasure holds while it destroys keys
#: (exclusive) and a transaction inserting or checking keys of the tenant holds to its commit
#: (shared): an erasure waits for the writes under way, and they for it. A key space of its own.
ERASURE_LOCK = 0x4B4559  # "KEY"

#: Moved on by every :meth:`KeyRing.destroy`, once its keys are destroyed: a process that finds it
#: moved since it last looked drops what it decoded before (:func:`destroyed_count`).
DESTROYED_SEQUENCE = "erasure_keys_destroyed"

#: The key table's guards (formatted as :func:`infra.keyring.postgres_table.ensure_key_table`
#: formats its DDL): a key of an erased unit is refused, a transaction's keys are checked live,
#: a destroyed key stays destroyed.
GUARDS_DDL = """\
-- A key of a unit an erasure destroyed is never made again, nor one of a card of an erased
-- slot, nor one naming an erased card or turn among its cards (what it seals quotes them); the
-- tenant's own key is made again (a tenant used again starts anew). Once per statement, over the
-- keys it added: an erasure of the tenant under way is waited for (the tenant's erasure lock,
-- shared here, held by the erasure while it destroys), then the keys are looked at, so a key made
-- before the erasure and stored after it is refused, and the statement with it.
CREATE OR REPLACE FUNCTION {schema}.palimpsest_refuse_erased() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    gone record;
BEGIN
    -- an erasure of the tenant's keys under way is waited for (it holds the tenant's lock)
    PERFORM pg_advisory_xact_lock_shared({lock}, hash) FROM (
        SELECT DISTINCT hashtext(tenant_id) AS hash FROM made ORDER BY 1) AS tenants;
    WITH under AS (
        SELECT tenant_id, kind, unit_id FROM made WHERE kind <> 'tenant'
        UNION SELECT tenant_id, 'slot', slot_id FROM made WHERE kind <> 'tenant' AND slot_id IS NOT NULL
        UNION SELECT tenant_id, quoted.kind, card FROM made, unnest(cards) AS card,
            unnest(ARRAY['card', 'turn']) AS quoted(kind) WHERE made.kind <> 'tenant')
    SELECT under.tenant_id, under.kind, under.unit_id INTO gone FROM under WHERE EXISTS (
        SELECT 1 FROM {table} k WHERE k.tenant_id = under.tenant_id AND k.kind = under.kind
        AND k.unit_id = under.unit_id AND k.material IS NULL) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'erasure unit % % was erased: no key is made under it again',
            gone.kind, gone.unit_id USING ERRCODE = 'PE001',
            DETAIL = json_build_array(gone.tenant_id, gone.kind, gone.unit_id)::text;
    END IF;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS palimpsest_refuse_erased ON {table};
CREATE TRIGGER palimpsest_refuse_erased AFTER INSERT ON {table}
    REFERENCING NEW TABLE AS made FOR EACH STATEMENT
    EXECUTE FUNCTION {schema}.palimpsest_refuse_erased();
-- The keys a transaction's events were sealed under, still live at its commit: an erasure of
-- their tenant under way is waited for, and one that begins waits for the commit.
CREATE OR REPLACE FUNCTION {schema}.palimpsest_keys_live(keys uuid[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    gone record;
BEGIN
    PERFORM pg_advisory_xact_lock_shared({lock}, hash) FROM (
        SELECT DISTINCT hashtext(tenant_id) AS hash FROM {table} WHERE key_id = ANY(keys)
        ORDER BY 1) AS tenants;
    SELECT tenant_id, kind, unit_id INTO gone FROM {table}
        WHERE key_id = ANY(keys) AND material IS NULL LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'erasure unit % % was erased: nothing is written under it again',
            gone.kind, gone.unit_id USING ERRCODE = 'PE001',
            DETAIL = json_build_array(gone.tenant_id, gone.kind, gone.unit_id)::text;
    END IF;
END $$;
GRANT EXECUTE ON FUNCTION {schema}.palimpsest_keys_live(uuid[]) TO {role};
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
"""

#: The sequence each destruction moves on (:data:`DESTROYED_SEQUENCE`), readable by the runtime role.
SEQUENCE_DDL = """\
CREATE SEQUENCE IF NOT EXISTS {destroyed};
GRANT USAGE, SELECT ON SEQUENCE {destroyed} TO {role};
"""


def destroyed_count(schema: str) -> sql.Composed:
    """An expression: how many times keys of ``schema``'s ring were destroyed (0 before the first)."""
    return sql.SQL("(SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {})").format(
        sql.Identifier(schema, DESTROYED_SEQUENCE))


#: Destroys live keys of the tenant: the statement's head, its key condition follows.
DESTROY = ("UPDATE {table} SET material = NULL, subject_ref = NULL, session = NULL, said_by = NULL, "
           "destroyed_at = now(), erasure_id = %(erasure)s WHERE tenant_id = %(tenant)s "
           "AND material IS NOT NULL AND ")
_GONE = "{table} g WHERE g.tenant_id = %(tenant)s AND g.key_id = ANY(%(keys)s::uuid[])"
#: The live keys of the units just destroyed, of cards of a slot destroyed, or quoting a card
#: destroyed (as :meth:`KeyRing.find` selects them): one indexed lookup each.
MEANWHILE = (
    "key_id IN (SELECT k.key_id FROM {table} k, " + _GONE + " AND k.tenant_id = g.tenant_id "
    "AND k.kind = g.kind AND k.unit_id = g.unit_id AND k.material IS NOT NULL "
    "UNION SELECT k.key_id FROM {table} k, " + _GONE + " AND g.kind = 'slot' "
    "AND k.tenant_id = g.tenant_id AND k.slot_id = g.unit_id AND k.material IS NOT NULL "
    "UNION SELECT k.key_id FROM {table} k WHERE k.tenant_id = %(tenant)s AND k.material IS NOT "
    "NULL AND k.cards && ARRAY(SELECT g.unit_id FROM " + _GONE + " AND g.kind = 'card')) "
    "RETURNING key_id")


def destroy_keys(run: Run, sequence: str, tenant_id: str, key_ids: list[UUID], erasure_id: UUID) -> int:
    """Destroy those live keys of the tenant, then those a write under way stored meanwhile, then
    move ``sequence`` (:data:`DESTROYED_SEQUENCE`) on: how many keys were destroyed."""
    params = {"tenant": tenant_id, "keys": key_ids, "erasure": erasure_id}
    destroyed = len(run(DESTROY + "key_id = ANY(%(keys)s::uuid[]) RETURNING key_id",
                        params, erasing=tenant_id))
    # Then, committed, the live keys of the same units, of cards of a slot destroyed, or
    # quoting a card destroyed (as `find` would) that a transaction holding the tenant's
    # erasure lock stored: the first statement waited for its commit.
    destroyed += len(run(DESTROY + MEANWHILE, params))
    # Once the keys are gone (committed), never before: a process that sees the count move
    # and decodes again must find them destroyed. Moved on even when none was left (an
    # erasure run again after a crash right here), so no process misses one.
    try:
        run("SELECT nextval(%(sequence)s::regclass)", {"sequence": sequence})
    except psycopg.errors.UndefinedTable:
        log.warning("the store lacks %s (bootstrapped by an older release): other processes "
                    "learn of this erasure only as their caches expire; run `palimpsest "
                    "init-db`", DESTROYED_SEQUENCE)
    return destroyed
