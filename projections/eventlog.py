"""Reading the event store's log for the projections: page by page in binary (the catch-up, the
rebuild and its processes), one aggregate's events with their notification ids (a gap, a retry),
the operators' decisions, and a reader thread one batch ahead. An event that cannot be decoded
comes as an :class:`~projections.parking.Undecodable` in its place: it parks its aggregate.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import Notification
from eventsourcing.utils import get_topic
from psycopg import sql
from psycopg.rows import tuple_row

from projections.cards import ERASED, NAME
from projections.decisions import ProjectionDecisions, Skips, skips
from projections.projector import Delivered, decode
from projections.schema import in_share

#: Notifications read per page.
PAGE = 1_000
#: The command side, whose event store and mapper the log is read through: any eventsourcing
#: application (the projections never import the services that make it).
Palimpsest = Application


def events_table(recorder: Any) -> sql.Composable:
    """The event store's table, as ``recorder`` (the application's) names it."""
    return sql.SQL("{}.{}").format(sql.Identifier(recorder.datastore.schema or "public"),
                                   sql.Identifier(recorder.events_table_name))


_PAGE = """SELECT notification_id, originator_id, originator_version, topic, state
FROM {events} WHERE notification_id BETWEEN %s AND %s AND ({share} OR topic = ANY(%s))
ORDER BY notification_id LIMIT %s"""

#: The topic of an erasure: every share of a rebuild reads them all (``projections.fold``).
ERASED_TOPIC = get_topic(ERASED)


def read_pages(connect: Callable[[], AbstractContextManager[Any]], events: sql.Composable,
               start: int, stop: int, share: tuple[int, int] | None = None,
               topics: Iterable[str] = ()) -> Iterator[list[Notification]]:
    """The stored notifications in ``[start, stop]`` (of one share of the aggregates, if given,
    and every one of ``topics``), page by page, in log order: read in binary, on one
    connection from ``connect``."""
    query = sql.SQL(_PAGE).format(events=events, share=in_share("originator_id", share))
    also = list(topics)
    with connect() as conn, conn.cursor(binary=True, row_factory=tuple_row) as cur:
        position = start
        while position <= stop:
            rows = cur.execute(query, (position, stop, also, PAGE), prepare=True).fetchall()
            if not rows:
                return
            yield [Notification(id=id_, originator_id=originator, originator_version=version,
                                topic=topic, state=state)
                   for id_, originator, version, topic, state in rows]
            position = rows[-1][0] + 1


def decoded(mapper: Any, pages: Iterable[list[Notification]]) -> Iterator[Delivered]:
    """Each notification decoded; one that cannot be comes as an Undecodable (it parks its
    aggregate)."""
    for page in pages:
        for notification in page:
            yield decode(mapper, notification)


def read_log(app: Palimpsest, start: int, stop: int) -> Iterator[Delivered]:
    """Every notification in ``[start, stop]``, decoded, in log order."""
    recorder: Any = app.recorder  # eventsourcing's PostgreSQL recorder: its pool and table
    return decoded(app.mapper, read_pages(recorder.datastore.get_connection,
                                          events_table(recorder), start, stop))


_AGGREGATE = """SELECT notification_id, originator_id, originator_version, topic, state
FROM {events} WHERE originator_id = %s AND originator_version > %s AND originator_version < %s
ORDER BY originator_version"""


def read_aggregate(app: Palimpsest, originator_id: UUID, after: int, before: int | None
                   ) -> list[Delivered]:
    """An aggregate's events ``after < version < before`` (every later one if ``before`` is
    None), decoded, with their notification ids."""
    recorder: Any = app.recorder
    query = sql.SQL(_AGGREGATE).format(events=events_table(recorder))
    with recorder.datastore.get_connection() as conn, conn.cursor(
            binary=True, row_factory=tuple_row) as cur:
        rows = cur.execute(query, (originator_id, after, before or 2 ** 62)).fetchall()
    return [decode(app.mapper, Notification(id=id_, originator_id=originator,
                                            originator_version=version, topic=topic, state=state))
            for id_, originator, version, topic, state in rows]


def decisions(app: Palimpsest, name: str = NAME) -> list[Any]:
    """The events of the projection's :class:`ProjectionDecisions`, from the log."""
    return list(app.events.get(ProjectionDecisions.create_id(name)))


def load_skips(app: Palimpsest, known_at: datetime | None = None) -> Skips:
    """The skip decisions in the log (those recorded by ``known_at``, if given)."""
    return skips(decisions(app), known_at)


def read_ahead(app: Palimpsest, start: int, stop: int, size: int) -> Iterator[list[Delivered]]:
    """The log ``[start, stop]`` in batches of ``size``, read and decoded one batch ahead by a
    thread of its own: while a batch is applied (and waits on the database), the next is
    decoded. An error reading or decoding is raised where its batch would have come."""
    ready: queue.Queue[list[Delivered] | BaseException | None] = queue.Queue(maxsize=1)
    done = threading.Event()

    def put(item: list[Delivered] | BaseException | None) -> bool:
        while not done.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            pending: list[Delivered] = []
            for delivered in read_log(app, start, stop):
                pending.append(delivered)
                if len(pending) >= size:
                    if not put(pending):
                        return
                    pending = []
            if not pending or put(pending):
                put(None)
        except BaseException as error:  # handed to the caller, in order
            put(error)

    reader = threading.Thread(target=read, name="log-reader", daemon=True)
    reader.start()
    try:
        while (item := ready.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        done.set()
        reader.join(timeout=5)
