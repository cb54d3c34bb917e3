"""``palimpsest pipeline``: the embedded profile's whole write-to-read-model path, supervised.

One process keeps the parts up:

* the broker — the data folder's embedded tansu (unless ``PALIMPSEST_KAFKA_BOOTSTRAP`` is set), a
  child restarted on the same port when it dies or stops answering (:class:`BrokerKeeper`); the
  relay notices the broker lost its data and publishes the log again, and the projector's consumer
  rejoins its group on the same address and reads the new topic from the start (what it already
  applied is skipped by its tracking);
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

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr

from infra.broker import die_with_parent
from infra.embedded_pg import drop_dead_handles
from infra.eventlog import open_event_log
from infra.heartbeats import Heartbeats
from infra.postgres import admin_database, bootstrap, runtime_database
from infra.processes import Kafka, heartbeats, process_shutdown, watch
from infra.relay import Relay
from infra.settings import Settings
from infra.supervision import Shutdown
from projections.faust_app import FAILED_EXIT
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


class Pipeline:
    """The broker (joined or started, kept up), the relay (a thread, publishing ``recorder``'s
    log) and the projector (a child process), with this process's heartbeats for the broker and
    the relay: ``palimpsest pipeline``, and the same parts under ``palimpsest serve``.

    :meth:`supervise` keeps the projector up until a stop; :meth:`close` stops every part within
    :data:`STOP_SECONDS`."""

    def __init__(self, settings: Settings, shutdown: Shutdown, recorder: Any) -> None:
        self.kafka = Kafka(settings)
        watch(shutdown, self.kafka)
        self.relay = Relay.from_settings(recorder, settings, self.kafka.bootstrap)
        self.ingest_relay = Relay.for_ingest(recorder, settings, self.kafka.bootstrap)
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


class Child:
    """``palimpsest <command>`` (the projector, the extraction worker) as a child process: dies
    with this process (Linux), restarted with backoff when it exits by itself."""

    def __init__(self, settings: Settings, bootstrap: str, beats: Heartbeats | None = None,
                 command: str = "project", name: str = "projector",
                 max_backoff: float = 30.0) -> None:
        self.env = {**settings_env(settings), "PALIMPSEST_KAFKA_BOOTSTRAP": bootstrap}
        self.command = command
        self.name = name
        self.beats = beats
        self.max_backoff = max_backoff
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._started_at = 0.0
        self._signalled: set[int] = set()

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "services.entrypoints.cli", self.command], env=self.env,
            stdin=subprocess.DEVNULL, start_new_session=True,
            preexec_fn=die_with_parent())  # Ctrl-C reaches the pipeline only
        self.starts += 1
        self._started_at = time.monotonic()

    def supervise(self, stop: threading.Event) -> int:
        """Keep it running until ``stop``; its ``FAILED_EXIT`` ends the pipeline with that code."""
        backoff = 1.0
        self.start()
        while not stop.wait(0.2):
            assert self.process is not None
            code = self.process.poll()
            if code is None:
                continue
            if code == FAILED_EXIT:
                log.critical("pipeline: the %s cannot go on (exit code %d): stopping", self.name, code)
                return code
            if time.monotonic() - self._started_at > 60:
                backoff = 1.0
            log.warning("pipeline: the %s (pid %d) exited with code %d; starting it again in "
                        "%.0f s", self.name, self.process.pid, code, backoff)
            self._forget()
            if stop.wait(backoff):
                break
            backoff = min(backoff * 2, self.max_backoff)
            self.start()
        return 0

    def terminate(self) -> None:
        """Ask it to stop (SIGTERM, once: a second one forces its exit), without waiting."""
        process = self.process
        if process is not None and process.poll() is None and process.pid not in self._signalled:
            self._signalled.add(process.pid)
            process.send_signal(signal.SIGTERM)

    def stop(self, timeout: float) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        self.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("pipeline: the %s did not stop within %.1f s: killing it", self.name, timeout)
            self.kill()

    def kill(self) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(5)
            self._forget()

    def _forget(self) -> None:
        """Its heartbeats say stopped at once (a killed child cannot say it)."""
        if self.beats is not None and self.process is not None:
            self.beats.mark_stopped(self.process.pid)


def settings_env(settings: Settings) -> dict[str, str]:
    """This process's environment, with the ``PALIMPSEST_*`` variables that make a child's
    ``Settings()`` equal ``settings`` (the others, e.g. ``PALIMPSEST_CACHE_DIR``, kept)."""
    env = dict(os.environ)
    for name in type(settings).model_fields:
        variable, value = f"PALIMPSEST_{name.upper()}", getattr(settings, name)
        for key in [k for k in env if k == variable or k.startswith(variable + "__")]:
            del env[key]
        if value is not None:
            env[variable] = _env_value(value)
    return env


def _env_value(value: Any) -> str:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    if isinstance(value, Path):
        return str(value.resolve())
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple | dict):
        return json.dumps(value)
    return str(value)
