"""How far behind the log each consumer is, and which parts are alive: the lag metric and
``palimpsest status`` (:func:`read_status`, every tenant's, as the projector role), and one
tenant's share of it (:func:`tenant_pipeline`, what ``GET /v1/status`` answers)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from infra.heartbeats import LIVE_INTERVALS, ROLES, Liveness, read_liveness
from infra.postgres import EVENTS_TABLE, Database
from infra.settings import Settings
from projections.cards import NAME


@dataclass
class ProjectionStatus:
    name: str
    position: int
    log_position: int
    lag: int
    tenants: int
    failures: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Status:
    head: int
    relay_position: int | None
    relay_lag: int | None
    projections: list[ProjectionStatus]
    cards: int
    embeddings_pending: int
    #: ``broker``, ``relay``, ``projector`` → alive / dead / unknown, from their heartbeats.
    liveness: dict[str, Liveness] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def liveness_lines(self) -> list[str]:
        """One line per part: ``relay: alive (beat 0.8 s ago, last progress …) — position 42``."""
        return [_liveness_line(part) for part in self.liveness.values()]

    def prometheus(self) -> str:
        """The figures in Prometheus' text exposition format."""
        lines = [
            "# HELP palimpsest_log_head Newest notification id in the event log.",
            "# TYPE palimpsest_log_head gauge",
            f"palimpsest_log_head {self.head}",
            "# HELP palimpsest_projection_lag Newest notification id minus the projection's position.",
            "# TYPE palimpsest_projection_lag gauge",
        ]
        lines += [f'palimpsest_projection_lag{{projection="{p.name}"}} {p.lag}' for p in self.projections]
        lines += ["# TYPE palimpsest_projection_failures gauge"]
        lines += [f'palimpsest_projection_failures{{projection="{p.name}"}} {len(p.failures)}'
                  for p in self.projections]
        if self.relay_lag is not None:
            lines += ["# TYPE palimpsest_relay_lag gauge", f"palimpsest_relay_lag {self.relay_lag}"]
        lines += ["# TYPE palimpsest_embeddings_pending gauge",
                  f"palimpsest_embeddings_pending {self.embeddings_pending}"]
        return "\n".join(lines + _liveness_lines(self.liveness.values())) + "\n"


def read_status(db: Database, settings: Settings) -> Status:
    """Read as the projector role, which may read every tenant's bookkeeping. Each statement
    is its own transaction: a process bootstrapping the schema meanwhile (its DDL locks the tables
    one after the other) never waits on a lock this reading holds, nor this on one of its."""
    events = sql.Identifier(settings.event_schema)
    read = sql.Identifier(settings.read_schema)
    with db.connect(autocommit=True) as conn:
        head = conn.execute(sql.SQL("SELECT coalesce(max(notification_id), 0) FROM {}.{}").format(
            events, sql.Identifier(EVENTS_TABLE))).fetchone()[0]  # type: ignore[index]
        relay = _relay_position(conn, settings)
        rows = conn.execute(sql.SQL(
            "SELECT tenant_id, position FROM {}.projection_position WHERE projection = %s"
        ).format(read), (NAME,)).fetchall()
        failures = conn.execute(sql.SQL(
            "SELECT tenant_id, notification_id, originator_id::text, originator_version, topic, "
            "error, failed_at::text FROM {}.projection_failures WHERE projection = %s "
            "AND status = 'parked' ORDER BY notification_id").format(read), (NAME,)).fetchall()
        cards = conn.execute(sql.SQL("SELECT count(*) FROM {}.cards").format(read)).fetchone()[0]  # type: ignore[index]
        liveness = read_liveness(conn, settings.event_schema)
        pending = conn.execute(sql.SQL(
            "SELECT count(*) FROM {s}.cards c LEFT JOIN {s}.card_embeddings e "
            "USING (tenant_id, card_id) WHERE e.card_id IS NULL").format(s=read)).fetchone()[0]  # type: ignore[index]
    positions = {tenant: position for tenant, position in rows}
    log_position = positions.pop("*", 0)
    position = max([log_position, *positions.values()])
    keys = ("tenant_id", "notification_id", "originator_id", "originator_version", "topic",
            "error", "failed_at")
    projection = ProjectionStatus(
        NAME, position, log_position, max(head - position, 0), len(positions),
        [dict(zip(keys, row, strict=True)) for row in failures])
    relay_lag = None if relay is None else max(head - relay, 0)
    return Status(head, relay, relay_lag, [projection], cards, pending, liveness)


