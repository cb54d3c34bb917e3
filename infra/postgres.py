"""PostgreSQL: the embedded server, the administrator's bootstrap, and the runtime role.

The runtime role may read and append events. It cannot update, delete or truncate them: it is not
granted those privileges, and triggers refuse them for every role, the owner included. The HTTP
role may do the same within one tenant: row-level security with FORCE confines it to the tenant
its connection or transaction set, on every table it can read (:mod:`infra.tenant_policies`,
decision 0018); a key is found by its secret's hash through a function, before any tenant is known.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from pydantic import SecretStr

from infra.embedded_pg import start_server, stop_embedded  # noqa: F401 - stop_embedded is named here too
from infra.pgvector_build import cpu_flags, native_build_installed
from infra.settings import Settings
from projections.schema import create_read_schema
from projections.search_ops import has_classes
from projections.vector_index import Kind

log = logging.getLogger(__name__)

EVENTS_TABLE = "palimpsest_events"
#: API keys (``services.keys``): looked up by the hash of their secret, before any tenant is known.
KEYS_TABLE = "api_keys"
#: Console sessions signed out (``services.keys``): refused until their seal expires, then pruned.
SESSIONS_ENDED_TABLE = "console_sessions_ended"


@dataclass(frozen=True)
class Database:
    """Where to connect, and as whom."""

    host: str
    port: int
    dbname: str
    user: str
    password: str | None = None

    @classmethod
    def from_dsn(cls, dsn: str) -> Database:
        parts: dict[str, Any] = conninfo_to_dict(dsn)
        return cls(
            host=parts.get("host") or "localhost",
            port=int(parts.get("port") or 5432),
            dbname=parts.get("dbname") or "postgres",
            user=parts.get("user") or "postgres",
            password=parts.get("password") or None,
        )

    def as_role(self, user: str, password: str | None) -> Database:
        return replace(self, user=user, password=password)

    def connect(self, **kwargs: Any) -> psycopg.Connection[Any]:
        return psycopg.connect(
            host=self.host, port=self.port, dbname=self.dbname, user=self.user,
            password=self.password, **kwargs,
        )


class Lease:
    """Which of several processes does a job: the one holding a session advisory lock named
    ``name`` on a connection of its own. The lock goes with that connection, so when the holder
    stops or dies (or its connection breaks) another process takes the lease at its next try."""

    def __init__(self, connect: Callable[..., psycopg.Connection[Any]], name: str) -> None:
        self.connect = connect
        self.name = name
        self._conn: psycopg.Connection[Any] | None = None

    def held(self) -> bool:
        """Whether this process holds the lease, taking it if it is free."""
        if self._conn is not None:
            try:
                self._conn.execute("SELECT 1")  # the lock lives as long as this connection
                return True
            except psycopg.Error:
                self.release()
        conn = None
        try:
            conn = self.connect(autocommit=True)
            row = conn.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))",
                               (self.name,)).fetchone()
        except psycopg.Error as error:
            log.warning("lease %r: cannot reach the database: %s", self.name, error)
            row = None
        if row and row[0]:
            self._conn = conn
            log.info("lease %r taken", self.name)
            return True
        if conn is not None:
            conn.close()
        return False

    def release(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.close()
            self._conn = None


def start_embedded(data_dir: Path) -> Database:
    """Start (or join) the embedded PostgreSQL server that keeps its data in ``data_dir``
    (:mod:`infra.embedded_pg`: it stops when the last live process that joined it leaves)."""
    return Database.from_dsn(start_server(data_dir))


def admin_database(settings: Settings) -> Database:
    if settings.database_url is not None:
        return Database.from_dsn(settings.database_url.get_secret_value())
    return start_embedded(settings.data_dir)


def vector_search_available(settings: Settings) -> bool:
    """Whether the server can compute vector distances. The embedded server's bundled pgvector is
    compiled for AVX-512: on a CPU without it every distance kills the backend with SIGILL, until
    ``python -m infra.pgvector_build`` (run by ``make``) has rebuilt it for this CPU."""
    if settings.database_url is not None:
        return True
    return "avx512f" in cpu_flags() or native_build_installed()


def vector_index_kind(settings: Settings) -> Kind:
    """Which index of the embeddings to keep (``PALIMPSEST_VECTOR_INDEX``; ``auto``: IVFFlat
    wherever distances work, none elsewhere)."""
    if settings.vector_index != "auto":
        return settings.vector_index
    return "ivfflat" if vector_search_available(settings) else "none"


def runtime_database(admin: Database, settings: Settings) -> Database:
    password = settings.runtime_password.get_secret_value() if settings.runtime_password else None
    return admin.as_role(settings.runtime_role, password)


def http_database(admin: Database, settings: Settings) -> Database:
    """The HTTP processes' role: it reads and writes the request's tenant only (decision 0018)."""
    secret = settings.http_password
    return admin.as_role(settings.http_role, secret.get_secret_value() if secret else None)


def projector_database(admin: Database, settings: Settings) -> Database:
    secret = settings.projector_password
    return admin.as_role(settings.projector_role, secret.get_secret_value() if secret else None)


_APPEND_ONLY = """
CREATE OR REPLACE FUNCTION {schema}.palimpsest_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the event log is append-only: % on %.% is refused',
        TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME USING ERRCODE = 'insufficient_privilege';
