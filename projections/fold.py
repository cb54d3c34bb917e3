"""The log folded into read-model rows in memory: the rebuild's projection.

The same operations as the incremental projector (:func:`projections.cards.operations`) land in a
:class:`MemorySink`, and an event that cannot be decoded or applied parks its aggregate exactly as
the projector parks it (decision 0007): it and the aggregate's later events become failures, the
aggregate's tracking stays before them, its other rows stay as they were. The operators' skip
decisions, read from the log before the fold, skip the events they name.

Erasures reach past their own aggregate: an ``Erasure.Erased`` tombstones cards, slots and
records of other aggregates (:class:`~projections.ops.Forget`). A fold of one share of the
aggregates (a rebuild process) is also given every other share's erasures, in log order, and
applies only what they forget. A fold as known at a moment applies what the erasures recorded
after it forget too, once the rest is folded: erasure is retroactive (DESIGN §7), the texts do
not open anyway, and an as-of view of the live read models shows the same tombstones, with the
erasure's own time as ``erased_at``. The erasure itself (its ``erasures`` row, its tracking) is
not known then, and is left out.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from projections.cards import ERASED, NAME, forget, operations, storable
from projections.decisions import Skips
from projections.parking import (
    COLUMNS,
    PROJECTION,
    REFUSED,
    UNDECODABLE,
    Failure,
    Undecodable,
)
from projections.projector import Delivered, Projector
from projections.sinks import MemorySink, RowRefusedError

Progress = Callable[[int, int], None]
PAGE = 1_000
#: A table's columns and rows, as ``MemorySink.rows`` gives them.
Table = tuple[tuple[str, ...], list[tuple[Any, ...]]]


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector paused: a fold makes hundreds of thousands of dictionaries,
    lists and tuples that live to its end and hold no cycles, and each full collection would walk
    all of them again (and the tokenizer's dictionary)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def share_of(aggregate_id: Any, shares: int) -> int:
    """Which of ``shares`` rebuild processes folds an aggregate: its id's last byte modulo
    ``shares`` (:func:`projections.schema.in_share` says the same in SQL)."""
    return (aggregate_id.int & 0xFF) % shares


@dataclass
class Folded:
    """The log (or one share of its aggregates) folded into rows: each aggregate's last version,
    each tenant's last notification handled, the failures met, and how many events were read."""

    sink: MemorySink
    tracking: dict[tuple[str, Any], int]
    positions: dict[str, int]
    count: int
    failures: list[Failure] = field(default_factory=list)

    @property
    def parked(self) -> list[Failure]:
        return [f for f in self.failures if f.status == "parked"]


def fold(deliveries: Iterable[Delivered], head: int, known_at: datetime | None,
         progress: Progress | None = None, skips: Skips | None = None,
         share: tuple[int, int] | None = None) -> Folded:
    """Events in log order (up to notification ``head``) applied to a :class:`MemorySink`; with
    ``known_at``, those recorded after it are read and skipped (what their erasures forget
    applied at the end). ``progress`` is told the notification reached; ``skips``: the
    operators' skip decisions; ``share`` (part, of how many): the aggregates folded, the
    erasures of the others only forgetting (see the module's notes)."""
    folded = Folded(MemorySink(), {}, {}, 0)
    tracking, positions, failures = folded.tracking, folded.positions, folded.failures
    parked: dict[UUID, Failure] = {}
    tenants: dict[str, str] = {}
    skips = skips or {}
    late: list[Any] = []  # what the erasures recorded after ``known_at`` forget
    with collector_paused():
        for delivered in deliveries:
            event = delivered.event
            stamp = event.timestamp
            later = known_at is not None and stamp is not None and stamp > known_at
            if share is not None and share_of(event.originator_id, share[1]) != share[0]:
                if isinstance(event, ERASED):  # another share's: only what it forgets
                    (late.append if later else folded.sink.apply)(forget(event))
                continue
            folded.count += 1
            if progress and folded.count % PAGE == 0:
                progress(delivered.notification_id, head)
            if later:
                if isinstance(event, ERASED):
                    late.append(forget(event))
                continue
            raw = delivered.tenant_id
            tenant = tenants.get(raw) or tenants.setdefault(raw, storable(raw))
            if tenant != Projector.LOG:  # the log position is the head's, written apart
                positions[tenant] = delivered.notification_id
            key = (event.originator_id, event.originator_version)
            first = parked.get(key[0]) if parked else None
            if first is not None:
                failures.append(first.waiting(event, delivered.notification_id))
                continue
            if skips and key in skips:
                failures.append(Failure.skipped(skips[key]))
            elif (failure := _apply(folded.sink, delivered)) is not None:
                parked[key[0]] = failure
                failures.append(failure)
                continue
            tracking[(tenant, key[0])] = key[1]
        for forgotten in late:
            folded.sink.apply(forgotten)
    if progress:
        progress(head, head)
    return folded


def _apply(sink: MemorySink, delivered: Delivered) -> Failure | None:
    """Apply one event to ``sink``; the failure that parks it, if it fails (the sink checks an
    event's operations before it applies any, so a failed event leaves nothing behind)."""
    event, notification_id = delivered.event, delivered.notification_id
    if isinstance(event, Undecodable):
        return Failure.of(event, notification_id, UNDECODABLE, event.error)
    sink.position = notification_id
    try:
        sink.apply_all(operations(event, delivered.clean))
    except RowRefusedError as error:
        return Failure.of(event, notification_id, REFUSED, error)
    except Exception as error:
        return Failure.of(event, notification_id, PROJECTION, error)
    return None


def tracking_rows(tracking: dict[tuple[str, Any], int]) -> Table:
    return (("projection", "tenant_id", "originator_id", "version"),
            [(NAME, tenant, originator, version)
             for (tenant, originator), version in tracking.items()])


def position_rows(positions: dict[str, int], head: int) -> Table:
    return (("projection", "tenant_id", "position"),
            [(NAME, tenant, position) for tenant, position in positions.items()]
            + [(NAME, Projector.LOG, head)])


def failure_rows(failures: Iterable[Failure]) -> Table:
    """The failures met, one row per notification (the last word on each: a fold meets an event
    once, so there is one)."""
    rows = {failure.notification_id: failure.row(NAME) for failure in failures}
    return COLUMNS, list(rows.values())