@dataclass(frozen=True)
class TenantPipeline:
    """The pipeline as one tenant sees it: its own events only, never the log's head nor another
    tenant's activity (decision 0018)."""

    #: The newest notification id of the tenant's events in the log.
    head: int
    #: The tenant's events after its projected position: not in the read models yet.
    projection_lag: int
    #: When the read models last moved the tenant's position (None: never).
    projected_at: datetime | None
    #: The tenant's cards waiting for their vectors.
    embeddings_pending: int
    #: The tenant's parked events, and its requests to retry or skip one not carried out yet.
    parked: int
    requests_pending: int
    #: ``broker``, ``relay``, ``projector`` → alive / dead / unknown.
    liveness: dict[str, str]


_TENANT = """SELECT
    (SELECT count(*) FROM {s}.projection_failures WHERE projection = %(p)s AND tenant_id = %(t)s
     AND status = 'parked') AS parked,
    (SELECT count(*) FROM {s}.projection_requests WHERE tenant_id = %(t)s
     AND status = 'requested') AS requests_pending,
    (SELECT count(*) FROM {s}.embedding_queue WHERE tenant_id = %(t)s) AS embeddings_pending,
    (SELECT updated_at FROM {s}.projection_position WHERE projection = %(p)s
     AND tenant_id = %(t)s) AS projected_at"""
#: The tenant's events after its position, by the log's order from there: the scan covers the
#: log's events after the tenant's position (every tenant's: the log has no index by tenant).
_TENANT_LOG = """SELECT count(*) AS lag, max(notification_id) AS head FROM {e}.{events}
WHERE notification_id > %(position)s AND tenant_id = %(t)s"""
#: Liveness from the heartbeats' columns that say nothing of activity (the HTTP role may read
#: only these: no detail, progress or position).
_ALIVE = """SELECT role, bool_or(stopped_at IS NULL AND beat_at > now() - make_interval(
    secs => interval_s * %s)) AS alive FROM {e}.heartbeats WHERE role = ANY(%s) GROUP BY role"""


def tenant_pipeline(conn: psycopg.Connection[Any], settings: Settings, tenant_id: str,
                    position: int) -> TenantPipeline:
    """``tenant_id``'s share of the pipeline, read on ``conn`` (a transaction of that tenant, as
    the HTTP or the runtime role); ``position``: its projected position."""
    names = {"s": sql.Identifier(settings.read_schema), "e": sql.Identifier(settings.event_schema),
             "events": sql.Identifier(EVENTS_TABLE)}
    with conn.cursor(row_factory=dict_row) as cur:
        own = cur.execute(sql.SQL(_TENANT).format(**names), {"p": NAME, "t": tenant_id}).fetchone()
        log = cur.execute(sql.SQL(_TENANT_LOG).format(**names),
                          {"position": position, "t": tenant_id}).fetchone()
    assert own is not None and log is not None  # aggregates answer one row
    return TenantPipeline(int(log["head"] or position), int(log["lag"]), own["projected_at"],
                          int(own["embeddings_pending"]), int(own["parked"]),
                          int(own["requests_pending"]), _alive(conn, settings.event_schema))


def _alive(conn: psycopg.Connection[Any], schema: str) -> dict[str, str]:
    found = dict.fromkeys(ROLES, "unknown")
    try:
        with conn.transaction():  # a savepoint: an older bootstrap's grants leave them unknown
            rows = conn.execute(sql.SQL(_ALIVE).format(e=sql.Identifier(schema)),
                                (LIVE_INTERVALS, list(ROLES))).fetchall()
    except psycopg.Error:
        return found
    for row in rows:
        role, alive = (row["role"], row["alive"]) if isinstance(row, dict) else row
        found[role] = "alive" if alive else "dead"
    return found


def _liveness_line(part: Liveness) -> str:
    if part.state == "unknown":
        return f"{part.role}: unknown (no heartbeat: it never ran against this store)"
    progress = "never" if part.progress_at is None else f"{part.progress_at:%Y-%m-%d %H:%M:%S %Z}"
    detail = f" — {part.detail}" if part.detail else ""
    stopped = ", stopped" if part.stopped else ""
    return (f"{part.role}: {part.state} (last heartbeat {part.age:.1f} s ago from {part.process}"
            f"{stopped}, last progress {progress}){detail}")


