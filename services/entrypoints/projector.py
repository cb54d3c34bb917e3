"""``palimpsest project``: the projector process — catch up from the log, then follow Kafka with
Faust (started again in this process when it stops by itself); embeddings in a thread of their own
so the cards projection never waits on a model; heartbeats; SIGINT/SIGTERM stop it in time.

What it runs is in :mod:`projections`: the catch-up (:func:`projections.replay.catch_up`), the
Faust app (:mod:`projections.faust_app`), the embedding loop (:mod:`projections.worker`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import time
from typing import Any

import faust

from infra.eventlog import open_event_log
from infra.heartbeats import Beat
from infra.locale_check import check_cjk_support
from infra.postgres import Database, admin_database, bootstrap, projector_database, vector_index_kind
from infra.processes import Kafka, heartbeats, process_shutdown, wait_for_broker, watch
from infra.redact import described
from infra.settings import Settings
from infra.supervision import Shutdown
from projections.faust_app import FAILED_EXIT, Outcome, create_faust_app
from projections.lowwater import LowWaterKeeper
from projections.projector import ProjectionError
from projections.replay import catch_up, make_projector
from projections.text import warm_up
from projections.vector_index import VectorIndexKeeper
from projections.worker import embedding_lease, embedding_loop, embedding_projection

log = logging.getLogger(__name__)


def run_projector(settings: Settings, bootstrap_servers: str | None = None) -> int:
    """Run until stopped; the exit code is 0, or ``FAILED_EXIT`` when the projector cannot go
    on (a poison event parks its aggregate and stops nothing)."""
    shutdown = process_shutdown("projector", settings)
    kafka = None
    if bootstrap_servers is None:  # the configured Kafka, or the data folder's embedded broker
        kafka = Kafka(settings)
        watch(shutdown, kafka)
        bootstrap_servers = kafka.bootstrap
    admin = admin_database(settings)
    if settings.auto_bootstrap:
        bootstrap(admin, settings)
    pulse = Pulse()
    probes = {"projector": pulse.beat, **({"broker": kafka.beat} if kafka is not None else {})}
    beats = heartbeats(projector_database(admin, settings).connect, settings, **probes)
    try:
        return _run_projector(settings, bootstrap_servers, shutdown, pulse, admin)
    finally:
        beats.stop()
        if kafka is not None:
            kafka.close()
        shutdown.done()


def _run_projector(settings: Settings, servers: str, shutdown: Shutdown, pulse: Pulse,
                   admin: Database) -> int:
    with projector_database(admin, settings).connect() as conn:
        check_cjk_support(conn)  # refuse to start where Chinese fuzzy matching would silently fail
    app = open_event_log(settings.model_copy(update={"auto_bootstrap": False}))
    projector = make_projector(settings, app, admin=admin)
    stop = threading.Event()
    pulse.phase = "catching up"
    try:  # a poison event is parked here, not raised: what is raised stops the projector
        caught = catch_up(projector, app, batch=settings.projector_batch)
        log.info("caught up %d event(s) from the log", caught)
    except ProjectionError as error:
        log.critical("projector stopped: %s", error)
        return FAILED_EXIT
    if projector.parked:
        log.warning("the catch-up parked %d event(s): `palimpsest failures` lists them",
                    projector.parked)
    if settings.projector_embeddings:
        start_embeddings(settings, stop)
    VectorIndexKeeper(admin, settings.read_schema, vector_index_kind(settings), stop,
                      settings.vector_index_interval_seconds).start()
    # the next start's catch-up, and a relay whose broker lost its messages, start from this mark
    LowWaterKeeper(projector_database(admin, settings), settings.event_schema,
                   settings.read_schema, projector.name, stop).start()
    warm_up()  # the tokenizer loads now, not inside the first batch while its partition waits
    pulse.phase = "waiting for Kafka"
    outcome = Outcome()
    try:
        _follow(settings, servers, app, projector, outcome, shutdown, pulse)
    finally:
        stop.set()
        projector.close()
        app.close()
    return FAILED_EXIT if outcome.failed else 0


def _follow(settings: Settings, servers: str, app: Any, projector: Any, outcome: Outcome,
            shutdown: Shutdown, pulse: Pulse, max_backoff: float = 30.0) -> None:
    """Run the Faust worker until a stop; one that stops by itself (Faust gives up on a broker
    that is down while it starts) is started again in this process, on a fresh event loop, once
    the broker answers, with backoff. What it had acked but not applied is in the log: its
    tracking decides what is applied, and a duplicate changes nothing."""
    backoff = 1.0
    while wait_for_broker(servers, shutdown.stop):
        asyncio.set_event_loop(asyncio.new_event_loop())
        started = time.monotonic()
        worker_app = create_faust_app(settings, servers, app, projector, outcome)
        pulse.follow(worker_app, outcome)
        if not _run_worker(worker_app, shutdown, outcome):
            return
        shutdown.install()  # the closed loop took Faust's signal handlers, and ours, with it
        backoff = 1.0 if time.monotonic() - started > 60 else min(backoff * 2, max_backoff)
        pulse.phase = "waiting for Kafka"
        log.warning("starting the Kafka consumer again in %.0f s", backoff)
        if shutdown.stop.wait(backoff):
            return


class _Worker(faust.Worker):
    """Faust's worker, its SIGINT and SIGTERM told to this process's :class:`Shutdown` (which
    forces the exit when a stop hangs on the broker), without a spinner or logging of its own."""

    def __init__(self, app: faust.App, shutdown: Shutdown) -> None:
        super().__init__(app, loglevel="WARNING", quiet=True, redirect_stdouts=False,
                         override_logging=False)
        self.spinner = None
        self.shutdown = shutdown
        shutdown.on_stop(self._stop_soon)

    def _stop_soon(self) -> None:
        """A stop asked elsewhere (another thread, a signal before Faust's handlers)."""
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._schedule_shutdown, signal.SIGTERM)

    def _on_sigint(self) -> None:
        self.shutdown.request("SIGINT", signal.SIGINT)

    def _on_sigterm(self) -> None:
        self.shutdown.request("SIGTERM", signal.SIGTERM)


