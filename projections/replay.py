"""Replay: the same projection driven straight from the event store's notification log, no Kafka.

``rebuild`` folds the whole log through :func:`projections.cards.project` into
:class:`MemorySink` s (the server makes the fresh schema meanwhile), copies the rows into it,
checks them, builds the secondary indexes over them (cheaper than maintaining them row by row),
and swaps the schema in with two renames in one transaction (queries keep reading the old one
until the commit). It then catches the new schema up incrementally with the events written
meanwhile. With ``known_at`` it builds the read models as they were known at that moment into a
schema of their own, and swaps nothing.

The fold runs in ``rebuild_workers`` forked processes, each reading the events of its share of the
aggregates straight from the event store. Every row the projection writes belongs to the
aggregate whose events made it, except edges and arbitration cases (they name other aggregates'
nodes): each process copies its own rows, and the edges and cases are gathered and copied once
every share is in. With one worker the fold runs in the calling process.

``catch_up`` applies the log from a position through the incremental :class:`Projector`: the same
code a Kafka-fed projector runs.
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import multiprocessing.connection
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast
from uuid import UUID

from eventsourcing.persistence import Notification
from psycopg import sql
from psycopg.rows import tuple_row

from infra.postgres import (
    Database,
    Lease,
    admin_database,
    projector_database,
    vector_index_enabled,
)
from infra.settings import Settings
from projections.cards import NAME, project
from projections.projector import Delivered, ProjectionError, Projector
from projections.schema import (
    arm_words,
    create_functions,
    create_read_schema,
    fill_words,
    in_share,
    index_statements,
)
from projections.sinks import ARRAYS, MemorySink, array_literal, range_literal
from projections.text import warm_up
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


def events_table(recorder: Any) -> sql.Composable:
    """The event store's table, as ``recorder`` (the application's) names it."""
    return sql.SQL("{}.{}").format(sql.Identifier(recorder.datastore.schema or "public"),
                                   sql.Identifier(recorder.events_table_name))


_PAGE = """SELECT notification_id, originator_id, originator_version, topic, state
FROM {events} WHERE notification_id BETWEEN %s AND %s AND {share}
ORDER BY notification_id LIMIT %s"""


def read_pages(connect: Callable[[], AbstractContextManager[Any]], events: sql.Composable,
               start: int, stop: int, share: tuple[int, int] | None = None
               ) -> Iterator[list[Notification]]:
    """The stored notifications in ``[start, stop]`` (of one share of the aggregates, if given),
    page by page, in log order: read in binary, on one connection from ``connect``."""
    query = sql.SQL(_PAGE).format(events=events, share=in_share("originator_id", share))
    with connect() as conn, conn.cursor(binary=True, row_factory=tuple_row) as cur:
        position = start
        while position <= stop:
            rows = cur.execute(query, (position, stop, PAGE), prepare=True).fetchall()
            if not rows:
                return
            yield [Notification(id=id_, originator_id=originator, originator_version=version,
                                topic=topic, state=state)
                   for id_, originator, version, topic, state in rows]
            position = rows[-1][0] + 1


def decoded(mapper: Any, pages: Iterable[list[Notification]]) -> Iterator[Delivered]:
    for page in pages:
        for notification in page:
            try:
                event = mapper.to_domain_event(notification)
            except Exception as error:
                raise ProjectionError(
                    f"notification {notification.id} ({notification.topic}) cannot be decoded: "
                    f"{error}") from error
            yield Delivered(notification.id, event)


def read_log(app: Palimpsest, start: int, stop: int) -> Iterator[Delivered]:
    """Every notification in ``[start, stop]``, decoded, in log order."""
    recorder: Any = app.recorder  # eventsourcing's PostgreSQL recorder: its pool and table
    return decoded(app.mapper, read_pages(recorder.datastore.get_connection,
                                          events_table(recorder), start, stop))


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


@dataclass
class Folded:
    """The log (or one share of its aggregates) folded into rows: each aggregate's last version,
    each tenant's last notification, and how many events were read."""

    sink: MemorySink
    tracking: dict[tuple[str, Any], int]
    positions: dict[str, int]
    count: int


