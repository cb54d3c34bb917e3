"""How far behind the log each consumer is: the lag metric and ``palimpsest status``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from psycopg import sql

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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

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
        return "\n".join(lines) + "\n"


def read_status(db: Database, settings: Settings) -> Status:
    """Read as the projector role, which may read every tenant's bookkeeping."""
    events = sql.Identifier(settings.event_schema)
    read = sql.Identifier(settings.read_schema)
    with db.connect() as conn:
        head = conn.execute(sql.SQL("SELECT coalesce(max(notification_id), 0) FROM {}.{}").format(
            events, sql.Identifier(EVENTS_TABLE))).fetchone()[0]  # type: ignore[index]
        relay = _relay_position(conn, settings)
        rows = conn.execute(sql.SQL(
            "SELECT tenant_id, position FROM {}.projection_position WHERE projection = %s"
        ).format(read), (NAME,)).fetchall()
        failures = conn.execute(sql.SQL(
            "SELECT tenant_id, notification_id, originator_id::text, originator_version, topic, "
            "error, failed_at::text FROM {}.projection_failures WHERE projection = %s "
            "ORDER BY notification_id").format(read), (NAME,)).fetchall()
        cards = conn.execute(sql.SQL("SELECT count(*) FROM {}.cards").format(read)).fetchone()[0]  # type: ignore[index]
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
    return Status(head, relay, relay_lag, [projection], cards, pending)


def _relay_position(conn: Any, settings: Settings) -> int | None:
    try:
        with conn.transaction():
            row = conn.execute(sql.SQL("SELECT max(position) FROM {}.relay_position").format(
                sql.Identifier(settings.event_schema))).fetchone()
    except Exception:  # no relay has run against this store yet
        return None
    return None if row is None or row[0] is None else int(row[0])
