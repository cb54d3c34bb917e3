"""What a long-running process does around its work: Kafka found (the data folder's embedded broker
joined or started, and kept up), heartbeats written, a stop in time, and nothing left running.

The process mains in :mod:`services.entrypoints` — the relay, the projector, the pipeline, serve —
are built from these parts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from infra.broker import ensure_topic, ping
from infra.broker_folder import broker_folder, kafka_bootstrap
from infra.embedded_pg import release_embedded
from infra.heartbeats import Beat, Heartbeats
from infra.settings import Settings
from infra.supervision import BrokerKeeper, Shutdown, quiet_kafka_logs

log = logging.getLogger(__name__)


class Kafka:
    """Where Kafka is for this process: ``settings.kafka_bootstrap``, or the data folder's embedded
    broker — joined, or started here — under a :class:`BrokerKeeper` (it restarts the broker this
    process owns, and takes over one whose owner died). The topic is created at every start."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.bootstrap, broker = kafka_bootstrap(settings)
        self.keeper: BrokerKeeper | None = None
        if not settings.kafka_bootstrap:
            self.keeper = BrokerKeeper(broker_folder(settings), broker, on_ready=self.create_topic)
            if broker is not None:
                log.info("embedded Kafka broker at %s (log in %s)", self.bootstrap, broker.log_path)
                self.create_topic(self.bootstrap)
            self.keeper.start()

    def create_topic(self, bootstrap: str) -> None:
        ensure_topic(bootstrap, self.settings.kafka_topic, self.settings.kafka_partitions)

    @property
    def owner(self) -> bool:
        """Whether this process runs the embedded broker (and so reports its heartbeat)."""
        return self.keeper is not None and self.keeper.owner

    def beat(self) -> Beat | None:
        """The broker's heartbeat, from the process that owns it (the others say nothing)."""
        keeper = self.keeper
        if keeper is None or not keeper.owner:
            return None
        return Beat(keeper.alive, keeper.last_seen,
                    f"{keeper.bootstrap}, restarted {keeper.restarts} time(s)")

    def hold(self) -> None:
        """The process is stopping: the broker is not restarted any more."""
        if self.keeper is not None:
            self.keeper.hold()

    def kill(self) -> None:
        """For a forced exit: stop the broker this process owns at once."""
        if self.keeper is not None and self.keeper.broker is not None:
            self.keeper.broker.kill()

    def close(self) -> None:
        if self.keeper is not None:
            self.keeper.stop(timeout=0.5)


def wait_for_broker(bootstrap: str, stop: threading.Event, timeout: float | None = None) -> bool:
    """Wait until the broker answers (False when ``stop`` is set or ``timeout`` passes first)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    said = False
    while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
        if ping(bootstrap, timeout=1.0):
            if said:
                log.warning("Kafka answers at %s", bootstrap)
            return True
        if not said:
            log.warning("waiting for Kafka at %s", bootstrap)
            said = True
        stop.wait(0.5)
    return False


def heartbeats(connect: Callable[..., Any], settings: Settings,
               **probes: Callable[[], Beat | None]) -> Heartbeats:
    """This process's heartbeats, one per role in ``probes``, started."""
    beats = Heartbeats(connect, settings.event_schema)
    for role, probe in probes.items():
        beats.add(role, probe)
    return beats.start()


def process_shutdown(name: str, settings: Settings, stop: threading.Event | None = None,
                     kafka: Kafka | None = None, deadline: float = 3.5) -> Shutdown:
    """SIGINT/SIGTERM handled; a stop not done within ``deadline`` seconds is forced, and a forced
    exit stops this process's broker and leaves its embedded PostgreSQL first."""
    shutdown = Shutdown(deadline=deadline, name=name, stop=stop).install()
    quiet_kafka_logs()
    if not settings.database_url:
        shutdown.on_force(lambda: release_embedded(settings.data_dir))
    if kafka is not None:
        watch(shutdown, kafka)
    return shutdown


def watch(shutdown: Shutdown, kafka: Kafka) -> None:
    """Once a stop is asked, the broker is not restarted; a forced exit kills it."""
    shutdown.on_stop(kafka.hold)
    shutdown.on_force(kafka.kill)
