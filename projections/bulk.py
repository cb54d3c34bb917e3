"""Rows folded in memory, copied in bulk into a fresh schema: by the calling process, or by
``rebuild_workers`` forked processes, each folding and copying its share of the aggregates (and
what every erasure forgets in it).

Every row the projection writes belongs to the aggregate whose events made it, except edges and
arbitration cases (they name other aggregates' nodes): each process copies its own rows, and the
edges and cases are gathered and copied once every share is in. A row the database refuses (one
the fold cannot foresee) raises :class:`RowsRefusedError`.
"""

from __future__ import annotations

import gc
import multiprocessing
import multiprocessing.connection
import signal
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from infra.postgres import Database
from projections.copying import copy_tables
from projections.decisions import Skips
from projections.eventlog import ERASED_TOPIC, Palimpsest, decoded, events_table, read_pages
from projections.fold import (
    Folded,
    Progress,
    collector_paused,
    failure_rows,
    fold,
    position_rows,
    tracking_rows,
)
from projections.projector import TRANSIENT, ProjectionError
from projections.sinks import MemorySink
from projections.text import warm_up


def check_counts(cur: Any, schema: str, counts: dict[str, int]) -> None:
    """The rebuild's check: every row copied landed, and the keys held (a duplicate fails the
    copy itself)."""
    for table, expected in counts.items():
        cur.execute(sql.SQL("SELECT count(*) FROM {}.{}").format(
            sql.Identifier(schema), sql.Identifier(table)))
        found = cur.fetchone()[0]
        if found != expected:
            raise ProjectionError(f"rebuild check: {table} has {found} rows, expected {expected}")


class RowsRefusedError(ProjectionError):
    """The database refused a row the fold made (one it cannot foresee: an edge to a parked
    card's node, a constraint it does not mirror): the rebuild projects the log again through the
    incremental projector, which parks the event that made it."""


#: How a rebuild process says the database refused its rows.
REFUSED = "refused: "


def write_rows(admin: Database, schema: str, folded: Folded, head: int) -> dict[str, int]:
    with collector_paused():
        tables = folded.sink.rows()
        tables["projection_tracking"] = tracking_rows(folded.tracking)
        tables["projection_position"] = position_rows(folded.positions, head)
        tables["projection_failures"] = failure_rows(folded.failures)
        with admin.connect() as conn, conn.transaction(), conn.cursor() as cur:
            counts = copy_tables(cur, schema, tables)
            check_counts(cur, schema, counts)
    return counts


#: Tables whose rows name only their own aggregate's nodes: a share copies them itself. Edges and
#: arbitration cases name other aggregates' nodes (a case its slot's), so they are gathered and
#: copied once every share's nodes are in.
SHARED = ("card_relations", "arbitration_queue")


@dataclass
class _Child:
    process: Any
    results: Any  # its rows' counts and what must be merged, or its error, back
    reached: Any  # the last notification it applied


def _fold_share(admin: Database, events: sql.Composable, schema: str, head: int,
                known_at: datetime | None, share: tuple[int, int], mapper: Any, ready: Any,
                reached: Any, results: Any, skipped: Skips) -> None:
    """A rebuild process: read and fold its share of the aggregates' events, then, once the
    schema is ready, copy its rows; send back what must be merged, or its error."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a stop ends this process, nothing more
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # blocked by _start
    gc.disable()  # the process lives for one fold and copy (see collector_paused)
    try:
        def progress(done: int, total: int) -> None:
            reached.value = done

        pages = read_pages(admin.connect, events, 1, head, share, topics=(ERASED_TOPIC,))
        folded = fold(decoded(mapper, pages), head, known_at, progress, skipped, share)
        tables = folded.sink.rows()
        for table in SHARED:
            del tables[table]
        tables["projection_tracking"] = tracking_rows(folded.tracking)
        tables["projection_failures"] = failure_rows(folded.failures)
        if not ready.wait(timeout=600):
            raise ProjectionError("the fresh schema was not made within 10 minutes")
        with admin.connect() as conn, conn.transaction(), conn.cursor() as cur:
            counts = copy_tables(cur, schema, tables)
        results.send((counts, folded.sink.edges, folded.sink.cases, folded.positions,
                      folded.count))
    except BaseException as error:  # the parent raises it: a message pickles, an error may not
        refused = isinstance(error, psycopg.DatabaseError) and not isinstance(error, TRANSIENT)
        results.send(f"{REFUSED if refused else ''}{type(error).__name__}: {error}")


def fold_in_processes(make_schema: Callable[[], None], app: Palimpsest, admin: Database,
                      schema: str, head: int, known_at: datetime | None, workers: int,
                      progress: Progress | None, skipped: Skips) -> tuple[dict[str, int], int]:
    """The fold split by aggregate over ``workers`` forked processes, each reading its share of
    the log itself, while this one makes the fresh schema (``make_schema``: ``schema`` made
    again, with only its keys); each process copies its own rows;
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
                      reached, results_out, skipped))
            _start(process)
            results_out.close()
            children.append(_Child(process, results_in, reached))

        def report() -> None:
            if progress:
                progress(min(child.reached.value for child in children), head)

        make_schema()
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


def _start(process: Any) -> None:
    """Fork ``process`` with SIGTERM blocked until its target has put the default action back: a
    stop that comes at once (the schema refused) must not run this process's handler in the fork,
    which would carry on as a copy of this one."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        process.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


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
        error = RowsRefusedError if all(r.startswith(REFUSED) for r in cause.values()) \
            else ProjectionError
        raise error("; ".join(f"rebuild process {p}: {r}" for p, r in cause.items()))
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
