"""``/ready``: whether this process can serve — the database answers as the runtime role, that
role is held by row-level security (forced on every read-model table, no bypass), the event log's
append-only triggers are in place, the database's
locale keeps Chinese fuzzy matching working, and the broker answers (when one is configured or the
data folder says one runs).

It answers anyone (a load balancer, a healthcheck): each check says ready or not and why in fixed
words, never an exception's message, an address or a name of the database; what failed in detail
goes to the server's log."""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import tuple_row

from infra.broker_folder import broker_folder, read_running
from infra.locale_check import probe_locale
from infra.postgres import EVENTS_TABLE
from projections.schema import TABLES

if TYPE_CHECKING:
    from services.bootstrap import Services

log = logging.getLogger(__name__)

_SECURED = """SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relname = ANY(%s) AND c.relrowsecurity AND c.relforcerowsecurity"""
_ROLE = "SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user"
_GUARDS = """SELECT t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relname = %s AND t.tgenabled <> 'D'"""
#: The bootstrap's triggers that keep the event log append-only (``infra.postgres``).
GUARDS = ("palimpsest_append_only", "palimpsest_no_truncate")


@dataclass(frozen=True)
class Check:
    ok: bool
    detail: str


@dataclass
class Readiness:
    checks: dict[str, Check] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        return all(check.ok for check in self.checks.values())

    def to_dict(self) -> dict[str, Any]:
        return {"ready": self.ready,
                "checks": {name: {"ok": c.ok, "detail": c.detail} for name, c in self.checks.items()}}


def readiness(services: Services) -> Readiness:
    report = Readiness()
    try:
        with services.queries.read.pool.connection(timeout=2.0) as conn:
            conn.execute("SELECT 1")
            report.checks["database"] = Check(True, "answers as the runtime role")
            report.checks["row_level_security"] = _rls(conn, services.settings.read_schema)
            report.checks["append_only"] = _guards(conn, services.settings.event_schema)
            report.checks["locale"] = _locale(conn)
    except (psycopg.Error, OSError) as exc:
        log.warning("ready: the database does not answer as the runtime role (%s)",
                    type(exc).__name__)
        report.checks["database"] = Check(False, "does not answer as the runtime role")
    report.checks["broker"] = _broker(services)
    report.checks["extraction"] = _extraction(services)
    return report


def _extraction(services: Services) -> Check:
    """Informational: serving does not need an LLM (turns are stored either way), so this check
    never fails readiness; it says whether turns' cards are extracted, and how to turn it on."""
    from services.ingest.extraction import extraction_off_reason

    off = extraction_off_reason(services.settings)
    if off is not None:
        return Check(True, off)
    return Check(True, "on: turns' cards are extracted")


def _rls(conn: psycopg.Connection[Any], schema: str) -> Check:
    role = conn.execute(_ROLE).fetchone()
    if role is None or role["rolsuper"] or role["rolbypassrls"]:
        return Check(False, "the runtime role bypasses row-level security")
    secured = {row["relname"] for row in conn.execute(_SECURED, (schema, list(TABLES))).fetchall()}
    missing = [table for table in TABLES if table not in secured]
    if missing:
        return Check(False, "row-level security is not forced on " + ", ".join(missing))
    return Check(True, f"forced on {len(TABLES)} read-model tables; the runtime role is bound by it")


def _guards(conn: psycopg.Connection[Any], schema: str) -> Check:
    found = {row["tgname"] for row in conn.execute(_GUARDS, (schema, EVENTS_TABLE)).fetchall()}
    missing = [guard for guard in GUARDS if guard not in found]
    if missing:
        return Check(False, "the event log lacks its guard(s) " + ", ".join(missing)
                     + ": run palimpsest init-db")
    return Check(True, "UPDATE, DELETE and TRUNCATE of the event log are refused")


def _locale(conn: psycopg.Connection[Any]) -> Check:
    rows, conn.row_factory = conn.row_factory, tuple_row  # the probe reads plain rows
    try:
        report = probe_locale(conn)
    finally:
        conn.row_factory = rows
    if report.problems:
        log.warning("ready: %s: %s", report.describe(), "; ".join(report.problems))
        return Check(False, "the database's locale breaks Chinese fuzzy matching (the server's "
                     "log says how)")
    return Check(True, "the database's locale keeps Chinese fuzzy matching working")


def _broker(services: Services, connect: Callable[..., Any] = socket.create_connection) -> Check:
    settings = services.settings
    address = settings.kafka_bootstrap
    if address is None:
        running = read_running(broker_folder(settings))
        if running is None or not running.alive():
            return Check(True, "not configured: no broker runs for this data folder")
        address = running.bootstrap
    failures = []
    for each in address.split(","):
        host, _, port = each.strip().rpartition(":")
        try:
            connect((host or "127.0.0.1", int(port)), timeout=1.0).close()
            return Check(True, "answers")
        except (OSError, ValueError) as exc:
            failures.append(type(exc).__name__)
    log.warning("ready: no broker answers (%s)", ", ".join(failures))
    return Check(False, f"unreachable: none of its {len(failures)} address(es) answers")
