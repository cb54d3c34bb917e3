"""``palimpsest relay``: the relays (:class:`infra.relay.Relay`, log → Kafka: the whole log, and
the turns handed to extraction to the ingest topic) as a process of their own, each from its
stored position, until SIGINT/SIGTERM; with their heartbeats, and the broker kept up when it runs
the data folder's embedded one. One relay process per event store: a second one publishes the log
again (harmless, applied once, but wasted)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from infra.eventlog import open_event_log
from infra.heartbeats import Beat
from infra.postgres import admin_database, runtime_database
from infra.processes import Kafka, heartbeats, process_shutdown, watch
from infra.settings import Settings


def run_relay(settings: Settings, stop: threading.Event | None = None) -> None:
    """Publish the log to Kafka until SIGINT/SIGTERM (or ``stop``): ``settings.kafka_bootstrap``,
    else the data folder's embedded broker, kept up by this process while it runs. Heartbeats: the
    relays', and the broker's (when this process runs the embedded one; for an external cluster,
    whether it answers the relay)."""
    from services.entrypoints.pipeline import relays

    shutdown = process_shutdown("relay", settings, stop)
    app = open_event_log(settings)
    kafka = Kafka(settings)
    watch(shutdown, kafka)
    relay, ingest = relays(app.recorder, settings, kafka.bootstrap,
                           embedded_broker=kafka.keeper is not None)
    probes: dict[str, Callable[[], Beat | None]] = {
        "relay": relay.beat, "ingest_relay": ingest.beat, "broker": kafka.beat}
    if kafka.keeper is None:  # an external cluster: the relay says whether it answers
        probes["broker"] = lambda: Beat(relay.last_error is None and relay.beat().alive,
                                        relay.published_at, f"{kafka.bootstrap}, as the relay sees it")
    beats = heartbeats(runtime_database(admin_database(settings), settings).connect, settings, **probes)
    beside = threading.Thread(target=ingest.run, args=(shutdown.stop,), name="relay-ingest",
                              daemon=True)
    beside.start()
    try:
        relay.run(shutdown.stop)
    finally:
        beside.join(timeout=2.0)
        beats.stop()
        relay.close()
        ingest.close()
        kafka.close()
        app.close()
        shutdown.done()