def _liveness_lines(roles: Iterable[Liveness]) -> list[str]:
    known = [r for r in roles if r.state != "unknown"]
    lines = ["# HELP palimpsest_up 1 while the part's heartbeat is fresh, 0 once it is stale or "
             "stopped (no sample: it never beat here).", "# TYPE palimpsest_up gauge"]
    lines += [f'palimpsest_up{{role="{r.role}"}} {int(r.state == "alive")}' for r in known]
    lines += ["# HELP palimpsest_heartbeat_age_seconds Seconds since the part's last heartbeat.",
              "# TYPE palimpsest_heartbeat_age_seconds gauge"]
    lines += [f'palimpsest_heartbeat_age_seconds{{role="{r.role}"}} {r.age:.1f}'
              for r in known if r.age is not None]
    lines += ["# HELP palimpsest_last_progress_timestamp_seconds When the part last moved (published, "
              "applied, answered).", "# TYPE palimpsest_last_progress_timestamp_seconds gauge"]
    lines += [f'palimpsest_last_progress_timestamp_seconds{{role="{r.role}"}} '
              f"{r.progress_at.timestamp():.3f}" for r in known if r.progress_at is not None]
    return lines


class NotInitialisedError(RuntimeError):
    """The data folder or database holds no event store yet."""


def check_initialised(settings: Settings) -> None:
    """Raise :class:`NotInitialisedError` where the embedded server was never made (without making
    it: ``status`` must not create a database)."""
    if settings.database_url is None and not (Path(settings.data_dir) / "pg" / "PG_VERSION").exists():
        raise NotInitialisedError(
            f"no event store in {Path(settings.data_dir).resolve()}: the data folder was never "
            "initialised. Run `palimpsest init-db` (or start `palimpsest pipeline`) first.")


def not_initialised(error: psycopg.Error, settings: Settings) -> NotInitialisedError | None:
    """The error a status read meets on a database without the event store's roles or tables,
    said as such (None for any other error)."""
    missing = isinstance(error, psycopg.errors.UndefinedTable | psycopg.errors.InvalidSchemaName) or (
        isinstance(error, psycopg.OperationalError) and "does not exist" in str(error))
    if not missing:
        return None
    where = "the database" if settings.database_url else str(Path(settings.data_dir).resolve())
    return NotInitialisedError(f"{where} holds no event store yet ({str(error).strip()}). "
                               "Run `palimpsest init-db` first.")


def _relay_position(conn: Any, settings: Settings) -> int | None:
    try:
        with conn.transaction():
            row = conn.execute(sql.SQL(  # the ingest relay carries only turns: not the log's lag
                "SELECT max(position) FROM {}.relay_position WHERE relay_name <> 'ingest'").format(
                sql.Identifier(settings.event_schema))).fetchone()
    except Exception:  # no relay has run against this store yet
        return None
    return None if row is None or row[0] is None else int(row[0])


@dataclass
class Parked:
    """The events a projection holds parked (decision 0007), oldest first: each a row of
    ``projection_failures`` (``notification_id`` is the operator's handle)."""

    projection: str
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def aggregates(self) -> int:
        return len({e["originator_id"] for e in self.events if e["status"] == "parked"})

    @property
    def count(self) -> int:
        return sum(1 for e in self.events if e["status"] == "parked")

    def to_dict(self) -> dict[str, Any]:
        return {"projection": self.projection, "parked": self.count,
                "aggregates": self.aggregates, "events": self.events}

    def prometheus(self) -> str:
        """The parked events and aggregates as gauges, in Prometheus' text exposition format."""
        label = f'{{projection="{self.projection}"}}'
        return "\n".join([
            "# HELP palimpsest_projection_parked Events parked: not applied until retried or "
            "skipped.",
            "# TYPE palimpsest_projection_parked gauge",
            f"palimpsest_projection_parked{label} {self.count}",
            "# HELP palimpsest_projection_parked_aggregates Aggregates with parked events.",
            "# TYPE palimpsest_projection_parked_aggregates gauge",
            f"palimpsest_projection_parked_aggregates{label} {self.aggregates}",
        ]) + "\n"


_PARKED = """SELECT notification_id, tenant_id, originator_id, originator_version, topic, reason,
    error, status, failures, failed_at AS since, last_failed_at, resolution, resolved_by,
    resolved_at
FROM {}.projection_failures WHERE projection = %s AND (status = 'parked' OR %s)
ORDER BY notification_id"""


def parked(db: Database, settings: Settings, *, resolved: bool = False,
           schema: str | None = None) -> Parked:
    """The events parked in the read models (of ``schema``, default ``settings.read_schema``);
    with ``resolved``, the retried and skipped ones too. ``db``: a role that reads every tenant's
    bookkeeping (the projector's, or the administrator)."""
    query = sql.SQL(_PARKED).format(sql.Identifier(schema or settings.read_schema))
    with db.connect() as conn, conn.cursor(row_factory=dict_row) as cur:
        events = cur.execute(query, (NAME, resolved)).fetchall()
    return Parked(NAME, [dict(e) for e in events])