def fold(deliveries: Iterable[Delivered], head: int, known_at: datetime | None,
         progress: Progress | None = None) -> Folded:
    """Events in log order (up to notification ``head``) applied to a :class:`MemorySink`; with
    ``known_at``, those recorded after it are read and skipped. ``progress`` is told the
    notification reached."""
    folded = Folded(MemorySink(), {}, {}, 0)
    sink, tracking, positions = folded.sink, folded.tracking, folded.positions
    with collector_paused():
        for delivered in deliveries:
            event = delivered.event
            folded.count += 1
            if progress and folded.count % PAGE == 0:
                progress(delivered.notification_id, head)
            if known_at is not None and event.timestamp > known_at:
                continue
            sink.position = delivered.notification_id
            try:
                sink.apply_all(project(event))
            except Exception as error:
                raise ProjectionError(
                    f"cannot apply {type(event).__qualname__} v{event.originator_version} of "
                    f"{event.originator_id} (notification {delivered.notification_id}): {error}"
                ) from error
            tracking[(event.tenant_id, event.originator_id)] = event.originator_version
            positions[event.tenant_id] = delivered.notification_id
    if progress:
        progress(head, head)
    return folded


#: A table's columns and rows, as ``MemorySink.rows`` gives them.
Table = tuple[tuple[str, ...], list[tuple[Any, ...]]]
Tables = dict[str, Table]


def tracking_rows(tracking: dict[tuple[str, Any], int]) -> Table:
    return (("projection", "tenant_id", "originator_id", "version"),
            [(NAME, tenant, originator, version)
             for (tenant, originator), version in tracking.items()])


def position_rows(positions: dict[str, int], head: int) -> Table:
    return (("projection", "tenant_id", "position"),
            [(NAME, tenant, position) for tenant, position in positions.items()]
            + [(NAME, Projector.LOG, head)])


def copy_tables(cur: Any, schema: str, tables: Tables) -> dict[str, int]:
    """Each table's rows copied into ``schema`` (COPY); the number copied per table."""
    counts: dict[str, int] = {}
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
    return counts


def check_counts(cur: Any, schema: str, counts: dict[str, int]) -> None:
    """The rebuild's check: every row copied landed, and the keys held (a duplicate fails the
    copy itself)."""
    for table, expected in counts.items():
        cur.execute(sql.SQL("SELECT count(*) FROM {}.{}").format(
            sql.Identifier(schema), sql.Identifier(table)))
        found = cur.fetchone()[0]
        if found != expected:
            raise ProjectionError(f"rebuild check: {table} has {found} rows, expected {expected}")


def write_rows(admin: Database, schema: str, folded: Folded, head: int) -> dict[str, int]:
    with collector_paused():
        tables = folded.sink.rows()
        tables["projection_tracking"] = tracking_rows(folded.tracking)
        tables["projection_position"] = position_rows(folded.positions, head)
        with admin.connect() as conn, conn.transaction(), conn.cursor() as cur:
            counts = copy_tables(cur, schema, tables)
            check_counts(cur, schema, counts)
    return counts


#: Tables whose rows name only their own aggregate's nodes: a share copies them itself. Edges and
#: arbitration cases name other aggregates' nodes (a case its slot's), so they are gathered and
#: copied once every share's nodes are in.
SHARED = ("card_relations", "arbitration_queue")


def share_of(aggregate_id: Any, shares: int) -> int:
    """Which of ``shares`` rebuild processes folds an aggregate: its id's last byte modulo
    ``shares`` (:func:`projections.schema.in_share` says the same in SQL)."""
    return (cast(UUID, aggregate_id).int & 0xFF) % shares


@dataclass
class _Child:
    process: Any
    results: Any  # its rows' counts and what must be merged, or its error, back
    reached: Any  # the last notification it applied


