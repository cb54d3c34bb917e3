"""The whole path: command → event store → relay → Kafka (embedded tansu) → Faust projector
process → read models. The projector runs as a real process so it can be killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest

from infra.broker import EmbeddedBroker, ensure_topic
from infra.postgres import Database
from infra.relay import Relay
from infra.settings import Settings
from projections.replay import rebuild
from services.factory import create_app
from services.readmodels import ReadModels
from tests.integration.test_projections import COMPARED, dump
from tests.support import new_tenant, state

pytestmark = pytest.mark.integration


class Pipeline:
    """A relay thread in this process and a projector process, on one topic of their own."""

    def __init__(self, settings: Settings, bootstrap: str, tmp: Path) -> None:
        self.settings = settings.model_copy(update={
            "kafka_topic": f"events-{uuid4().hex[:8]}", "kafka_bootstrap": bootstrap})
        ensure_topic(bootstrap, self.settings.kafka_topic, self.settings.kafka_partitions)
        self.app = create_app(self.settings)
        self.stop = threading.Event()
        self.relay = Relay.from_settings(self.app.recorder, self.settings, bootstrap,
                                         name=f"relay-{uuid4().hex[:6]}")
        self.relay_thread = threading.Thread(target=self.relay.run, args=(self.stop,), daemon=True)
        self.relay_thread.start()
        self.log = tmp / f"projector-{uuid4().hex[:6]}.log"
        self.projector: subprocess.Popen[bytes] | None = None

    def env(self) -> dict[str, str]:
        return {**os.environ, "PALIMPSEST_DATA_DIR": str(self.settings.data_dir),
                "PALIMPSEST_KAFKA_BOOTSTRAP": self.settings.kafka_bootstrap or "",
                "PALIMPSEST_KAFKA_TOPIC": self.settings.kafka_topic,
                "PALIMPSEST_AUTO_BOOTSTRAP": "false", "PALIMPSEST_PROJECTOR_EMBEDDINGS": "false",
                "PALIMPSEST_PROJECTOR_BATCH": "100"}

    def start_projector(self) -> None:
        with self.log.open("ab") as out:
            self.projector = subprocess.Popen(
                [sys.executable, "-m", "services.cli", "project"], env=self.env(),
                stdout=out, stderr=subprocess.STDOUT)

    def kill_projector(self, sig: int = signal.SIGKILL) -> int:
        assert self.projector is not None
        self.projector.send_signal(sig)
        return self.projector.wait(timeout=30)

    def close(self) -> None:
        if self.projector is not None and self.projector.poll() is None:
            self.kill_projector(signal.SIGKILL)
        self.stop.set()
        self.relay_thread.join(timeout=10)
        self.relay.close()
        self.app.close()


@pytest.fixture
def pipeline(pg_settings: Settings, admin_db: Database, broker: EmbeddedBroker,
             tmp_path: Path) -> Iterator[Pipeline]:
    made = Pipeline(pg_settings, broker.bootstrap, tmp_path)
    yield made
    made.close()


@pytest.fixture
def reads(runtime_db: Database, pg_settings: Settings) -> Iterator[ReadModels]:
    models = ReadModels(runtime_db, pg_settings.read_schema)
    yield models
    models.close()


def wait_fresh(reads: ReadModels, tenant: str, position: int, pipeline: Pipeline,
               timeout: float = 60) -> None:
    freshness = reads.wait_for(tenant, position, timeout=timeout)
    assert freshness.fresh, f"stale by {freshness.stale_by}: {pipeline.log.read_text()[-3000:]}"


def test_a_command_reaches_the_read_models_through_kafka(pipeline, reads) -> None:
    tenant = new_tenant()
    pipeline.start_projector()
    first = pipeline.app.remember(tenant, state("address", "Taipei"))
    second = pipeline.app.remember(tenant, state("address", "Kyoto"))
    assert reads.wait_for(tenant, second.position, timeout=0).stale_by >= 1
    wait_fresh(reads, tenant, second.position, pipeline)
    assert [c.content for c in reads.current(tenant)] == ["Kyoto"]
    assert first.position is not None and first.position < second.position


def test_kill_9_mid_batch_then_restart_applies_every_event_once(
    pipeline, reads, pg_settings, admin_db
) -> None:
    tenant = new_tenant()
    writers = [new_tenant() for _ in range(3)]
    pipeline.start_projector()
    marker = pipeline.app.remember(tenant, state("address", "Taipei"))
    wait_fresh(reads, tenant, marker.position, pipeline)
    last: dict[str, Any] = {}
    killed = threading.Event()

    def kill_mid_stream() -> None:
        while reads.projected(tenant) < marker.position + 60:
            time.sleep(0.005)
        pipeline.kill_projector(signal.SIGKILL)
        killed.set()

    killer = threading.Thread(target=kill_mid_stream, daemon=True)
    killer.start()
    for i in range(400):
        writer = writers[i % 3]
        last[writer] = pipeline.app.remember(writer, state("skills", f"skill {i}"))
        last[tenant] = pipeline.app.remember(tenant, state("interests", f"interest {i}"))
    final = pipeline.app.remember(tenant, state("address", "Kaohsiung"))
    assert killed.wait(60), pipeline.log.read_text()[-3000:]
    assert reads.projected(tenant) < final.position, "killed before it finished"
    pipeline.start_projector()
    wait_fresh(reads, tenant, final.position, pipeline)
    for writer, result in last.items():
        wait_fresh(reads, writer, result.position, pipeline)
    report = rebuild(pg_settings, pipeline.app, into="palimpsest_read_kill9")
    assert report.events >= 800
    for who in (tenant, *writers):
        for table in COMPARED:
            live = dump(admin_db, pg_settings.read_schema, table, who)
            rebuilt = dump(admin_db, "palimpsest_read_kill9", table, who)
            assert live == rebuilt, f"{table}: exactly once is broken"


def test_a_broker_restart_loses_nothing(pg_settings, admin_db, reads, tmp_path) -> None:
    with EmbeddedBroker(tmp_path / "own-broker") as own:
        own.start()
        pipeline = Pipeline(pg_settings, own.bootstrap, tmp_path)
        try:
            tenant = new_tenant()
            pipeline.start_projector()
            before = pipeline.app.remember(tenant, state("address", "Taipei"))
            wait_fresh(reads, tenant, before.position, pipeline)
            own.restart()  # in-memory storage: every message and offset is gone
            ensure_topic(own.bootstrap, pipeline.settings.kafka_topic,
                         pipeline.settings.kafka_partitions)
            after = pipeline.app.remember(tenant, state("address", "Kyoto"))
            wait_fresh(reads, tenant, after.position, pipeline)
            assert [c.content for c in reads.current(tenant)] == ["Kyoto"]
        finally:
            pipeline.close()
