"""Replay: the same projection driven straight from the event store's notification log, no Kafka.

``rebuild`` folds the whole log through :func:`projections.cards.project` into a
:class:`MemorySink` (the server makes the fresh schema meanwhile), copies the rows into it, checks
them, builds the secondary indexes over them (cheaper than maintaining them row by row), and swaps
the schema in with two renames in one transaction (queries keep reading the old one until the
commit). It then catches the new schema up incrementally with the events written meanwhile. With
``known_at`` it builds the read models as they were known at that moment into a schema of their
own, and swaps nothing.

``catch_up`` applies the log from a position through the incremental :class:`Projector`: the same
code a Kafka-fed projector runs.
"""

from __future__ import annotations

import gc
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg import sql

from infra.postgres import Database, admin_database, projector_database, vector_index_enabled
from infra.settings import Settings
from projections.cards import NAME, project
from projections.projector import Delivered, ProjectionError, Projector
from projections.schema import create_functions, create_read_indexes, create_read_schema
from projections.sinks import ARRAYS, MemorySink, array_literal, range_literal
from services.memory import Palimpsest

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]
PAGE = 1_000


@dataclass
class RebuildReport:
    schema: str
    events: int
    head: int
    seconds: float
    rows: dict[str, int] = field(default_factory=dict)
    swapped: bool = False
    caught_up: int = 0

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0


def read_log(app: Palimpsest, start: int, stop: int) -> Iterator[Delivered]:
    """Every notification in ``[start, stop]``, decoded, in log order."""
    position = start
    while position <= stop:
        page = app.recorder.select_notifications(start=position, limit=PAGE, stop=stop)
        if not page:
            return
        for notification in page:
            try:
                event = app.mapper.to_domain_event(notification)
            except Exception as error:
                raise ProjectionError(
                    f"notification {notification.id} ({notification.topic}) cannot be decoded: "
                    f"{error}") from error
            yield Delivered(notification.id, event)
        position = page[-1].id + 1


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


def fold(app: Palimpsest, head: int, known_at: datetime | None,
         progress: Progress | None = None) -> tuple[MemorySink, dict[tuple[str, Any], int],
                                                    dict[str, int], int]:
    sink = MemorySink()
    tracking: dict[tuple[str, Any], int] = {}
    positions: dict[str, int] = {}
    count = 0
    with collector_paused():
        for delivered in read_log(app, 1, head):
            event = delivered.event
            count += 1
            if known_at is not None and event.timestamp > known_at:
                continue
            try:
                sink.apply_all(project(event))
            except Exception as error:
                raise ProjectionError(
                    f"cannot apply {type(event).__qualname__} v{event.originator_version} of "
                    f"{event.originator_id} (notification {delivered.notification_id}): {error}"
                ) from error
            tracking[(event.tenant_id, event.originator_id)] = event.originator_version
            positions[event.tenant_id] = delivered.notification_id
            if progress and count % PAGE == 0:
                progress(count, head)
    if progress:
        progress(count, head)
    return sink, tracking, positions, count


def write_rows(admin: Database, schema: str, sink: MemorySink,
               tracking: dict[tuple[str, Any], int], positions: dict[str, int],
               head: int) -> dict[str, int]:
    tables = sink.rows()
    tables["projection_tracking"] = (
        ("projection", "tenant_id", "originator_id", "version"),
        [(NAME, tenant, originator, version) for (tenant, originator), version in tracking.items()])
    tables["projection_position"] = (
        ("projection", "tenant_id", "position"),
        [(NAME, tenant, position) for tenant, position in positions.items()]
        + [(NAME, Projector.LOG, head)])
    counts: dict[str, int] = {}
    with admin.connect() as conn, conn.transaction(), conn.cursor() as cur:
        for table, (columns, rows) in tables.items():
            statement = sql.SQL("COPY {}.{} ({}) FROM STDIN").format(
                sql.Identifier(schema), sql.Identifier(table),
                sql.SQL(", ").join(map(sql.Identifier, columns)))
            literal = [(i, _LITERALS[c]) for i, c in enumerate(columns) if c in _LITERALS]
            with cur.copy(statement) as copy:
                for row in rows:
                    if literal:
                        values = list(row)
                        for i, to_literal in literal:
                            values[i] = to_literal(values[i])
                        copy.write_row(values)
                    else:
                        copy.write_row(row)
            counts[table] = len(rows)
        for table, expected in counts.items():  # the check: every row landed, keys held
            cur.execute(sql.SQL("SELECT count(*) FROM {}.{}").format(
                sql.Identifier(schema), sql.Identifier(table)))
            found = cur.fetchone()[0]  # type: ignore[index]
            if found != expected:
                raise ProjectionError(f"rebuild check: {table} has {found} rows, expected {expected}")
    return counts