def _fold_share(admin: Database, events: sql.Composable, schema: str, head: int,
                known_at: datetime | None, share: tuple[int, int], mapper: Any, ready: Any,
                reached: Any, results: Any) -> None:
    """A rebuild process: read and fold its share of the aggregates' events, then, once the
    schema is ready, copy its rows and write their words; send back what must be merged, or its
    error."""
    gc.disable()  # the process lives for one fold and copy (see collector_paused)
    try:
        def progress(done: int, total: int) -> None:
            reached.value = done

        folded = fold(decoded(mapper, read_pages(admin.connect, events, 1, head, share)), head,
                      known_at, progress)
        tables = folded.sink.rows()
        for table in SHARED:
            del tables[table]
        tables["projection_tracking"] = tracking_rows(folded.tracking)
        if not ready.wait(timeout=600):
            raise ProjectionError("the fresh schema was not made within 10 minutes")
        with admin.connect() as conn, conn.transaction(), conn.cursor() as cur:
            counts = copy_tables(cur, schema, tables)
            fill_words(cur, schema, share)
        results.send((counts, folded.sink.edges, folded.sink.cases, folded.positions,
                      folded.count))
    except BaseException as error:  # the parent raises it: a message pickles, an error may not
        results.send(f"{type(error).__name__}: {error}")


def fold_in_processes(settings: Settings, app: Palimpsest, admin: Database, schema: str,
                      head: int, known_at: datetime | None, workers: int,
                      progress: Progress | None) -> tuple[dict[str, int], int]:
    """The fold split by aggregate over ``workers`` forked processes, each reading its share of
    the log itself, while this one makes the fresh schema; each process copies its own rows;
    then this one copies the gathered edges, cases and positions and checks every table. An
    aggregate's events all go to one process and every row but an edge or a case is its own
    aggregate's, so the shares never meet."""
    warm_up()  # loaded once here, then shared by the forked processes (each would load its own)
    context = multiprocessing.get_context("fork")
    ready = context.Event()
    events = events_table(app.recorder)
    children: list[_Child] = []
    try:
        for part in range(workers):
            results_in, results_out = context.Pipe(duplex=False)
            reached = context.Value("q", 0, lock=False)
            process = context.Process(
                target=_fold_share, name=f"rebuild-{part}", daemon=True,
                args=(admin, events, schema, head, known_at, (part, workers), app.mapper, ready,
                      reached, results_out))
            process.start()
            results_out.close()
            children.append(_Child(process, results_in, reached))

        def report() -> None:
            if progress:
                progress(min(child.reached.value for child in children), head)

        fresh_schema(settings, admin, schema)
        ready.set()
        results = _gather(children, report)
    except BaseException:
        for child in children:  # no schema, or interrupted: the processes' work is lost anyway
            child.process.terminate()
        raise
    finally:
        for child in children:
            child.process.join(timeout=5)
            if child.process.is_alive():
                child.process.terminate()
                child.process.join()
            child.results.close()
    return _copy_gathered(admin, schema, head, results)


def _gather(children: list[_Child], report: Callable[[], None]) -> list[Any]:
    """Every process's results, in share order; an error if any failed (the first cause, not
    the processes it stopped)."""
    results: dict[int, Any] = {}
    while len(results) < len(children):
        for part, child in enumerate(children):
            if part not in results and (child.results.poll() or not child.process.is_alive()):
                results[part] = _result(child)
        if any(isinstance(result, str) for result in results.values()):
            for part, child in enumerate(children):  # the rebuild fails: stop the rest now
                if part not in results:
                    child.process.terminate()
                    results[part] = "stopped: the rebuild was stopped"
        report()
        waiting = [c.results for p, c in enumerate(children) if p not in results]
        if waiting:
            multiprocessing.connection.wait(waiting, timeout=0.25)
    failed = {part: result for part, result in results.items() if isinstance(result, str)}
    if failed:
        cause = {p: r for p, r in failed.items() if not r.startswith("stopped:")} or failed
        raise ProjectionError("; ".join(f"rebuild process {p}: {r}" for p, r in cause.items()))
    return [results[part] for part in sorted(results)]


def _result(child: _Child) -> Any:
    """What a process sent, or why it sent nothing (it died: the pipe ends empty)."""
    try:
        if child.results.poll():
            return child.results.recv()
    except EOFError:
        pass
    child.process.join(timeout=5)
    return f"exited ({child.process.exitcode}) without a result"


