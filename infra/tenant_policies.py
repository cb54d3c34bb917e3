"""Row-level security on the event schema's tables of tenants' rows (decision 0018).

The bootstrap (:func:`infra.postgres.bootstrap`) runs these as the administrator: the log's tenant
column, computed by the database from each stored event; the policies — every role sees and writes
the tenant its connection or transaction set (``palimpsest.tenant``, :mod:`infra.tenancy`), the
cross-tenant roles every row, never the HTTP role; the master key's check readable by every role;
and the one lookup that crosses tenants, a key by its secret's hash, as a function.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from infra.postgres import EVENTS_TABLE, KEYS_TABLE, SESSIONS_ENDED_TABLE, Database
from infra.settings import Settings

#: A stored event's tenant, read from its JSON (a projection decision's from the event it is about):
#: the column row-level security compares, computed by the database, never sent by a writer.
EVENT_TENANT = """
CREATE OR REPLACE FUNCTION {schema}.event_tenant(state bytea) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(e ->> 'tenant_id', e ->> 'event_tenant')
    FROM (SELECT convert_from(state, 'UTF8')::json AS e) AS stored
$$;
ALTER TABLE {schema}.{table} ADD COLUMN IF NOT EXISTS tenant_id text
    GENERATED ALWAYS AS ({schema}.event_tenant(state)) STORED;
"""

#: Row-level security with FORCE on a table of the event schema: every role sees and writes the
#: rows of the tenant its session or transaction set (``palimpsest.tenant``: ``infra.tenancy``);
#: the roles that work across tenants (``cross``) every row.
_ISOLATED = """
ALTER TABLE {table} ENABLE ROW LEVEL SECURITY;
ALTER TABLE {table} FORCE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS tenant_isolation ON {table};
CREATE POLICY tenant_isolation ON {table}
    USING (tenant_id = current_setting('palimpsest.tenant', true))
    WITH CHECK (tenant_id = current_setting('palimpsest.tenant', true));
DROP POLICY IF EXISTS cross_tenant ON {table};
CREATE POLICY cross_tenant ON {table} TO {cross} USING (true) WITH CHECK (true);
"""

#: The key table's one row of no tenant (``''``): the check that the master key is this store's,
#: which every process reads before any request, whatever tenant it is for.
_MASTER_CHECK = """
DROP POLICY IF EXISTS master_check ON {table};
CREATE POLICY master_check ON {table} FOR SELECT USING (tenant_id = '' AND kind = 'check');
"""

#: Authentication comes before any tenant is known: a key is found by the hash of its secret
#: through this function (its owner's rights), not by reading ``api_keys``.
_KEY_LOOKUP = """
CREATE OR REPLACE FUNCTION {schema}.api_key_by_hash(secret bytea)
RETURNS TABLE (key_id text, tenant_id text, scopes text[], name text, created_at timestamptz,
               revoked_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT k.key_id, k.tenant_id, k.scopes, k.name, k.created_at, k.revoked_at
    FROM {schema}.{keys} k WHERE k.secret_hash = secret
$$;
REVOKE ALL ON FUNCTION {schema}.api_key_by_hash(bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION {schema}.api_key_by_hash(bytea) TO {roles};
"""


def tenant_tables() -> tuple[str, ...]:
    """The event schema's tables that hold tenants' rows, each with a ``tenant_id``: under
    row-level security (:data:`_ISOLATED`). A new one joins them here."""
    from infra.embedders import CACHE_TABLE
    from infra.keyring import KEY_TABLE

    return (EVENTS_TABLE, KEY_TABLE, CACHE_TABLE, KEYS_TABLE, SESSIONS_ENDED_TABLE)


def readers(settings: Settings) -> list[str]:
    """The roles that read the read models within one tenant: the runtime role, the HTTP role."""
    return list(dict.fromkeys((settings.runtime_role, settings.http_role)))


def cross_tenant_roles(admin: Database, settings: Settings) -> list[str]:
    """The roles that read every tenant's rows of the event schema: the runtime role (``serve``'s
    own process: the relays, ingest, consolidation, retention; the CLI), the projectors, and the
    administrator (the bootstrap, the key lookup's owner). Never the HTTP role."""
    roles = [settings.runtime_role, settings.projector_role, admin.user]
    return [role for role in dict.fromkeys(roles) if role != settings.http_role]


def isolate_tenants(conn: psycopg.Connection[Any], schema: str, admin: Database,
                    settings: Settings) -> None:
    """Row-level security with FORCE on :func:`tenant_tables`, and the key lookup by hash."""
    from infra.keyring import KEY_TABLE

    cross = sql.SQL(", ").join(map(sql.Identifier, cross_tenant_roles(admin, settings)))
    for table in tenant_tables():
        conn.execute(sql.SQL(_ISOLATED).format(table=sql.Identifier(schema, table), cross=cross))
    conn.execute(sql.SQL(_MASTER_CHECK).format(table=sql.Identifier(schema, KEY_TABLE)))
    conn.execute(sql.SQL(_KEY_LOOKUP).format(
        schema=sql.Identifier(schema), keys=sql.Identifier(KEYS_TABLE),
        roles=sql.SQL(", ").join(map(sql.Identifier, readers(settings)))))
    grant_liveness(conn, schema, settings)


def grant_liveness(conn: psycopg.Connection[Any], schema: str, settings: Settings) -> None:
    """The HTTP role reads whether each part of the pipeline is alive (``GET /v1/status``): the
    heartbeats' columns that say only that — role, interval, last beat, stop — never their
    detail, progress or position, which tell of every tenant's activity."""
    from infra.heartbeats import TABLE, ensure_heartbeat_table

    ensure_heartbeat_table(conn, schema, [settings.runtime_role])
    conn.execute(sql.SQL("GRANT SELECT (role, interval_s, beat_at, stopped_at) ON {} TO {}").format(
        sql.Identifier(schema, TABLE), sql.Identifier(settings.http_role)))
