"""Turns on contended aggregates: a command saves holding the locks of the stored aggregates it
changes, so writers of one slot take turns.

Writers hammering one slot otherwise keep losing races to each other until their retries run out
(decision 0006: 4 writers × 10 writes, a quarter of the calls failed; taking the lock only after a
lost race still failed one call in ten, the lock holder losing to fresh writers). A command takes
the locks once it has decided: when they were free (the common case) it saves that decision;
when another writer held one, what it decided is stale and it decides again, holding them. A
command that only creates aggregates (a new card) takes none.

The locks only order writers; they decide nothing. The store's version check still settles every
race, so a lock that cannot be had (no connection, a timeout) is skipped: the command then retries
as it would without one.

- :class:`LocalLocks`: threads of one process (the in-memory store), a fixed set of striped locks;
- :class:`PostgresLocks`: every process on one database, PostgreSQL session advisory locks held on
  connections of their own (a lock goes with its connection, so a dead process holds none),
  behind the local stripes: the threads of one process queue locally.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from typing import Any
from uuid import UUID

log = logging.getLogger(__name__)

#: The first key of the two-key advisory lock form: a key space of its own, apart from the
#: one-key locks the projector and the leases take.
LOCK_CLASS = 0x50414C  # "PAL"


def lock_key(aggregate_id: UUID) -> int:
    """A signed 32-bit key: two aggregates that share one only take turns needlessly."""
    return int.from_bytes(aggregate_id.bytes[:4], "big", signed=True)


class LocalLocks:
    """Striped locks for the threads of one process, taken in key order (no deadlock)."""

    def __init__(self, stripes: int = 256, timeout: float = 5.0) -> None:
        self._stripes = [threading.Lock() for _ in range(stripes)]
        self.timeout = timeout

    def acquire(self, keys: Sequence[int]) -> tuple[Any, bool] | None:
        """Hold every key's lock: (a token for :meth:`release`, whether another writer held one
        meanwhile), or None if one is not had in time."""
        taken: list[threading.Lock] = []
        waited = False
        for index in sorted({key % len(self._stripes) for key in keys}):
            stripe = self._stripes[index]
            if not stripe.acquire(blocking=False):
                waited = True
                if not stripe.acquire(timeout=self.timeout):
                    self._release_local(taken)
                    return None
            taken.append(stripe)
        return taken, waited

    def release(self, token: Any) -> None:
        self._release_local(token)

    @staticmethod
    def _release_local(taken: list[threading.Lock]) -> None:
        for stripe in reversed(taken):
            stripe.release()

    def close(self) -> None:
        pass


#: Every key at once if none is held elsewhere; else nothing (the caller then waits in key order).
_TRY = "SELECT bool_and(pg_try_advisory_lock(%s::int, k)) FROM (SELECT unnest(%s::int[]) AS k ORDER BY k) s"
_WAIT = "SELECT count(pg_advisory_lock(%s::int, k)) FROM (SELECT unnest(%s::int[]) AS k ORDER BY k) s"


class PostgresLocks(LocalLocks):
    """Advisory locks of every process on one database, after the local stripes."""

    def __init__(self, connection_kwargs: dict[str, Any], connections: int = 8,
                 timeout: float = 5.0) -> None:
        super().__init__(timeout=timeout)
        self._kwargs = connection_kwargs
        self._connections = connections
        self._pool: Any = None
        self._opening = threading.Lock()

    def acquire(self, keys: Sequence[int]) -> tuple[Any, bool] | None:
        held = super().acquire(keys)
        if held is None:
            return None
        local, waited = held
        import psycopg

        conn = None
        try:
            conn = self._connection_pool().getconn(timeout=self.timeout)
            ordered = sorted(set(keys))
            if not conn.execute(_TRY, (LOCK_CLASS, ordered)).fetchone()[0]:
                waited = True
                conn.execute("SELECT pg_advisory_unlock_all()")  # then wait, in key order
                conn.execute(_WAIT, (LOCK_CLASS, ordered))
        except (psycopg.Error, OSError) as error:  # a pool timeout is a psycopg.Error too
            log.warning("aggregate lock not taken, going on without it: %s", error)
            self._discard(conn)
            self._release_local(local)
            return None
        return (local, conn), waited

    def release(self, token: Any) -> None:
        local, conn = token
        import psycopg

        try:
            conn.execute("SELECT pg_advisory_unlock_all()")
            self._connection_pool().putconn(conn)
        except psycopg.Error:
            self._discard(conn)  # the locks go with the connection
        finally:
            self._release_local(local)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def _connection_pool(self) -> Any:
        with self._opening:  # opened on first use: a process that only reads needs none
            if self._pool is None:
                from psycopg_pool import ConnectionPool

                timeout_ms = int(self.timeout * 1000)
                kwargs = {k: v for k, v in self._kwargs.items() if k != "row_factory"}
                self._pool = ConnectionPool(
                    kwargs={**kwargs, "autocommit": True, "options": f"-c lock_timeout={timeout_ms}"},
                    min_size=0, max_size=self._connections, timeout=self.timeout,
                    name="palimpsest-aggregate-locks", open=True)
            return self._pool

    def _discard(self, conn: Any) -> None:
        if conn is None or self._pool is None:
            return
        conn.close()
        self._pool.putconn(conn)


class Turn:
    """The locks one command holds, on the aggregates it decides about; widened (released and
    taken again in key order) when a later decision names more."""

    def __init__(self, locks: LocalLocks | None) -> None:
        self.locks = locks
        self.keys: tuple[int, ...] = ()
        self._token: Any = None

    def take(self, aggregate_ids: Iterable[UUID]) -> bool:
        """Hold the aggregates' locks. True when another writer held one meanwhile: what was
        decided before may be stale."""
        if self.locks is None:
            return False
        keys = tuple(sorted({*self.keys, *map(lock_key, aggregate_ids)}))
        if keys == self.keys or not keys:
            return False
        self.release()
        held = self.locks.acquire(keys)
        if held is None:
            return False
        self._token, waited = held
        self.keys = keys
        return waited

    def release(self) -> None:
        if self._token is not None and self.locks is not None:
            self.locks.release(self._token)
        self._token, self.keys = None, ()

    def __enter__(self) -> Turn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