def _copy_gathered(admin: Database, schema: str, head: int, results: list[Any]
                   ) -> tuple[dict[str, int], int]:
    """The shares' edges (an edge made twice keeps the first notification's), cases and tenant
    positions copied, and every table checked against the rows copied into it."""
    counts: dict[str, int] = {}
    gathered = MemorySink()
    positions: dict[str, int] = {}
    events = 0
    for copied, edges, cases, their_positions, count in results:
        for table, copied_rows in copied.items():
            counts[table] = counts.get(table, 0) + copied_rows
        for key, (position, at) in edges.items():
            if key not in gathered.edges or position < gathered.edges[key][0]:
                gathered.edges[key] = (position, at)
        gathered.cases.update(cases)
        for tenant, position in their_positions.items():
            positions[tenant] = max(position, positions.get(tenant, 0))
        events += count
    rows = gathered.rows()
    tables = {table: rows[table] for table in SHARED}
    tables["projection_position"] = position_rows(positions, head)
    with admin.connect() as conn, conn.transaction(), conn.cursor() as cur:
        counts.update(copy_tables(cur, schema, tables))
        check_counts(cur, schema, counts)
    return counts, events


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


def build_indexes(admin: Database, schema: str, hnsw: bool, words: bool, connections: int
                  ) -> None:
    """The read models' indexes built over the copied rows (cheaper than maintaining them during
    the copy), on ``connections`` connections at once, each taking the next statement left;
    then the words index armed."""
    left: queue.SimpleQueue[Any] = queue.SimpleQueue()
    for statement in index_statements(schema, hnsw):
        left.put(statement)

    def build() -> None:
        with admin.connect(autocommit=True) as conn:
            while True:
                try:
                    statement = left.get_nowait()
                except queue.Empty:
                    return
                conn.execute(statement)

    with ThreadPoolExecutor(max_workers=connections) as pool:
        for built in [pool.submit(build) for _ in range(connections)]:
            built.result()
    with admin.connect(autocommit=True) as conn:
        arm_words(conn, schema, words)


def fresh_schema(settings: Settings, admin: Database, schema: str) -> None:
    """``schema`` dropped and made again, with only the keys of its tables."""
    with admin.connect(autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        create_read_schema(conn, schema, reader=settings.runtime_role,
                           writer=settings.projector_role, dimensions=settings.embedding_dimensions,
                           indexes=False)


def rebuild(settings: Settings, app: Palimpsest, *, known_at: datetime | None = None,
            into: str | None = None, progress: Progress | None = None,
            workers: int | None = None) -> RebuildReport:
    """Replay the log into a fresh schema (see the module's notes). ``workers`` processes fold
    it (default ``settings.rebuild_workers``); 1 folds it in this process."""
    admin = admin_database(settings)
    live = settings.read_schema
    stamp = known_at.strftime("%Y%m%d%H%M%S") if known_at else ""
    target = into or (f"{live}_at_{stamp}" if known_at else f"{live}_next")
    if target == live:
        raise ValueError("rebuild into a fresh schema, not the live one")
    workers = workers or settings.rebuild_workers
    if "fork" not in multiprocessing.get_all_start_methods():
        workers = 1  # the processes share this one's loaded code and tokenizer by forking
    lease = Lease(admin.connect, f"palimpsest rebuild {target}")  # one rebuild per schema
    if not lease.held():
        raise ProjectionError(f"a rebuild into {target} is already running: wait for it, "
                              "or rebuild --into another schema")
    try:
        return _rebuild(settings, app, admin, target, known_at, into, progress, workers)
    finally:
        lease.release()


def _rebuild(settings: Settings, app: Palimpsest, admin: Database, target: str,
             known_at: datetime | None, into: str | None, progress: Progress | None,
             workers: int) -> RebuildReport:
    live = settings.read_schema
    started = time.perf_counter()
    head = app.recorder.max_notification_id() or 0
    if workers > 1:
        rows, count = fold_in_processes(settings, app, admin, target, head, known_at, workers,
                                        progress)
    else:
        with ThreadPoolExecutor(max_workers=1) as thread:  # the server makes the schema meanwhile
            schema = thread.submit(fresh_schema, settings, admin, target)
            folded = fold(read_log(app, 1, head), head, known_at, progress)
            schema.result()
        rows, count = write_rows(admin, target, folded, head), folded.count
    build_indexes(admin, target, vector_index_enabled(settings), words=workers == 1,
                  connections=workers)
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
