"""The Faust app that drives the cards projection from Kafka.

The agent decodes and calls the projector. A poison event does not stop it: the projector parks
the event's aggregate (decision 0007) and every other one goes on. Faust acks a batch of messages
when the agent takes it, before it is applied, so Kafka offsets never decide what is applied:
exactly-once rests on the projector's tracking, committed with the rows, and on start the
projector first catches up from the log, so nothing an earlier run acked but did not apply is
lost. The worker stops only when the projector itself cannot go on (its bookkeeping refused).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faust

from infra.redact import described
from infra.relay import decode_messages
from infra.settings import Settings
from projections.eventlog import Palimpsest
from projections.parking import MESSAGE, Failure
from projections.projector import (
    Delivered,
    ProjectionError,
    ProjectionUnavailableError,
    Projector,
    decode,
)

log = logging.getLogger(__name__)

#: The exit code of a projector that stopped because it cannot go on: its own bookkeeping (the
#: tracking, a parked event's row) was refused, or the database failed during the start's catch-up.
#: A poison event parks its aggregate and stops nothing.
FAILED_EXIT = 3


@dataclass
class Outcome:
    """What happened to the worker, for the command line's exit code."""

    failed: ProjectionError | None = None
    batches: int = 0
    events: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def stop_this_process() -> None:
    os.kill(os.getpid(), signal.SIGTERM)  # the worker shuts down without acking further


def _limit_fetch_wait(max_wait_ms: int) -> None:
    """Faust builds its aiokafka consumer with ``fetch_max_wait_ms=1500``, fixed. A broker that
    holds a fetch for the whole wait even when records arrive (the embedded tansu does) then
    delivers one fetch per 1.5 s, and a steady stream falls behind. Cap the wait."""
    import aiokafka

    init = aiokafka.AIOKafkaConsumer.__init__
    if getattr(init, "palimpsest_cap", None) == max_wait_ms:
        return
    original = getattr(init, "__wrapped__", init)

    @functools.wraps(original)
    def capped(self: Any, *topics: Any, **kwargs: Any) -> None:
        kwargs["fetch_max_wait_ms"] = min(kwargs.get("fetch_max_wait_ms", 500), max_wait_ms)
        original(self, *topics, **kwargs)

    capped.palimpsest_cap = max_wait_ms  # type: ignore[attr-defined]
    aiokafka.AIOKafkaConsumer.__init__ = capped  # type: ignore[method-assign]


def create_faust_app(settings: Settings, bootstrap: str, app: Palimpsest, projector: Projector,
                     outcome: Outcome, on_failure: Callable[[], None] = stop_this_process,
                     ) -> faust.App:
    _limit_fetch_wait(settings.kafka_fetch_max_wait_ms)
    # Faust keeps its tables there; on an external database nothing else has made the folder
    datadir = Path(settings.data_dir).resolve() / "faust"
    datadir.mkdir(parents=True, exist_ok=True)
    worker = faust.App(
        "palimpsest-projector",
        broker=f"kafka://{bootstrap}",
        store="memory://",
        datadir=str(datadir),  # not the working directory
        web_enabled=False,
        topic_partitions=settings.kafka_partitions,
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=settings.kafka_session_timeout_ms / 1000,
        broker_rebalance_timeout=settings.kafka_rebalance_timeout_ms / 1000,
        # A restarted broker forgets the group: the next heartbeat finds out and the consumer rejoins.
        broker_heartbeat_interval=1.0,
        broker_max_poll_interval=settings.kafka_max_poll_interval_ms / 1000,
        broker_commit_interval=1.0,
        stream_buffer_maxsize=max(4096, settings.projector_batch * 4),
        topic_allow_declare=False,
        topic_disable_leader=True,
    )
    topic = worker.topic(settings.kafka_topic, key_type=bytes, value_type=bytes,
                         key_serializer="raw", value_serializer="raw")

    def decode_value(value: bytes) -> list[Delivered]:
        """A message's events; an event that cannot be decoded comes as an Undecodable (its
        aggregate is parked). A message that is no relayed event names no event to park: it is
        recorded (notification -1) and passed; the events it held are in the log, where
        ``palimpsest failures retry`` and every start's catch-up read them."""
        try:
            messages = decode_messages(value)
        except Exception as error:
            projector.record(Failure(Projector.LOG, -1, None, None, None, MESSAGE,
                                     described(error)))
            log.error("a Kafka message is no relayed event (recorded as notification -1 in "
                      "projection_failures): %s", described(error))
            return []
        return [decode(app.mapper, message.to_notification()) for message in messages]

    def decode_all(values: list[bytes]) -> list[Delivered]:
        return [each for value in values for each in decode_value(value)]

    #: Two threads: while one transaction is applied (and waits on the database), the next
    #: events are decoded, and the event loop goes on fetching from Kafka.
    decoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="decoder")
    applier = ThreadPoolExecutor(max_workers=1, thread_name_prefix="projector")
    size = settings.projector_batch
    #: Messages decoded at a time: about one transaction's worth when they are full.
    step = max(1, size // settings.kafka_events_per_message)

    async def apply(delivered: list[Delivered]) -> int:
        """Apply one transaction's events; while the database is away, wait and retry them."""
        delay = 0.5
        while True:
            try:
                return await asyncio.get_running_loop().run_in_executor(
                    applier, projector.apply_batch, delivered)
            except ProjectionUnavailableError as error:
                log.warning("%s; retrying in %.1f s", error, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)

    def failed(error: ProjectionError) -> None:
        outcome.failed = error
        log.critical("projector stopped: %s", error)
        on_failure()  # stop here: nothing after this batch is applied

    def settled(running: asyncio.Future[int], started: float, events: int) -> None:
        """A transaction's outcome as soon as it has one: a projector that cannot go on stops
        the worker at once (a poison event does not: it is parked inside the transaction)."""
        if running.cancelled():
            return
        error = running.exception()
        if error is None:
            outcome.events += running.result()
            outcome.batches += 1
            log.debug("applied %d event(s) in %.1f ms", events, (time.perf_counter() - started) * 1000)
        elif isinstance(error, ProjectionError):
            failed(error)
        else:
            log.error("a projector batch failed: %s", described(error))

    @worker.agent(topic, name="project")
    async def project(stream: Any) -> None:
        """A message may carry many events: they go in transactions of at most
        ``projector_batch``, applied one at a time and in order. Faust acks a batch of messages
        when it is handed over, before it is applied: exactly-once rests on the projector's
        tracking, and a restart catches up from the log whatever was acked but not applied."""
        loop = asyncio.get_running_loop()
        running: asyncio.Future[int] | None = None

        async def submit(delivered: list[Delivered]) -> bool:
            nonlocal running
            if running is not None:
                await asyncio.wait([running])
            if outcome.failed is not None:
                return False
            running = asyncio.ensure_future(apply(delivered))
            running.add_done_callback(functools.partial(
                settled, started=time.perf_counter(), events=len(delivered)))
            return True

        try:
            async for values in stream.take(size, within=0.05):
                pending: list[Delivered] = []
                for first in range(0, len(values), step):
                    pending += await loop.run_in_executor(
                        decoder, decode_all, values[first:first + step])
                    while len(pending) >= size:
                        if not await submit(pending[:size]):
                            return
                        pending = pending[size:]
                if pending and not await submit(pending):
                    return
        finally:
            if running is not None and not running.done():
                await asyncio.wait([running])

    return worker
