"""Group commit: the decisions of concurrent commands saved in one transaction of the event store.

The store takes ``LOCK TABLE … IN EXCLUSIVE MODE`` for every transaction (its notification ids
have no gaps) and holds it through the commit's flush to disk, so commands saved one transaction
each take turns on that flush: four callers wait about four times as long as one. Here a command
that finds another one's save under way queues its decision; when that save ends, the first queued
command saves every queued decision in one transaction and hands each its recordings. One caller
alone saves at once, as before. ``tests/benchmarks/bench_commands.py`` measures both ways.

A batch may hold several tenants' decisions: each is written as the tenant whose request made it,
a run per tenant in the one transaction (row-level security, :mod:`infra.tenant_runs`).

A batch that the store refuses (a lost race, for one of its commands; a write under a unit an
erasure destroyed, ``UnitErasedError``) is saved again one decision at a time, so only the command
that lost the race or wrote under the erased unit sees it; the others are stored as if alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from eventsourcing.application import ProcessingEvent
from eventsourcing.persistence import PersistenceError, Recording

from domain.errors import PalimpsestError
from infra.tenancy import acting_for, current_tenant

Record = Callable[[ProcessingEvent[Any]], list[Recording[Any]]]


class _Entry:
    __slots__ = ("decision", "tenant", "leads", "recordings", "error", "woken")

    def __init__(self, decision: ProcessingEvent[Any]) -> None:
        self.decision = decision
        self.tenant = current_tenant()
        self.leads = False
        self.recordings: list[Recording[Any]] | None = None
        self.error: BaseException | None = None
        self.woken = threading.Event()


class GroupCommit:
    """Saves decisions through ``record`` (one transaction each call), grouping concurrent ones;
    ``limit``: the most decisions in one transaction."""

    def __init__(self, record: Record, limit: int = 64) -> None:
        self._record = record
        self.limit = limit
        self._lock = threading.Lock()
        self._queue: list[_Entry] = []
        self._saving = False

    def save(self, decision: ProcessingEvent[Any]) -> list[Recording[Any]]:
        entry = _Entry(decision)
        with self._lock:
            self._queue.append(entry)
            if not self._saving:
                self._saving = entry.leads = True
        if not entry.leads:
            entry.woken.wait()  # saved by another, or made the one to save
        if entry.recordings is None and entry.error is None:
            self._save_batch()
        if entry.error is not None:
            raise entry.error
        assert entry.recordings is not None
        return entry.recordings

    def _save_batch(self) -> None:
        with self._lock:
            batch, self._queue = self._queue[:self.limit], self._queue[self.limit:]
        try:
            self._save_all(batch)
        finally:
            with self._lock:
                if self._queue:
                    following = self._queue[0]
                    following.leads = True
                    following.woken.set()
                else:
                    self._saving = False
            for entry in batch:
                entry.woken.set()

    def _save_all(self, batch: list[_Entry]) -> None:
        if len(batch) > 1:
            together: ProcessingEvent[Any] = ProcessingEvent()
            for entry in batch:
                together.events.extend(entry.decision.events)
                together.aggregates.update(entry.decision.aggregates)
            tenants = [(entry.tenant, len(entry.decision.events)) for entry in batch]
            if len({tenant for tenant, _ in tenants}) > 1:  # a run each (infra.tenant_runs)
                together.saved_kwargs["tenant_runs"] = tenants
            try:
                with acting_for(batch[0].tenant):
                    recordings = self._record(together)
            except (PersistenceError, PalimpsestError):
                pass  # one decision is refused (a lost race, an erased unit): find it, the others alone
            else:
                by_event = {id(r.domain_event): r for r in recordings}
                for entry in batch:
                    entry.recordings = [by_event[id(e)] for e in entry.decision.events if id(e) in by_event]
                return
        for entry in batch:
            try:
                with acting_for(entry.tenant):
                    entry.recordings = self._record(entry.decision)
            except BaseException as error:  # handed to its own command, raised there
                entry.error = error