END $$;
DROP TRIGGER IF EXISTS palimpsest_append_only ON {schema}.{table};
CREATE TRIGGER palimpsest_append_only BEFORE UPDATE OR DELETE ON {schema}.{table}
    FOR EACH ROW EXECUTE FUNCTION {schema}.palimpsest_refuse_change();
DROP TRIGGER IF EXISTS palimpsest_no_truncate ON {schema}.{table};
CREATE TRIGGER palimpsest_no_truncate BEFORE TRUNCATE ON {schema}.{table}
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.palimpsest_refuse_change();
"""

_GRANTS = """
GRANT USAGE ON SCHEMA {schema} TO {role};
REVOKE ALL ON {schema}.{table} FROM {role};
GRANT SELECT, INSERT, MAINTAIN ON {schema}.{table} TO {role};
GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema} TO {role};
"""

_PROJECTOR_GRANTS = """
GRANT USAGE ON SCHEMA {schema} TO {projector};
GRANT SELECT ON {schema}.{table} TO {projector};
"""


_KEYS = """
CREATE TABLE IF NOT EXISTS {schema}.{keys} (
    key_id text PRIMARY KEY,
    tenant_id text NOT NULL,
    scopes text[] NOT NULL,
    name text NOT NULL DEFAULT '',
    secret_hash bytea NOT NULL UNIQUE,
    created_at timestamptz NOT NULL,
    revoked_at timestamptz
);
REVOKE ALL ON {schema}.{keys} FROM {role};
GRANT SELECT, INSERT ON {schema}.{keys} TO {role};
GRANT UPDATE (revoked_at) ON {schema}.{keys} TO {role};
CREATE TABLE IF NOT EXISTS {schema}.{ended} (
    session_id text PRIMARY KEY,
    tenant_id text NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS console_sessions_ended_expiry ON {schema}.{ended} (expires_at);
REVOKE ALL ON {schema}.{ended} FROM {role};
GRANT SELECT, INSERT, DELETE ON {schema}.{ended} TO {role};
"""


#: The functions an earlier bootstrap marked LEAKPROOF for the whole database, so that the search
#: routes' conditions could drive the GIN indexes under row-level security. The read schema's own
#: operators do that now (:mod:`projections.search_ops`); PostgreSQL and pg_trgm ship these unmarked.
EARLIER_MARKING = ("pg_catalog.arrayoverlap(anyarray, anyarray)",
                   "pg_catalog.arraycontains(anyarray, anyarray)",
                   "{trgm}.word_similarity_op(text, text)",
                   "{trgm}.word_similarity_commutator_op(text, text)")


def unmark_leakproof(conn: psycopg.Connection[Any]) -> bool:
    """Revert the earlier bootstrap's database-wide LEAKPROOF marking (:data:`EARLIER_MARKING`),
    where it is there whole: run once, when the read schema first gets its own operator classes
    (the caller's test), so that a marking an administrator makes afterwards is left alone; a
    part of the set marked is not this project's doing and is left too. True if it reverted."""
    row = conn.execute("SELECT extnamespace::regnamespace::text FROM pg_extension "
                       "WHERE extname = 'pg_trgm'").fetchone()
    if row is None:
        return False
    functions = [f.format(trgm=row[0]) for f in EARLIER_MARKING]
    marked = conn.execute("SELECT count(*) FROM unnest(%s::text[]) AS f "
                          "JOIN pg_proc p ON p.oid = f::regprocedure WHERE p.proleakproof",
                          (functions,)).fetchone()
    if marked is None or marked[0] != len(functions):
        return False
    try:
        with conn.transaction():
            for function in functions:
                conn.execute(f"ALTER FUNCTION {function} NOT LEAKPROOF")
    except psycopg.errors.InsufficientPrivilege:
        log.warning("not a superuser: the LEAKPROOF marking an earlier init-db made on %s stays; "
                    "a superuser can run ALTER FUNCTION … NOT LEAKPROOF", ", ".join(functions))
        return False
    log.info("reverted the earlier database-wide LEAKPROOF marking of %s", ", ".join(functions))
    return True


def bootstrap(admin: Database, settings: Settings) -> None:
    """Create the schema, the event table (as the library lays it out), the runtime role, the
    append-only triggers and the grants. Safe to run again, also from several processes."""
    schema = settings.event_schema
    with admin.connect(autocommit=True) as lock:
        # One bootstrap at a time: DDL and GRANTs racing on the catalogue fail otherwise.
        lock.execute("SELECT pg_advisory_lock(hashtext('palimpsest bootstrap'))")
        _bootstrap(admin, settings, schema)


def _bootstrap(admin: Database, settings: Settings, schema: str) -> None:
    from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore

    from infra.embedders import ensure_cache_table
    from infra.keyring import ensure_key_table
    from infra.locale_check import check_cjk_support
    from infra.relay import ensure_relay_table
    from infra.tenant_policies import EVENT_TENANT, isolate_tenants, readers

    with admin.connect(autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        _ensure_role(conn, settings.runtime_role, settings.runtime_password)
        _ensure_role(conn, settings.projector_role, settings.projector_password)
        _ensure_role(conn, settings.http_role, settings.http_password)
    datastore = PostgresDatastore(
        dbname=admin.dbname, host=admin.host, port=str(admin.port), user=admin.user,
        password=admin.password or "", schema=schema, pool_size=1,
    )
    try:
        PostgresApplicationRecorder(datastore, events_table_name=EVENTS_TABLE).create_table()
    finally:
        datastore.close()
    names = {
        "schema": sql.Identifier(schema), "table": sql.Identifier(EVENTS_TABLE),
        "role": sql.Identifier(settings.runtime_role),
    }
    with admin.connect(autocommit=True) as conn:
        conn.execute(sql.SQL(_APPEND_ONLY).format(**names))
        conn.execute(sql.SQL(EVENT_TENANT).format(**names))
        for role in (settings.runtime_role, settings.http_role):
            as_role = {**names, "role": sql.Identifier(role)}
            conn.execute(sql.SQL(_GRANTS).format(**as_role))
            conn.execute(sql.SQL(_KEYS).format(keys=sql.Identifier(KEYS_TABLE),
                                               ended=sql.Identifier(SESSIONS_ENDED_TABLE), **as_role))
            ensure_key_table(conn, schema, role)
        conn.execute(sql.SQL(_PROJECTOR_GRANTS).format(
            projector=sql.Identifier(settings.projector_role), **names))
        ensure_cache_table(conn, schema, settings.embedding_dimensions,
                           grant_to=[settings.runtime_role, settings.projector_role, settings.http_role],
                           purge_by=settings.projector_role)
        isolate_tenants(conn, schema, admin, settings)
        upgrading = not has_classes(conn, settings.read_schema)
        create_read_schema(conn, settings.read_schema, reader=readers(settings),
                           writer=settings.projector_role, dimensions=settings.embedding_dimensions,
                           vector_index=vector_index_kind(settings))
        check_cjk_support(conn)
        ensure_relay_table(conn, settings, readers=[settings.projector_role])
        if upgrading and has_classes(conn, settings.read_schema):
            unmark_leakproof(conn)


def _ensure_role(conn: psycopg.Connection[Any], name: str, password: SecretStr | None) -> None:
    role = sql.Identifier(name)
    exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone()
    if not exists:
        log.info("creating role %s", name)
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOINHERIT NOBYPASSRLS").format(role))
    if password is not None:
        conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(
            role, sql.Literal(password.get_secret_value())))