def _run_worker(worker_app: faust.App, shutdown: Shutdown, outcome: Outcome) -> bool:
    """Run Faust until it stops; True when it stopped by itself."""
    worker = _Worker(worker_app, shutdown)
    try:
        with contextlib.suppress(SystemExit):  # the worker exits the process when it stops
            worker.execute_from_commandline()
    except Exception as error:  # Faust re-raises what crashed it
        if not shutdown.stop.is_set():
            log.error("the Kafka consumer stopped: %s", described(error))
            return True
    if shutdown.stop.is_set() or outcome.failed is not None:
        return False
    log.error("the Kafka consumer stopped by itself")
    return True


class Pulse:
    """The projector's heartbeat: alive while it catches up or waits for Kafka, and while Faust's
    event loop comes round (a timer ticks every second); its progress: when it last applied
    events."""

    def __init__(self, within: float = 6.0) -> None:
        self.within = within
        self.phase = "starting"
        self.ticked_at: float | None = None
        self.progress_at: float | None = None
        self._events = 0

    def follow(self, worker_app: faust.App, outcome: Outcome) -> None:
        async def tick() -> None:
            self.ticked_at = time.monotonic()
            if outcome.events != self._events:
                self._events, self.progress_at = outcome.events, time.time()

        worker_app.timer(interval=1.0, name="palimpsest-pulse")(tick)
        self.ticked_at, self.phase = time.monotonic(), "following Kafka"

    def beat(self) -> Beat:
        if self.phase != "following Kafka":
            return Beat(True, self.progress_at, self.phase)
        alive = self.ticked_at is not None and time.monotonic() - self.ticked_at < self.within
        return Beat(alive, self.progress_at, f"{self.phase}: {self._events} event(s) applied")


def start_embeddings(settings: Settings, stop: threading.Event) -> threading.Thread:
    """The embedding loop on a daemon thread until ``stop``, while this process holds the lease."""
    projection = embedding_projection(settings)
    thread = threading.Thread(target=embedding_loop, args=(projection, stop), kwargs={
        "lease": embedding_lease(settings), "idle": 2.0,
        "window": settings.embedding_window_ms / 1000}, daemon=True, name="embeddings")
    thread.start()
    return thread
