"""The relay's bookkeeping in PostgreSQL, and its feed of the notification log.

Position. The relay keeps its own row in ``<event schema>.relay_position`` (one per relay name)
and advances it only after the broker acknowledged every message of a batch (see
:mod:`infra.relay`). The row's ``tenant_id`` is ``'*'``: one relay carries every tenant's events.
The same administrator step creates the pipeline's heartbeat table (:mod:`infra.heartbeats`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from eventsourcing.persistence import Notification, PersistenceError
from psycopg import sql

from infra.heartbeats import ensure_heartbeat_table
from infra.settings import Settings

POSITION_TABLE = "relay_position"


# --- PostgreSQL ------------------------------------------------------------------------------------

_RELAY_TABLE = """
CREATE TABLE IF NOT EXISTS {schema}.{table} (
    relay_name text PRIMARY KEY,
    position bigint NOT NULL,
    tenant_id text NOT NULL DEFAULT '*',
    updated_at timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE {schema}.{table}
    ADD COLUMN IF NOT EXISTS published bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS topic text,
    ADD COLUMN IF NOT EXISTS topic_id text,
    ADD COLUMN IF NOT EXISTS offsets jsonb NOT NULL DEFAULT '{{}}'::jsonb;
GRANT SELECT, INSERT, UPDATE ON {schema}.{table} TO {role};
"""


def ensure_relay_table(
    conn: psycopg.Connection[Any], settings: Settings, readers: Sequence[str] = ()
) -> None:
    """Create ``<event schema>.relay_position`` (idempotent), let the runtime role (the relay)
    read and write it and ``readers`` (e.g. a status command's role) read it; and the heartbeat
    table, which the runtime role and ``readers`` (the projector role) write. ``conn`` is an
    administrator's connection; the schema and the roles must exist."""
    table = sql.Identifier(POSITION_TABLE)
    schema = sql.Identifier(settings.event_schema)
    conn.execute(sql.SQL(_RELAY_TABLE).format(
        schema=schema, table=table, role=sql.Identifier(settings.runtime_role),
    ))
    for reader in readers:
        conn.execute(sql.SQL("GRANT SELECT ON {}.{} TO {}").format(
            schema, table, sql.Identifier(reader)
        ))
    ensure_heartbeat_table(conn, settings.event_schema, [settings.runtime_role, *readers])
    if not conn.autocommit:
        conn.commit()


def log_head(conn: psycopg.Connection[Any], schema: str = "palimpsest") -> int:
    """The newest notification id in the event log (0 when it is empty)."""
    from infra.postgres import EVENTS_TABLE  # here, so infra.postgres may import this module

    row = conn.execute(
        sql.SQL("SELECT coalesce(max(notification_id), 0) FROM {}.{}").format(
            sql.Identifier(schema), sql.Identifier(EVENTS_TABLE)
        )
    ).fetchone()
    return int(_first(row))


def _first(row: Any) -> Any:
    if row is None:
        return None
    if isinstance(row, dict):
        return next(iter(row.values()))
    return row[0]


@dataclass
class RelayState:
    """What the relay keeps in its ``relay_position`` row."""

    position: int = 0
    #: Messages acknowledged since position 0.
    published: int = 0
    topic: str | None = None
    topic_id: str | None = None
    #: partition → offset of the first message of the newest acknowledged batch there.
    offsets: dict[int, int] = field(default_factory=dict)


# --- the feed: the subscription, read in batches ---------------------------------------------------


class Feed:
    """Iterates an eventsourcing subscription on a thread and hands out batches with a timeout
    (a subscription's ``__next__`` blocks until the next notification). With ``topics`` (event
    topic strings, as eventsourcing stores them), only the notifications of those events."""

    def __init__(self, recorder: Any, gt: int, capacity: int, topics: Sequence[str] = ()) -> None:
        self.gt = gt
        self._queue: queue.Queue[Notification] = queue.Queue(maxsize=capacity)
        self._closed = threading.Event()
        self._error: BaseException | None = None
        self._subscription = recorder.subscribe(gt=gt, topics=list(topics))
        self._thread = threading.Thread(target=self._pump, name=f"relay-feed-{gt}", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        try:
            with self._subscription as subscription:
                for notification in subscription:
                    while not self._closed.is_set():
                        try:
                            self._queue.put(notification, timeout=0.1)
                            break
                        except queue.Full:
                            continue
                    if self._closed.is_set():
                        break
        except BaseException as error:  # noqa: BLE001 - handed to the relay's thread
            self._error = error

    def take(self, limit: int, timeout: float) -> list[Notification]:
        """Up to ``limit`` notifications: waits ``timeout`` seconds for the first one only."""
        try:
            batch = [self._queue.get(timeout=timeout)]
        except queue.Empty:
            self._raise()
            return []
        while len(batch) < limit:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return batch

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error
        if not self._thread.is_alive() and not self._closed.is_set():
            raise PersistenceError("the event store subscription ended")

    def close(self) -> None:
        self._closed.set()
        self._subscription.stop()
        self._thread.join(timeout=10)
