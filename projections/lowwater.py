"""How far into the event log the consumers of the relayed topics have come: each one's low-water
mark, the notification id up to which every event is handled.

The projector's mark is its log position (``projection_position``'s row of tenant ``*``): every
event up to it is applied, skipped or parked (listed in ``projection_failures``). The start's
catch-up reads the log from there; while the projector follows Kafka, :class:`LowWaterKeeper`
moves it on, found in the database — the tracking of each aggregate against the log — not in the
projector's memory, so several projectors of one consumer group, each given some partitions, move
one mark. The extraction workers' mark: every turn handed to them (``Ingestion.Received`` or
``RerunRequested``) up to it has a later event of its own (extracted, applied or dead-lettered).

A relay whose broker lost its messages (the embedded broker keeps its topics in memory, so every
start of it is empty) republishes from its consumers' mark, not from the start of the log: what
they handled is in the read models already (:mod:`infra.relay`'s ``resume_from``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from infra.postgres import EVENTS_TABLE, Database
from infra.redact import described
from infra.settings import Settings
from projections.cards import NAME

log = logging.getLogger(__name__)

#: The log position's tenant (:attr:`projections.projector.Projector.LOG`).
LOG = "*"

#: The first event after ``after`` (up to ``upto``) the projection has not handled: not tracked at
#: its version or later, and not parked with an earlier version of its aggregate.
_UNHANDLED = """
SELECT e.notification_id FROM {e}.{events} e
WHERE e.notification_id > %(after)s AND e.notification_id <= %(upto)s
  AND NOT EXISTS (SELECT 1 FROM {s}.projection_tracking t WHERE t.projection = %(p)s
                  AND t.originator_id = e.originator_id AND t.version >= e.originator_version)
  AND NOT EXISTS (SELECT 1 FROM {s}.projection_failures f WHERE f.projection = %(p)s
                  AND f.status = 'parked' AND f.originator_id = e.originator_id
                  AND f.originator_version <= e.originator_version)
ORDER BY e.notification_id LIMIT 1
"""
_HEAD = "SELECT coalesce(max(notification_id), 0) FROM {e}.{events}"
_LOG_POSITION = ("SELECT coalesce(max(position), 0) FROM {s}.projection_position "
                 "WHERE projection = %(p)s AND tenant_id = %(log)s")
_MARK = ("INSERT INTO {s}.projection_position (projection, tenant_id, position) "
         "VALUES (%(p)s, %(log)s, %(position)s) ON CONFLICT (projection, tenant_id) DO UPDATE SET "
         "position = greatest({s}.projection_position.position, excluded.position), "
         "updated_at = now()")
#: The first turn handed to extraction that has no later event of its own.
_TURN_PENDING = """
SELECT min(e.notification_id) FROM {e}.{events} e
WHERE e.topic = ANY(%(topics)s) AND NOT EXISTS (
    SELECT 1 FROM {e}.{events} later WHERE later.originator_id = e.originator_id
    AND later.originator_version > e.originator_version)
"""


def _names(event_schema: str, read_schema: str) -> dict[str, Any]:
    return {"e": sql.Identifier(event_schema), "events": sql.Identifier(EVENTS_TABLE),
            "s": sql.Identifier(read_schema)}


def log_position(conn: psycopg.Connection[Any], read_schema: str, projection: str) -> int:
    """The projection's low-water mark as stored (0 before its first catch-up)."""
    row = conn.execute(sql.SQL(_LOG_POSITION).format(s=sql.Identifier(read_schema)),
                       {"p": projection, "log": LOG}).fetchone()
    return int(_first(row) or 0)


def handled_up_to(conn: psycopg.Connection[Any], event_schema: str, read_schema: str,
                  projection: str, after: int) -> int:
    """The highest notification id up to which the projection has handled every event, looking
    from ``after`` (a mark it had reached) to the log's head."""
    names = _names(event_schema, read_schema)
    upto = int(_first(conn.execute(sql.SQL(_HEAD).format(**names)).fetchone()) or 0)
    if upto <= after:
        return after
    row = conn.execute(sql.SQL(_UNHANDLED).format(**names),
                       {"after": after, "upto": upto, "p": projection}).fetchone()
    return upto if row is None else int(_first(row)) - 1


def mark(conn: psycopg.Connection[Any], read_schema: str, projection: str, position: int) -> None:
    """Store the projection's mark (it only moves forward), as the log's tenant."""
    with conn.transaction():
        conn.execute("SELECT set_config('palimpsest.tenant', %s, true)", (LOG,))
        conn.execute(sql.SQL(_MARK).format(s=sql.Identifier(read_schema)),
                     {"p": projection, "log": LOG, "position": position})


def turns_handled_up_to(conn: psycopg.Connection[Any], event_schema: str,
                        topics: Sequence[str]) -> int:
    """The extraction workers' mark: the notification id before the first turn handed to them
    that has no later event (the log's head when there is none)."""
    names = _names(event_schema, event_schema)
    row = conn.execute(sql.SQL(_TURN_PENDING).format(**names), {"topics": list(topics)}).fetchone()
    pending = _first(row)
    if pending is None:
        return int(_first(conn.execute(sql.SQL(_HEAD).format(**names)).fetchone()) or 0)
    return int(pending) - 1


def projection_mark(db: Database, settings: Settings, projection: str = NAME) -> int:
    """Where the projection's consumers have come to, found now (for a relay's republish)."""
    with db.connect(autocommit=True) as conn:
        known = log_position(conn, settings.read_schema, projection)
        return handled_up_to(conn, settings.event_schema, settings.read_schema, projection, known)


def extraction_mark(db: Database, settings: Settings, topics: Sequence[str]) -> int:
    """Where the extraction workers have come to (for the ingest relay's republish)."""
    with db.connect(autocommit=True) as conn:
        return turns_handled_up_to(conn, settings.event_schema, topics)


def _first(row: Any) -> Any:
    if row is None:
        return None
    return next(iter(row.values())) if isinstance(row, dict) else row[0]


class LowWaterKeeper:
    """A thread of the projector process that moves the projection's mark on every ``interval``
    seconds while it follows Kafka (a catch-up moves it itself), until ``stop``."""

    def __init__(self, db: Database, event_schema: str, read_schema: str, projection: str,
                 stop: threading.Event, interval: float = 2.0) -> None:
        self.db = db
        self.event_schema, self.read_schema, self.projection = event_schema, read_schema, projection
        self.stop = stop
        self.interval = interval
        #: The mark last stored here.
        self.position = 0

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self._run, name="low-water mark", daemon=True)
        thread.start()
        return thread

    def once(self) -> int:
        """Move the mark on as far as the read models allow; the mark stored."""
        with self.db.connect(autocommit=True) as conn:
            known = max(self.position, log_position(conn, self.read_schema, self.projection))
            reached = handled_up_to(conn, self.event_schema, self.read_schema, self.projection,
                                    known)
            if reached > known:
                mark(conn, self.read_schema, self.projection, reached)
        self.position = reached
        return reached

    def _run(self) -> None:
        while not self.stop.wait(self.interval):
            try:
                self.once()
            except psycopg.Error as error:  # the database is away: the next turn tries again
                log.debug("low-water mark not moved: %s", described(error))
