"""The Faust app that drives the cards projection from Kafka.

The agent only decodes, calls the projector, and stops the worker on a poison event: Faust would
otherwise ack a message whose handler raised and move on. Exactly-once does not rest on Kafka
offsets but on the projector's tracking, committed with the rows; on start the projector first
catches up from the log, so nothing an earlier run left behind is lost.
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
from typing import Any

import faust

from infra.relay import decode_messages
from infra.settings import Settings
from projections.projector import Delivered, ProjectionError, ProjectionUnavailableError, Projector
from services.memory import Palimpsest

log = logging.getLogger(__name__)

#: The exit code of a projector stopped by an event it cannot apply.
POISON_EXIT = 3


@dataclass
class Outcome:
    """What happened to the worker, for the command line's exit code."""

    poisoned: ProjectionError | None = None
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
                     outcome: Outcome, on_poison: Callable[[], None] = stop_this_process,
                     ) -> faust.App:
    _limit_fetch_wait(settings.kafka_fetch_max_wait_ms)
    worker = faust.App(
        "palimpsest-projector",
        broker=f"kafka://{bootstrap}",
        store="memory://",
        web_enabled=False,
        topic_partitions=settings.kafka_partitions,
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=settings.kafka_session_timeout_ms / 1000,
        broker_rebalance_timeout=settings.kafka_rebalance_timeout_ms / 1000,
        broker_max_poll_interval=settings.kafka_max_poll_interval_ms / 1000,
        broker_commit_interval=1.0,
        stream_buffer_maxsize=max(4096, settings.projector_batch * 4),
        topic_allow_declare=False,
        topic_disable_leader=True,
    )
    topic = worker.topic(settings.kafka_topic, key_type=bytes, value_type=bytes,
                         key_serializer="raw", value_serializer="raw")

    def decode(value: bytes) -> list[Delivered]:
        try:
            messages = decode_messages(value)
        except Exception as error:
            projector.record_failure(Projector.LOG, -1, None, None, None, error)
            raise ProjectionError(f"a message cannot be decoded: {error}") from error
        delivered = []
        for message in messages:
            try:
                event = app.mapper.to_domain_event(message.to_stored_event())
            except Exception as error:
                projector.record_failure(Projector.LOG, message.notification_id,
                                         message.originator_id, message.originator_version,
                                         message.topic, error)
                raise ProjectionError(f"notification {message.notification_id} cannot be "
                                      f"decoded: {error}") from error
            delivered.append(Delivered(message.notification_id, event))
        return delivered

    def decode_and_apply(values: list[bytes]) -> int:
        """A message may carry many events: at most ``projector_batch`` go in one transaction.
        (A retry after the database came back applies the same messages again: what was
        committed is skipped by the tracking.)"""
        size = settings.projector_batch
        applied, pending = 0, []
        for value in values:
            pending.extend(decode(value))
            while len(pending) >= size:
                applied += projector.apply_batch(pending[:size])
                pending = pending[size:]
        if pending:
            applied += projector.apply_batch(pending)
        return applied

    #: Batches run in a thread of their own, one at a time: while one waits on the database, the
    #: event loop goes on fetching the next messages from Kafka.
    thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="projector")

    async def apply(values: list[bytes]) -> int:
        """Apply one batch; while the database is away, wait and retry the same batch."""
        delay = 0.5
        while True:
            try:
                return await asyncio.get_running_loop().run_in_executor(
                    thread, decode_and_apply, values)
            except ProjectionUnavailableError as error:
                log.warning("%s; retrying in %.1f s", error, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)

    @worker.agent(topic, name="project")
    async def project(stream: Any) -> None:
        async for values in stream.take(settings.projector_batch, within=0.05):
            try:
                started = time.perf_counter()
                outcome.events += await apply(values)
                outcome.batches += 1
                log.debug("applied %d message(s) in %.1f ms", len(values),
                          (time.perf_counter() - started) * 1000)
            except ProjectionError as error:
                outcome.poisoned = error
                log.critical("projector stopped: %s", error)
                on_poison()  # stop here: never ack past this event
                return

    return worker
