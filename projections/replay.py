"""Replay: the same projection driven straight from the event store's notification log, no Kafka.

``rebuild`` folds the whole log through :func:`projections.cards.operations` into
:class:`MemorySink` s (:mod:`projections.fold`; the server makes the fresh schema meanwhile),
copies the rows into it (:mod:`projections.bulk`, in ``rebuild_workers`` forked processes; in
PostgreSQL's binary format, :mod:`projections.copying`), checks them, builds the secondary
indexes over them (cheaper than maintaining them row by row), and swaps the schema in with two
renames in one transaction (queries keep reading the old one until the commit). It then
catches the new schema up incrementally with the events written meanwhile. With ``known_at`` it
builds the read models as they were known at that moment into a schema of their own, and swaps
nothing; an erasure recorded since is retroactive there too: its cards are tombstones,
``erased_at`` its time (:mod:`projections.fold`), the erasure itself not listed.

Poison events park their aggregates in the fold as the incremental projector parks them
(decision 0007), and the operators' skip decisions are read from the log first; the rebuilt
``projection_failures`` holds what is parked and what was skipped. A row the database refuses
that the fold could not foresee (an edge to a parked card) sends the rebuild through the
incremental projector instead (:func:`project_into`): slower, and exact. The report lists the
parked events; a failure of the database is said in a sentence, not a traceback.

``catch_up`` applies the log from a position through the incremental :class:`Projector`: the same
code a Kafka-fed projector runs.
"""

from __future__ import annotations

import logging
import multiprocessing
import queue
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql

from infra.postgres import (
    Database,
    Lease,
    admin_database,
    projector_database,
    vector_index_kind,
)
from infra.redact import described
from infra.settings import Settings
from projections.bulk import RowsRefusedError, fold_in_processes, write_rows
from projections.cards import ERASED, forget
from projections.erasures import follow_erasures
from projections.eventlog import (
    Palimpsest,
    decisions,
    events_table,
    load_skips,
    read_aggregate,
    read_ahead,
    read_log,
    read_pages,
)
from projections.fold import Progress, fold, share_of
from projections.projector import TRANSIENT, Delivered, ProjectionError, Projector
from projections.schema import (
    arm_words,
    create_functions,
    create_read_schema,
    fill_words,
    index_statements,
    queue_unembedded,
)
from projections.search_ops import index_classes
from projections.status import parked
from projections.vector_index import Kind, vector_rows

#: Re-exported: the log's readers and the shares, as callers and tests have used them from here.
__all__ = ["RebuildReport", "catch_up", "decisions", "events_table", "make_projector",
           "project_into", "read_ahead", "read_aggregate", "read_log", "read_pages", "rebuild",
           "share_of"]

log = logging.getLogger(__name__)


@dataclass
class RebuildReport:
    schema: str
    events: int
    head: int
    seconds: float
    rows: dict[str, int] = field(default_factory=dict)
    swapped: bool = False
    caught_up: int = 0
    #: The events the rebuilt read models hold parked (as ``projection_failures`` lists them).
    parked: list[dict[str, Any]] = field(default_factory=list)
    #: Whether the database refused a row the fold made, so the log went through the projector.
    projected: bool = False

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0

    def parked_lines(self) -> list[str]:
        """What the command line says about the parked events: nothing when there are none."""
        if not self.parked:
            return []
        aggregates = len({p["originator_id"] for p in self.parked})
        return [f"{len(self.parked)} event(s) of {aggregates} aggregate(s) parked "
                "(palimpsest failures lists them; failures retry / skip):"] + [
            f"  #{p['notification_id']} {p['tenant_id']} {p['originator_id']} "
            f"v{p['originator_version']} {p['reason']}: {p['error']}" for p in self.parked[:20]]


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
                   admin: Database | None = None, known_at: datetime | None = None,
                   projector_db: Database | None = None) -> Projector:
    """The incremental projector as the projector role (``projector_db``, else made from
    ``admin``), reading gaps, retried aggregates and the skip decisions (those recorded by
    ``known_at``, if given) from ``app``'s log; after an erasure, ``app``'s key ring (if any)
    forgets the destroyed keys and the touched tables are vacuumed (:mod:`projections.erasures`)."""
    projector_db = projector_db or projector_database(admin or admin_database(settings), settings)
    schema = schema or settings.read_schema

    def fetch_missing(originator_id: UUID, after: int, before: int | None) -> list[Delivered]:
        return read_aggregate(app, originator_id, after, before)

    def known_decisions() -> list[Any]:
        return [d for d in decisions(app) if known_at is None or d.timestamp <= known_at]

    return Projector(projector_db.connect, schema, fetch_missing, decisions=known_decisions,
                     cache_schema=settings.event_schema,
                     on_erased=follow_erasures(projector_db.connect, schema, settings.event_schema,
                                               getattr(app, "keyring", None)))


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


