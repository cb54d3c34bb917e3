"""Several tenants' decisions saved in one transaction of the event store (decision 0018).

Group commit (:mod:`services.command.commit`) saves the decisions of concurrent commands together,
so that they share one flush to disk. In an HTTP process those commands are often of different
tenants, and the HTTP role writes only the rows of the tenant its transaction set. A batch of
several tenants is therefore saved as *runs*: each tenant's events, in order, sealed with that
tenant bound (the key ring reads its keys only), and inserted after ``set_config('palimpsest.
tenant', <that tenant>, true)`` — its keys, the check that the keys it used are live, its events —
all in the one transaction, one statement each, pipelined. Each run's tenant is the one its request
authenticated, never one read from the events: a row of another tenant is refused as it would be
alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from uuid import UUID

from eventsourcing.persistence import Notification, Recording, StoredEvent

from infra.keyring import KeyRing, MadeKeys, erased_refusal, insert_made_keys
from infra.tenancy import TENANT_SETTING, acting_for

if TYPE_CHECKING:
    from eventsourcing.domain import DomainEventProtocol
    from eventsourcing.persistence import EventStore

_SET_LOCAL = f"SELECT set_config('{TENANT_SETTING}', %s, true)"


@dataclass
class TenantRun:
    """Consecutive events of one tenant in a batch, with the keys sealing them made and used."""

    tenant: str | None
    count: int
    made: MadeKeys = ()
    used: set[UUID] = field(default_factory=set)


class TenantRuns(list[TenantRun]):
    """A batch's runs, in order, and the cursors their inserts return notification ids on."""

    cursors: list[Any]

    def ids(self) -> list[int]:
        """The notification ids the insert gave the batch's events, in order (once it synced)."""
        found = [row["notification_id"] for cursor in self.cursors for row in cursor.fetchall()]
        for cursor in self.cursors:
            cursor.close()
        return found


def runs_of(tenants: Sequence[tuple[str | None, int]]) -> list[tuple[str | None, int]]:
    """``(tenant, events)`` per decision, neighbours of one tenant merged."""
    merged: list[tuple[str | None, int]] = []
    for tenant, count in tenants:
        if merged and merged[-1][0] == tenant:
            merged[-1] = (tenant, merged[-1][1] + count)
        elif count:
            merged.append((tenant, count))
    return merged


def put_runs(store: EventStore[UUID], ring: KeyRing, domain_events: Sequence[DomainEventProtocol[UUID]],
             tenants: Sequence[tuple[str | None, int]], **kwargs: Any) -> list[Recording[UUID]]:
    """``domain_events`` stored in one transaction, a run per tenant (``tenants``: how many of
    the events, in order, each tenant's request made)."""
    from infra.sealing import made_for
    runs, stored, start = TenantRuns(), [], 0
    for tenant, count in runs_of(tenants):
        events = domain_events[start:start + count]
        with acting_for(tenant), ring.sealing() as used:
            stored += [store.mapper.to_stored_event(e) for e in events]
        runs.append(TenantRun(tenant, count, ring.take_made(made_for(events)), set(used)))
        start += count
    try:
        ids = store.recorder.insert_events(stored, tenant_runs=runs, **kwargs)
    except BaseException as error:
        refused = erased_refusal(error)  # a key of an erased unit: refused, dropped
        for run in runs:
            ring.restore_made(run.made, refused)
        if refused is not None:
            raise refused from error
        raise
    assert ids is not None and len(ids) == len(stored)
    return [Recording(event, Notification(id=n_id, originator_id=s.originator_id,
                                          originator_version=s.originator_version,
                                          topic=s.topic, state=s.state))
            for event, s, n_id in zip(domain_events, stored, ids, strict=True)]


def insert_runs(curs: Any, schema: str, stored_events: Sequence[StoredEvent], runs: TenantRuns,
                insert: Callable[[Any, Sequence[StoredEvent]], None]) -> None:
    """In the transaction under way (its table lock taken): each run's tenant set, its keys
    added and checked, its events inserted by ``insert`` (the recorder's statement, which returns
    their notification ids), all pipelined: each insert on a cursor of its own, read by
    :meth:`TenantRuns.ids` once the pipeline synced — no round trip per run."""
    runs.cursors = []
    start = 0
    for run in runs:
        curs.execute(_SET_LOCAL, (run.tenant or "",))
        insert_made_keys(curs, schema, run.made, run.used)
        inserting = curs.connection.cursor()
        insert(inserting, stored_events[start:start + run.count])
        runs.cursors.append(inserting)
        start += run.count
