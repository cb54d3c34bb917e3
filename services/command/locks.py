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

The statement that takes the PostgreSQL locks also reads how many times erasure keys were
destroyed (:func:`infra.keyring.destroyed_count`): a command decided on aggregates another process
may have decoded before an erasure, and :meth:`Turn.take` tells it so (decision 0012).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple
from uuid import UUID

log = logging.getLogger(__name__)

#: The first key of the two-key advisory lock form: a key space of its own, apart from the
#: one-key locks the projector and the leases take.
LOCK_CLASS = 0x50414C  # "PAL"


def lock_key(aggregate_id: UUID) -> int:
    """A signed 32-bit key: two aggregates that share one only take turns needlessly."""
    return int.from_bytes(aggregate_id.bytes[:4], "big", signed=True)


class Held(NamedTuple):
    """Locks held: the token :meth:`LocalLocks.release` takes, whether another writer held one
    meanwhile, and how many times erasure keys had been destroyed when they were taken (None:
    not known, as in one process, where an erasure drops what was decoded itself)."""

    token: Any
    waited: bool
    destroyed: int | None = None


class LocalLocks:
    """Striped locks for the threads of one process, taken in key order (no deadlock)."""

    def __init__(self, stripes: int = 256, timeout: float = 5.0) -> None:
        self._stripes = [threading.Lock() for _ in range(stripes)]
        self.timeout = timeout

    def acquire(self, keys: Sequence[int]) -> Held | None:
        """Hold every key's lock, or None if one is not had in time."""
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
        return Held(taken, waited)

    def release(self, token: Any) -> None:
        self._release_local(token)

    @staticmethod
    def _release_local(taken: list[threading.Lock]) -> None:
        for stripe in reversed(taken):
            stripe.release()

    def close(self) -> None:
        pass


#: Every key at once if none is held elsewhere; else nothing (the caller then waits in key order).
#: ``{destroyed}``: the key ring's destructions, read in the same statement.
_TRY = ("SELECT bool_and(pg_try_advisory_lock(%s::int, k)), {destroyed} "
        "FROM (SELECT unnest(%s::int[]) AS k ORDER BY k) s")
_WAIT = ("SELECT count(pg_advisory_lock(%s::int, k)), {destroyed} "
         "FROM (SELECT unnest(%s::int[]) AS k ORDER BY k) s")


class PostgresLocks(LocalLocks):
    """Advisory locks of every process on one database, after the local stripes. ``schema``: the
    event schema whose key ring's destructions are read with the locks (none: not read)."""

    def __init__(self, connection_kwargs: dict[str, Any], connections: int = 8,
                 timeout: float = 5.0, schema: str | None = None) -> None:
        super().__init__(timeout=timeout)
        self._kwargs = connection_kwargs
        self._connections = connections
        self._schema = schema
        self._pool: Any = None
        self._opening = threading.Lock()
        self._try: Any = None  # the statements, once the pool is open
        self._wait: Any = None

    def acquire(self, keys: Sequence[int]) -> Held | None:
        held = super().acquire(keys)
        if held is None:
            return None
        local, waited, _ = held
        import psycopg

        conn = None
        try:
            conn = self._connection_pool().getconn(timeout=self.timeout)
            ordered = sorted(set(keys))
            free, destroyed = conn.execute(self._try, (LOCK_CLASS, ordered)).fetchone()
            if not free:
                waited = True
                conn.execute("SELECT pg_advisory_unlock_all()")  # then wait, in key order
                destroyed = conn.execute(self._wait, (LOCK_CLASS, ordered)).fetchone()[1]
        except (psycopg.Error, OSError) as error:  # a pool timeout is a psycopg.Error too
            log.warning("aggregate lock not taken, going on without it: %s", error)
            self._discard(conn)
            self._release_local(local)
            return None
        return Held((local, conn), waited, destroyed)

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
                self._read_destroyed()
            return self._pool

    def _read_destroyed(self) -> None:
        """The lock statements read the key ring's destructions too, when the store has the
        sequence (a store bootstrapped by an older release has not, until bootstrapped again)."""
        from psycopg import sql

        from infra.keyring import DESTROYED_SEQUENCE, destroyed_count

        count: Any = sql.SQL("NULL::bigint")
        if self._schema is not None:
            try:
                with self._pool.connection(timeout=self.timeout) as conn:
                    found = conn.execute("SELECT to_regclass(%s)", (
                        sql.Identifier(self._schema, DESTROYED_SEQUENCE).as_string(conn),)).fetchone()
                if found[0] is not None:
                    count = destroyed_count(self._schema)
            except Exception as error:  # noqa: BLE001 - the locks work without it
                log.warning("erasures made by other processes are not looked for: %s", error)
        self._try = sql.SQL(_TRY).format(destroyed=count)  # type: ignore[arg-type]
        self._wait = sql.SQL(_WAIT).format(destroyed=count)  # type: ignore[arg-type]

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
        #: How many times erasure keys had been destroyed when the locks were last taken.
        self.destroyed: int | None = None

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
        self._token, waited, self.destroyed = held
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
