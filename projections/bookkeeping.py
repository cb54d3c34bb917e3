"""The projector's bookkeeping in SQL: tenant locks, tracking, positions and parked events.

Statements are composed once per schema and rendered to strings (composing per call is slow).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from psycopg import sql

from projections.parking import COLUMNS, Failure


@dataclass
class Batch:
    """What one transaction knows: tenant → aggregate → tracked version; each parked aggregate's
    first parked event and the tenants its rows are under; the failures it recorded; the
    erasures it applied."""

    versions: dict[str, dict[UUID, int]] = field(default_factory=dict)
    parked: dict[UUID, Failure] = field(default_factory=dict)
    parked_under: dict[UUID, set[str]] = field(default_factory=dict)
    recorded: list[Failure] = field(default_factory=list)
    #: The erasures (``Erasure.Erased`` events) it applied.
    erased: list[Any] = field(default_factory=list)


def channel(schema: str) -> str:
    """The notification channel on which projectors of ``schema`` say they applied events (the
    embedder listens: :class:`projections.embeddings.EmbeddingProjection`)."""
    return f"palimpsest_cards_{schema}"


class Bookkeeping:
    """The statements of one schema's bookkeeping."""

    def __init__(self, schema: str) -> None:
        s = sql.Identifier(schema)
        #: Said at commit on the schema's channel when a batch applied events (the embedder wakes).
        self.notify = "SELECT pg_notify(%s, '')"
        self.set_tenant = "SELECT set_config('palimpsest.tenant', %s, true)"
        #: One transaction at a time per tenant (and projection and schema), locks taken in one
        #: order: two projectors given the same events at once (consumer-group members during a
        #: rebalance, a starting member's catch-up) apply them once.
        self.lock_tenants = (
            "SELECT count(pg_advisory_xact_lock(k)) FROM (SELECT DISTINCT "
            "hashtextextended(%s || '/' || t, 0) AS k FROM unnest(%s::text[]) AS t ORDER BY k) s")
        #: The tracking and the first parked event of the batch's aggregates, in one round trip.
        self.state = sql.SQL(
            "(SELECT tenant_id, originator_id, version, NULL::bigint, NULL::text "
            "FROM {s}.projection_tracking WHERE projection = %(p)s AND originator_id = ANY(%(o)s)) "
            "UNION ALL (SELECT DISTINCT ON (originator_id, tenant_id) tenant_id, originator_id, "
            "originator_version, notification_id, reason FROM {s}.projection_failures "
            "WHERE projection = %(p)s AND status = 'parked' AND originator_id = ANY(%(o)s) "
            "ORDER BY originator_id, tenant_id, originator_version)").format(s=s)
        self.track = sql.SQL(
            "INSERT INTO {}.projection_tracking (projection, tenant_id, originator_id, version) "
            "SELECT %s, %s, o, v FROM unnest(%s::uuid[], %s::bigint[]) AS t(o, v) "
            "ON CONFLICT (projection, tenant_id, originator_id) "
            "DO UPDATE SET version = excluded.version").format(s)
        self.position = sql.SQL(
            "INSERT INTO {}.projection_position (projection, tenant_id, position) "
            "VALUES (%s, %s, %s) ON CONFLICT (projection, tenant_id) DO UPDATE SET "
            "position = greatest({}.projection_position.position, excluded.position), "
            "updated_at = now()").format(s, s)
        #: Both at once, when the batch applied some of the tenant's events.
        self.track_and_position = sql.Composed(
            [sql.SQL("WITH t AS ("), self.track, sql.SQL(") "), self.position])
        #: A failure met (again): a skip decision overrides whatever the row said.
        self.failure = sql.SQL(
            "INSERT INTO {s}.projection_failures ({columns}) VALUES ({values}) "
            "ON CONFLICT (projection, notification_id) DO UPDATE SET "
            "originator_id = excluded.originator_id, "
            "originator_version = excluded.originator_version, topic = excluded.topic, "
            "reason = excluded.reason, error = excluded.error, status = excluded.status, "
            "resolution = excluded.resolution, resolved_by = excluded.resolved_by, "
            "resolved_at = excluded.resolved_at, last_failed_at = now(), "
            "failures = {s}.projection_failures.failures + (excluded.status = 'parked')::int "
            "WHERE {s}.projection_failures.status <> 'skipped' OR excluded.status = 'skipped'"
        ).format(s=s, columns=sql.SQL(", ").join(map(sql.Identifier, COLUMNS)),
                 values=sql.SQL(", ").join(sql.Placeholder() * len(COLUMNS)))
        self.unpark = sql.SQL(
            "UPDATE {}.projection_failures SET status = 'retried', resolved_at = now() "
            "WHERE projection = %s AND originator_id = %s AND status = 'parked'").format(s)
        self.met_again = sql.SQL(
            "UPDATE {}.projection_failures SET failures = failures + 1, last_failed_at = now() "
            "WHERE projection = %s AND notification_id = %s").format(s)
        self.log_position = sql.SQL(
            "SELECT position FROM {}.projection_position WHERE projection = %s "
            "AND tenant_id = %s").format(s)
        for name, value in list(vars(self).items()):
            if isinstance(value, sql.Composable):
                setattr(self, name, value.as_string(None))

    def read_state(self, cur: Any, name: str, originators: set[UUID], state: Batch) -> None:
        """Tracking and parked aggregates of a whole batch in one round trip, into ``state`` (the
        projector role reads every tenant's bookkeeping; it writes only the tenant it set)."""
        cur.execute(self.state, {"p": name, "o": list(originators)})
        for tenant_id, originator_id, version, notification_id, reason in cur.fetchall():
            if notification_id is None:
                state.versions.setdefault(tenant_id, {})[originator_id] = version
                continue
            state.parked_under.setdefault(originator_id, set()).add(tenant_id)
            first = state.parked.get(originator_id)
            if first is None or version < (first.originator_version or 0):
                state.parked[originator_id] = Failure(
                    tenant_id, notification_id, originator_id, version, None, reason, "")
