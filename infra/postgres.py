"""PostgreSQL: the embedded server, the administrator's bootstrap, and the runtime role.

The runtime role may read and append events. It cannot update, delete or truncate them: it is not
granted those privileges, and triggers refuse them for every role, the owner included.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from infra.settings import Settings

log = logging.getLogger(__name__)

EVENTS_TABLE = "palimpsest_events"


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


def start_embedded(data_dir: Path) -> Database:
    """Start (or join) the embedded PostgreSQL server that keeps its data in ``data_dir``."""
    import pgserver  # the wheel carries the server binaries; import only when it is used

    data_dir = Path(data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    server = pgserver.get_server(data_dir / "pg")
    return Database.from_dsn(server.get_uri())


def admin_database(settings: Settings) -> Database:
    if settings.database_url is not None:
        return Database.from_dsn(settings.database_url.get_secret_value())
    return start_embedded(settings.data_dir)


def runtime_database(admin: Database, settings: Settings) -> Database:
    password = settings.runtime_password.get_secret_value() if settings.runtime_password else None
    return admin.as_role(settings.runtime_role, password)


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

    with admin.connect(autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        _ensure_role(conn, settings)
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
        conn.execute(sql.SQL(_GRANTS).format(**names))


def _ensure_role(conn: psycopg.Connection[Any], settings: Settings) -> None:
    role = sql.Identifier(settings.runtime_role)
    exists = conn.execute(
        "SELECT 1 FROM pg_roles WHERE rolname = %s", (settings.runtime_role,)
    ).fetchone()
    if not exists:
        log.info("creating runtime role %s", settings.runtime_role)
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOINHERIT").format(role))
    if settings.runtime_password is not None:
        conn.execute(
            sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                role, sql.Literal(settings.runtime_password.get_secret_value())
            )
        )