#: Columns copied as literals of their own (the COPY would otherwise dump them element by element).
_LITERALS: dict[str, Callable[[Any], str | None]] = {
    **dict.fromkeys(ARRAYS, array_literal), "valid": range_literal, "known": range_literal,
}


def swap(admin: Database, live: str, fresh: str) -> None:
    """Put ``fresh`` in place of ``live`` atomically; the old schema is dropped."""
    retired = f"{live}_retired"
    with admin.connect() as conn, conn.transaction():
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(retired)))
        conn.execute(sql.SQL("ALTER SCHEMA {} RENAME TO {}").format(
            sql.Identifier(live), sql.Identifier(retired)))
        conn.execute(sql.SQL("ALTER SCHEMA {} RENAME TO {}").format(
            sql.Identifier(fresh), sql.Identifier(live)))
        create_functions(conn, live)  # their statements named the schema by its old name
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(retired)))


def make_projector(settings: Settings, app: Palimpsest, schema: str | None = None,
                   admin: Database | None = None) -> Projector:
    projector_db = projector_database(admin or admin_database(settings), settings)

    def fetch_missing(originator_id: Any, after: int, before: int) -> list[Any]:
        return list(app.events.get(originator_id, gt=after, lte=before - 1))

    return Projector(projector_db.connect, schema or settings.read_schema, fetch_missing)


def catch_up(projector: Projector, app: Palimpsest, after: int | None = None,
             batch: int = 500, progress: Progress | None = None) -> int:
    """Apply every event after notification ``after`` (default: the projection's log position)
    through the incremental projector; duplicates of what Kafka already delivered are skipped."""
    start = projector.log_position() if after is None else after
    head = app.recorder.max_notification_id() or 0
    applied = 0
    for pending in read_ahead(app, start + 1, head, batch):
        applied += projector.apply_batch(pending)
        projector.mark_log_position(pending[-1].notification_id)
        if progress:
            progress(pending[-1].notification_id, head)
    return applied


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


def fresh_schema(settings: Settings, admin: Database, schema: str) -> None:
    """``schema`` dropped and made again, with only the keys of its tables."""
    with admin.connect(autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        create_read_schema(conn, schema, reader=settings.runtime_role,
                           writer=settings.projector_role, dimensions=settings.embedding_dimensions,
                           indexes=False)


def rebuild(settings: Settings, app: Palimpsest, *, known_at: datetime | None = None,
            into: str | None = None, progress: Progress | None = None) -> RebuildReport:
    admin = admin_database(settings)
    live = settings.read_schema
    stamp = known_at.strftime("%Y%m%d%H%M%S") if known_at else ""
    target = into or (f"{live}_at_{stamp}" if known_at else f"{live}_next")
    if target == live:
        raise ValueError("rebuild into a fresh schema, not the live one")
    started = time.perf_counter()
    head = app.recorder.max_notification_id() or 0
    with ThreadPoolExecutor(max_workers=1) as thread:  # the server makes the schema meanwhile
        schema = thread.submit(fresh_schema, settings, admin, target)
        sink, tracking, positions, count = fold(app, head, known_at, progress)
        schema.result()
    rows = write_rows(admin, target, sink, tracking, positions, head)
    with admin.connect(autocommit=True) as conn:  # over the copied rows: cheaper than during
        create_read_indexes(conn, target, hnsw=vector_index_enabled(settings))
    report = RebuildReport(target, count, head, time.perf_counter() - started, rows)
    if known_at is None and into is None:
        swap(admin, live, target)
        report.schema, report.swapped = live, True
        projector = make_projector(settings, app, live, admin)
        try:
            report.caught_up = catch_up(projector, app, head, batch=settings.projector_batch)
        finally:
            projector.close()
    log.info("rebuilt %s: %d events in %.1f s", report.schema, count, report.seconds)
    return report
