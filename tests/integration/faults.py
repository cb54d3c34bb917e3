"""What the fault tests (and ``tests/benchmarks/bench_faults.py``) share: a steady stream of writes
across a fault, and the check that every event of it was applied exactly once."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from psycopg import sql

from infra.postgres import Database
from infra.settings import Settings
from projections.replay import rebuild
from services.command.memory import Palimpsest
from tests.integration.test_projections import COMPARED, dump
from tests.support import state


@dataclass
class Stream:
    """Writes one new value of one multi-value slot every ``period`` seconds on a thread of its own
    (each write is one event and one card), remembering when each was accepted."""

    app: Palimpsest
    tenant: str
    period: float = 0.02
    written: list[tuple[float, Any]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Stream:
        self._thread = threading.Thread(target=self._run, daemon=True, name="writes")
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            result = self.app.remember(self.tenant, state("skills", f"skill {len(self.written)}"))
            self.written.append((time.monotonic(), result))
            self._stop.wait(self.period)

    def stop(self) -> int:
        """Stop writing; the position of the last write."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        return self.last

    @property
    def last(self) -> int:
        return int(self.written[-1][1].position) if self.written else 0

    def first_after(self, moment: float, timeout: float = 30.0) -> int:
        """The position of the first write accepted after ``moment`` (monotonic), once there is one."""
        deadline = time.monotonic() + timeout
        while True:
            after = [result.position for at, result in list(self.written) if at > moment]
            if after:
                return int(after[0])
            assert time.monotonic() < deadline, "no write was accepted"
            time.sleep(0.01)

    def between(self, start: float, end: float) -> int:
        """How many writes were accepted in ``[start, end)`` (monotonic)."""
        return sum(1 for at, _ in self.written if start <= at < end)


def wait_projected(read: Any, tenant: str, position: int, timeout: float = 60.0) -> float:
    """Wait until the tenant's read models include ``position``; the monotonic time they did."""
    deadline = time.monotonic() + timeout
    while read(tenant) < position:
        assert time.monotonic() < deadline, f"projected {read(tenant)} < {position} after {timeout} s"
        time.sleep(0.05)
    return time.monotonic()


def first_move(read: Any, stream: Stream, killed: float, timeout: float = 60.0) -> float:
    """Wait until the first write accepted after ``killed`` is projected: the projection moves again
    (what was fetched before the kill does not count); the monotonic time it was."""
    return wait_projected(read, stream.tenant, stream.first_after(killed), timeout)


def assert_applied_once(admin: Database, settings: Settings, app: Palimpsest, tenant: str,
                        stream: Stream, into: str) -> None:
    """Every write is in the read models once: one card each, the slot's tracking at its last
    version, and the read models equal a rebuild of the log, table by table."""
    read = sql.Identifier(settings.read_schema)
    aggregate = stream.written[0][1].aggregate_id
    with admin.connect() as conn:
        cards = conn.execute(sql.SQL("SELECT count(*) FROM {}.cards WHERE tenant_id = %s AND "
                                     "kind = 'state'").format(read), (tenant,)).fetchone()
        tracked = conn.execute(sql.SQL(
            "SELECT version FROM {}.projection_tracking WHERE tenant_id = %s AND originator_id = %s"
        ).format(read), (tenant, aggregate)).fetchone()
    versions = [e.originator_version for e in app.events.get(aggregate)]
    assert cards is not None and cards[0] == len(stream.written), "a write is missing or doubled"
    assert tracked is not None and tracked[0] == versions[-1] == len(versions)
    report = rebuild(settings, app, into=into)
    assert report.events >= len(stream.written)
    for table in COMPARED:
        live = dump(admin, settings.read_schema, table, tenant)
        rebuilt = dump(admin, into, table, tenant)
        assert live == rebuilt, f"{table}: exactly once is broken"
