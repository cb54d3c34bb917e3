"""Heartbeats: which of the broker, the relay and the projector are alive, and when each last moved.

Every process writes, every ``interval`` seconds, one row per role it runs (``broker`` by the
process that owns the embedded broker, ``relay``, ``projector``) into
``<event schema>.heartbeats``, keyed by role and process (``host:pid``). A row is written only
while its part says it is working (a relay thread that has not come round its loop for a while
does not beat), and marked stopped when the process stops cleanly. The table lives beside the
relay's position in the event schema, not in the read schema: a rebuild swaps the read schema.
Both the runtime role (the relay) and the projector role write it.

A role is *alive* when one of its rows beat within :data:`LIVE_INTERVALS` of its intervals and is
not marked stopped, *dead* when it has rows but none alive, *unknown* when it never beat here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

log = logging.getLogger(__name__)

TABLE = "heartbeats"
ROLES = ("broker", "relay", "projector")
#: A heartbeat older than this many of its intervals means its part is dead.
LIVE_INTERVALS = 3

_DDL = """
CREATE TABLE IF NOT EXISTS {schema}.{table} (
    role text NOT NULL,
    process text NOT NULL,
    pid integer NOT NULL,
    interval_s real NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    beat_at timestamptz NOT NULL DEFAULT now(),
    progress_at timestamptz,
    detail text,
    stopped_at timestamptz,
    tenant_id text NOT NULL DEFAULT '*',
    PRIMARY KEY (role, process)
);
"""


def ensure_heartbeat_table(conn: psycopg.Connection[Any], schema: str, writers: Sequence[str]) -> None:
    """Create ``<schema>.heartbeats`` (idempotent) and let ``writers`` read and write it."""
    names = {"schema": sql.Identifier(schema), "table": sql.Identifier(TABLE)}
    conn.execute(sql.SQL(_DDL).format(**names))
    for writer in writers:
        conn.execute(sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.{table} TO {role}").format(
            role=sql.Identifier(writer), **names))


@dataclass(frozen=True)
class Beat:
    """What a part says about itself: whether it works, when it last made progress (epoch
    seconds), and a word on what it does."""

    alive: bool
    progress_at: float | None = None
    detail: str | None = None


#: A part that does not work keeps its last beat (a new row gets one long past).
_UPSERT = """
INSERT INTO {schema}.{table} AS h (role, process, pid, interval_s, beat_at, progress_at, detail)
VALUES (%(role)s, %(process)s, %(pid)s, %(interval)s,
        CASE WHEN %(alive)s THEN now() ELSE 'epoch'::timestamptz END,
        to_timestamp(%(progress)s), %(detail)s)
ON CONFLICT (role, process) DO UPDATE SET
    beat_at = CASE WHEN %(alive)s THEN now() ELSE h.beat_at END,
    progress_at = coalesce(EXCLUDED.progress_at, h.progress_at),
    detail = EXCLUDED.detail, stopped_at = NULL