def build_indexes(admin: Database, schema: str, vector_index: Kind, words: bool, connections: int
                  ) -> None:
    """The read models' indexes built over the copied rows (cheaper than maintaining them during
    the copy) and, with ``words``, the words index filled from the copied cards beside them, one
    share of the cards per connection: on ``connections`` connections at once, each taking the
    next job left (the words first, the costliest); then the words index armed. The vector index
    is sized to the vectors copied."""
    with admin.connect(autocommit=True) as conn:
        vectors = vector_rows(conn, schema) if vector_index == "ivfflat" else 0
        classes = index_classes(conn, schema)
    left: queue.SimpleQueue[Callable[[Any], Any]] = queue.SimpleQueue()
    for part in range(connections if words else 0):
        share = (part, connections) if connections > 1 else None
        left.put(partial(fill_words, schema=schema, share=share))
    for statement in index_statements(schema, vector_index, vectors, classes):
        left.put(partial(_execute, statement))

    def build() -> None:
        with admin.connect(autocommit=True) as conn, conn.cursor() as cur:
            while True:
                try:
                    job = left.get_nowait()
                except queue.Empty:
                    return
                job(cur)

    with ThreadPoolExecutor(max_workers=connections) as pool:
        for built in [pool.submit(build) for _ in range(connections)]:
            built.result()
    with admin.connect(autocommit=True) as conn:
        arm_words(conn, schema, words=False)
        queue_unembedded(conn, schema)  # every copied card waits for its vector


def _execute(statement: sql.Composable, cur: Any) -> None:
    cur.execute(statement)


def fresh_schema(settings: Settings, admin: Database, schema: str) -> None:
    """``schema`` dropped and made again, with only the keys of its tables."""
    with admin.connect(autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        create_read_schema(conn, schema, reader=(settings.runtime_role, settings.http_role),
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
    except psycopg.Error as error:  # said in a sentence, not a traceback
        raise ProjectionError(f"the rebuild into {target} failed: {described(error)}"
                              ) from error
    finally:
        lease.release()


def _rebuild(settings: Settings, app: Palimpsest, admin: Database, target: str,
             known_at: datetime | None, into: str | None, progress: Progress | None,
             workers: int) -> RebuildReport:
    live = settings.read_schema
    started = time.perf_counter()
    head = app.recorder.max_notification_id() or 0
    vector_index, projected = vector_index_kind(settings), False
    try:
        rows, count = _fold_and_copy(settings, app, admin, target, head, known_at, progress,
                                     workers)
        build_indexes(admin, target, vector_index, words=True, connections=workers)
    except (RowsRefusedError, psycopg.DatabaseError) as error:
        if isinstance(error, TRANSIENT):
            raise
        log.warning("rebuild: the database refused a row the fold made (%s); projecting the log "
                    "into %s through the incremental projector instead", described(error), target)
        rows, count = project_into(settings, app, admin, target, head, known_at, progress)
        build_indexes(admin, target, vector_index, words=True, connections=workers)
        projected = True
    report = RebuildReport(target, count, head, time.perf_counter() - started, rows,
                           parked=parked(admin, settings, schema=target).events, projected=projected)
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


def _fold_and_copy(settings: Settings, app: Palimpsest, admin: Database, target: str, head: int,
                   known_at: datetime | None, progress: Progress | None, workers: int
                   ) -> tuple[dict[str, int], int]:
    """The log folded (in ``workers`` processes) and copied into a fresh ``target``: rows
    copied per table, and events read."""
    skipped = load_skips(app, known_at)
    if workers > 1:
        return fold_in_processes(lambda: fresh_schema(settings, admin, target), app, admin,
                                 target, head, known_at, workers, progress, skipped)
    with ThreadPoolExecutor(max_workers=1) as thread:  # the server makes the schema meanwhile
        schema = thread.submit(fresh_schema, settings, admin, target)
        folded = fold(read_log(app, 1, head), head, known_at, progress, skipped)
        schema.result()
    return write_rows(admin, target, folded, head), folded.count


#: The tables a rebuild fills, counted for its report.
FILLED = ("nodes", "slots", "cards", "card_versions", "card_relations", "arbitration_queue",
          "erasures", "projection_tracking", "projection_position", "projection_failures")


def project_into(settings: Settings, app: Palimpsest, admin: Database, schema: str, head: int,
                 known_at: datetime | None, progress: Progress | None = None
                 ) -> tuple[dict[str, int], int]:
    """The log up to ``head`` projected into a fresh ``schema`` through the incremental projector:
    what a rebuild does when the database refuses a row its fold made. At the catch-up's rate,
    and exact: each event is parked where the live projector parks it. As known at a moment,
    what the erasures recorded later forget is applied last, as the fold does."""
    fresh_schema(settings, admin, schema)
    projector = make_projector(settings, app, schema, admin, known_at)
    count = 0
    late = []
    try:
        for batch in read_ahead(app, 1, head, settings.projector_batch):
            count += len(batch)
            known = [d for d in batch if known_at is None or d.event.timestamp is None
                     or d.event.timestamp <= known_at]
            late += [forget(d.event) for d in batch if d not in known
                     and isinstance(d.event, ERASED)]
            if known:
                projector.apply_batch(known)
            if progress:
                progress(batch[-1].notification_id, head)
        projector.forget(late)
        projector.mark_log_position(head)
    finally:
        projector.close()
    with admin.connect() as conn:
        counts = {table: conn.execute(sql.SQL("SELECT count(*) FROM {}.{}").format(
            sql.Identifier(schema), sql.Identifier(table))).fetchone()[0]  # type: ignore[index]
            for table in FILLED}
    return counts, count
