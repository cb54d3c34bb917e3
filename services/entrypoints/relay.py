"""``palimpsest relay``: the relay (:class:`infra.relay.Relay`, log → Kafka) as a process of its
own, from its stored position, until SIGINT/SIGTERM; with its heartbeats, and the broker kept up
when it runs the data folder's embedded one."""

from __future__ import annotations

import threading
from collections.abc import Callable

from infra.eventlog import open_event_log
from infra.heartbeats import Beat
from infra.postgres import admin_database, runtime_database
from infra.processes import Kafka, heartbeats, process_shutdown, watch
from infra.relay import Relay
from infra.settings import Settings


def run_relay(settings: Settings, stop: threading.Event | None = None, name: str = "main") -> None:
    """Publish the log to Kafka until SIGINT/SIGTERM (or ``stop``): ``settings.kafka_bootstrap``,
    else the data folder's embedded broker, kept up by this process while it runs. Heartbeats: the
    relay's, and the broker's (when this process runs the embedded one; for an external cluster,
    whether it answers the relay)."""
    shutdown = process_shutdown("relay", settings, stop)
    app = open_event_log(settings)
    kafka = Kafka(settings)
    watch(shutdown, kafka)
    relay = Relay.from_settings(app.recorder, settings, kafka.bootstrap, name=name,  # type: ignore[arg-type]
                                embedded_broker=kafka.keeper is not None)
    probes: dict[str, Callable[[], Beat | None]] = {"relay": relay.beat, "broker": kafka.beat}
    if kafka.keeper is None:  # an external cluster: the relay says whether it answers
        probes["broker"] = lambda: Beat(relay.last_error is None and relay.beat().alive,
                                        relay.published_at, f"{kafka.bootstrap}, as the relay sees it")
    beats = heartbeats(runtime_database(admin_database(settings), settings).connect, settings, **probes)
    try:
        relay.run(shutdown.stop)
    finally:
        beats.stop()
        relay.close()
        kafka.close()
        app.close()
        shutdown.done()