"""


class Heartbeats:
    """Writes this process's heartbeats on a thread of its own, through its own connection
    (``connect(**kwargs)`` opens one)."""

    def __init__(self, connect: Callable[..., psycopg.Connection[Any]], schema: str,
                 interval: float = 2.0) -> None:
        self.connect = connect
        self.schema = schema
        self.interval = interval
        self.process = f"{socket.gethostname()}:{os.getpid()}"
        self._probes: dict[str, Callable[[], Beat | None]] = {}
        self._conn: psycopg.Connection[Any] | None = None
        self._failing = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, role: str, probe: Callable[[], Beat | None]) -> Heartbeats:
        """Beat for ``role`` with what ``probe()`` says (None: nothing to say this time)."""
        self._probes[role] = probe
        return self

    def start(self) -> Heartbeats:
        self._thread = threading.Thread(target=self._run, name="heartbeats", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.beat()
            self._stop.wait(self.interval)

    def _names(self) -> dict[str, sql.Identifier]:
        return {"schema": sql.Identifier(self.schema), "table": sql.Identifier(TABLE)}

    def _execute(self, statements: list[tuple[sql.Composed, Any]]) -> bool:
        with self._lock:
            return self._execute_now(statements)

    def _execute_now(self, statements: list[tuple[sql.Composed, Any]]) -> bool:
        try:
            if self._conn is None or self._conn.closed:
                self._conn = self.connect(autocommit=True, connect_timeout=3)
            with self._conn.transaction():
                for statement, params in statements:
                    self._conn.execute(statement, params)
        except psycopg.Error as error:
            if not self._failing:
                log.warning("heartbeats: cannot write to PostgreSQL: %s", str(error).strip())
            self._failing = True
            self._close()
            return False
        if self._failing:
            log.warning("heartbeats: writing again")
        self._failing = False
        return True

    def beat(self) -> bool:
        """Write one heartbeat per role whose part says it works (the others keep their last one)."""
        statement = sql.SQL(_UPSERT).format(**self._names())
        rows = []
        for role, probe in list(self._probes.items()):
            try:
                beat = probe()
            except Exception as error:  # a probe that fails says its part does not work
                beat = Beat(False, detail=f"probe failed: {error}")
            if beat is None:
                continue
            rows.append((statement, {"role": role, "process": self.process, "pid": os.getpid(),
                                     "interval": self.interval, "alive": beat.alive,
                                     "progress": beat.progress_at, "detail": beat.detail}))
        return self._execute(rows)

    def stop(self) -> None:
        """Stop beating and mark this process's rows stopped (a dead part, said at once)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        self._mark_stopped(self.process)
        with self._lock:
            self._close()

    def mark_stopped(self, pid: int) -> None:
        """Mark the rows of another process of this host stopped (a child this process killed)."""
        self._mark_stopped(f"{socket.gethostname()}:{pid}")

    def _mark_stopped(self, process: str) -> None:
        statement = sql.SQL("UPDATE {schema}.{table} SET stopped_at = now() WHERE process = %s"
                            ).format(**self._names())
        self._execute([(statement, (process,))])

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()


@dataclass(frozen=True)
class Liveness:
    """One role's state as the heartbeats tell it."""

    role: str
    state: str  # alive | dead | unknown
    beat_at: datetime | None = None
    progress_at: datetime | None = None
    process: str | None = None
    detail: str | None = None
    #: Seconds since the freshest heartbeat.
    age: float | None = None
    #: Its process said it stopped (a clean stop, or its supervisor killed it).
    stopped: bool = False


_READ = """
SELECT DISTINCT ON (role) role, process, beat_at, detail,
       stopped_at IS NULL AND beat_at > now() - make_interval(secs => interval_s * %s) AS alive,
       extract(epoch FROM now() - beat_at)::float8 AS age,
       max(progress_at) OVER (PARTITION BY role) AS progress_at, stopped_at IS NOT NULL AS stopped
FROM {schema}.{table}
WHERE role = ANY(%s)
ORDER BY role, 5 DESC, beat_at DESC
"""


def read_liveness(conn: psycopg.Connection[Any], schema: str,
                  roles: Sequence[str] = ROLES) -> dict[str, Liveness]:
    """Each role's liveness, computed with the database's clock (every role unknown where no
    heartbeat table exists yet)."""
    found = {role: Liveness(role, "unknown") for role in roles}
    try:
        with conn.transaction():
            rows = conn.execute(sql.SQL(_READ).format(
                schema=sql.Identifier(schema), table=sql.Identifier(TABLE)),
                (LIVE_INTERVALS, list(roles))).fetchall()
    except psycopg.errors.UndefinedTable:
        return found
    for role, process, beat_at, detail, alive, age, progress_at, stopped in rows:
        found[role] = Liveness(role, "alive" if alive else "dead", beat_at, progress_at, process,
                               detail, age, stopped)
    return found
