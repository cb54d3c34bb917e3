"""``palimpsest pipeline``: the embedded profile's whole write-to-read-model path, supervised.

One process keeps the parts up:

* the broker — the data folder's embedded tansu (unless ``PALIMPSEST_KAFKA_BOOTSTRAP`` is set), a
  child restarted on the same port when it dies or stops answering (:class:`BrokerKeeper`); the
  relay notices the broker lost its data and publishes again what its consumers have not handled
  (from their low-water mark: :mod:`projections.lowwater`), and the projector's consumer rejoins
  its group on the same address and reads the new topic from the start (what it already applied
  is skipped by its tracking);
* the relay — a thread of this process; beside it the ingest relay (only the turns handed to
  extraction, to ``kafka_ingest_topic``);
* the projector — a child process (``palimpsest project`` against this broker:
  :mod:`services.entrypoints.projector`), started again with backoff when it exits by itself;
  when it exits with ``FAILED_EXIT`` (it cannot go on) the pipeline stops with that code;
* the extraction worker — a child process (``palimpsest ingest-worker``:
  :mod:`services.entrypoints.ingest`) when an LLM is configured, started again with backoff when
  it exits; without one the pipeline says once that extraction is off.

Heartbeats: this process beats for the broker and both relays, each child for itself. SIGINT or
SIGTERM stops everything within :data:`STOP_SECONDS`, whatever the broker is doing.
"""

from __future__ import annotations

import logging
import threading
import time
from functools import partial
from typing import Any

from infra.embedded_pg import drop_dead_handles
from infra.eventlog import open_event_log
from infra.postgres import admin_database, bootstrap, projector_database, runtime_database
from infra.processes import Kafka, heartbeats, process_shutdown, watch
from infra.relay import INGEST_EVENTS, Relay
from infra.settings import Settings
from infra.supervision import Shutdown
from projections.lowwater import extraction_mark, projection_mark
from services.entrypoints.children import Child
from services.ingest.extraction import extraction_off_reason

log = logging.getLogger(__name__)

#: The longest a stop takes (the projector gets most of it, then it is killed).
STOP_SECONDS = 5.0


def run_pipeline(settings: Settings) -> int:
    """Run until SIGINT/SIGTERM; 0, or the projector's ``FAILED_EXIT``."""
    shutdown = process_shutdown("pipeline", settings)
    settings = prepare(settings)
    app = open_event_log(settings)
    parts = Pipeline(settings, shutdown, app.recorder)
    log.warning("pipeline: broker %s, relay and projector running; Ctrl-C stops", parts.kafka.bootstrap)
    try:
        return parts.supervise(shutdown.stop)
    finally:
        parts.close()
        app.close()
        leave(settings)
        shutdown.done()


def prepare(settings: Settings) -> Settings:
    """Bootstrap the event store once (it starts the embedded PostgreSQL); the settings the
    parts then run with (no bootstrap of their own)."""
    if settings.auto_bootstrap:
        bootstrap(admin_database(settings), settings)
    return settings.model_copy(update={"auto_bootstrap": False})


def leave(settings: Settings) -> None:
    """A projector killed on the way out cannot leave the embedded server itself: drop it."""
    if not settings.database_url:
        drop_dead_handles(settings.data_dir.resolve() / "pg")


def relays(recorder: Any, settings: Settings, bootstrap: str, **options: Any) -> tuple[Relay, Relay]:
    """The relay of the whole log and the ingest relay, each republishing, when the broker lost
    its messages, only what its consumers have not handled (:mod:`projections.lowwater`)."""
    projector_db = projector_database(admin_database(settings), settings)
    main = Relay.from_settings(recorder, settings, bootstrap, **options,
                               resume_from=partial(projection_mark, projector_db, settings))
    ingest = Relay.for_ingest(recorder, settings, bootstrap, **options,
                              resume_from=partial(extraction_mark, projector_db, settings,
                                                  INGEST_EVENTS))
    return main, ingest


class Pipeline:
    """The broker (joined or started, kept up), the relay (a thread, publishing ``recorder``'s
    log) and the projector (a child process), with this process's heartbeats for the broker and
    the relay: ``palimpsest pipeline``, and the same parts under ``palimpsest serve``.

    :meth:`supervise` keeps the projector up until a stop; :meth:`close` stops every part within
    :data:`STOP_SECONDS`."""

    def __init__(self, settings: Settings, shutdown: Shutdown, recorder: Any) -> None:
        self.kafka = Kafka(settings)
        watch(shutdown, self.kafka)
        self.relay, self.ingest_relay = relays(recorder, settings, self.kafka.bootstrap)
        self._relays = [(relay, threading.Thread(target=relay.run, args=(shutdown.stop,),
                                                 name=f"relay-{relay.name}", daemon=True))
                        for relay in (self.relay, self.ingest_relay)]
        for _, thread in self._relays:
            thread.start()
        self.beats = heartbeats(runtime_database(admin_database(settings), settings).connect,
                                settings, relay=self.relay.beat, ingest_relay=self.ingest_relay.beat,
                                broker=self.kafka.beat)
        self.projector = Child(settings, self.kafka.bootstrap, self.beats, "project", "projector")
        self.ingest: Child | None = None
        off = extraction_off_reason(settings)
        if off is None:
            self.ingest = Child(settings, self.kafka.bootstrap, self.beats, "ingest-worker",
                                "extraction worker")
        else:
            log.warning("pipeline: %s", off)
        for child in self.children:
            shutdown.on_stop(child.terminate)  # they stop while the rest of this process does
            shutdown.on_force(child.kill)

    @property
    def children(self) -> list[Child]:
        return [c for c in (self.projector, self.ingest) if c is not None]

    def supervise(self, stop: threading.Event) -> int:
        """Until ``stop``: 0, or the projector's ``FAILED_EXIT`` (it cannot go on)."""
        if self.ingest is not None:
            threading.Thread(target=self.ingest.supervise, args=(stop,), name="ingest-supervisor",
                             daemon=True).start()
        return self.projector.supervise(stop)

    def close(self) -> None:
        for child in self.children:
            child.terminate()
        for child in self.children:
            child.stop(timeout=STOP_SECONDS / 2)
        deadline = time.monotonic() + 1.0  # both relays saw the stop at once: wait for them together
        for relay, thread in self._relays:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
            if not thread.is_alive():  # else it is inside a call to the broker: let it be
                relay.close()
        self.beats.stop()
        self.kafka.close()
