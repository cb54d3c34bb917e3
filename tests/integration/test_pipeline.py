"""The whole path: command → event store → relay → Kafka (embedded tansu) → Faust projector
process → read models. The projector runs as a real process so it can be killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import socket
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
from infra.supervision import BrokerKeeper
from projections.replay import rebuild
from services.factory import create_app
from services.query.readmodels import ReadModels
from tests.integration.faults import Stream, assert_applied_once, first_move, wait_projected
from tests.integration.test_projections import COMPARED, dump
from tests.support import new_tenant, state

pytestmark = pytest.mark.integration


class Pipeline:
    """A relay thread in this process and a projector process, on one topic of their own."""

    def __init__(self, settings: Settings, bootstrap: str, tmp: Path, topic_now: bool = True) -> None:
        self.settings = settings.model_copy(update={
            "kafka_topic": f"events-{uuid4().hex[:8]}", "kafka_bootstrap": bootstrap})
        if topic_now:
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
                [sys.executable, "-m", "services.entrypoints.cli", "project"], env=self.env(),
                stdout=out, stderr=subprocess.STDOUT)

    def wait_following(self, admin: Database, timeout: float = 60) -> None:
        """Until the projector's heartbeat says it follows Kafka (its catch-up is over)."""
        assert self.projector is not None
        deadline = time.monotonic() + timeout
        while True:
            with admin.connect() as conn:
                row = conn.execute("SELECT detail FROM palimpsest.heartbeats WHERE role = 'projector' "
                                   "AND pid = %s AND stopped_at IS NULL", (self.projector.pid,)).fetchone()
            if row and "Kafka" in (row[0] or "") and "waiting" not in row[0]:
                return
            assert time.monotonic() < deadline, self.log.read_text()[-3000:]
            time.sleep(0.2)

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


def test_a_broker_killed_mid_stream_is_restarted_and_loses_nothing(
    pg_settings, admin_db, reads, tmp_path
) -> None:
    """SIGKILL of the broker while events stream: the keeper restarts it on the same port, the
    relay republishes what it lost, the projector's consumer rejoins; every event written before,
    during and after the outage is applied exactly once."""
    folder = tmp_path / "own-broker"
    broker = EmbeddedBroker(folder)
    broker.start()
    pipeline = Pipeline(pg_settings, broker.bootstrap, tmp_path)
    keeper = BrokerKeeper(folder, broker, on_ready=lambda bootstrap: ensure_topic(
        bootstrap, pipeline.settings.kafka_topic, pipeline.settings.kafka_partitions)).start()
    stream = Stream(pipeline.app, new_tenant())
    try:
        pipeline.start_projector()
        pipeline.wait_following(admin_db)
        stream.start()
        wait_projected(reads.projected, stream.tenant, 20, timeout=60)
        port, pid, killed = broker.port, broker.pid, time.monotonic()
        os.kill(pid, signal.SIGKILL)  # in-memory storage: every message and offset is gone
        moved = first_move(reads.projected, stream, killed)
        time.sleep(1.0)
        last = stream.stop()
        wait_projected(reads.projected, stream.tenant, last)
        assert broker.port == port and broker.pid != pid and keeper.restarts == 1
        assert stream.between(0, killed) > 0 and stream.between(killed, moved) > 0
        assert stream.between(moved, time.monotonic()) > 0
        assert_applied_once(admin_db, pipeline.settings, pipeline.app, stream.tenant, stream,
                            "palimpsest_read_broker_kill")
    finally:
        stream.stop()
        pipeline.close()
        keeper.stop()


def test_a_dropped_database_connection_loses_nothing(pipeline, reads, pg_settings, admin_db) -> None:
    """The projector's connections are terminated by the server (``pg_terminate_backend``) twice
    while events stream: it reconnects and retries; nothing is lost or doubled."""
    stream = Stream(pipeline.app, new_tenant())
    pipeline.start_projector()
    pipeline.wait_following(admin_db)  # a database gone during the start's catch-up stops it (exit 3)
    stream.start()
    try:
        wait_projected(reads.projected, stream.tenant, 20, timeout=60)
        for _ in range(2):  # the second time, once the projector has connected again
            deadline = time.monotonic() + 15
            while terminate(admin_db, pg_settings.projector_role) == 0:
                assert time.monotonic() < deadline, pipeline.log.read_text()[-3000:]
                time.sleep(0.1)
            time.sleep(1.0)
        last = stream.stop()
        wait_projected(reads.projected, stream.tenant, last)
        assert pipeline.projector is not None and pipeline.projector.poll() is None
        assert_applied_once(admin_db, pipeline.settings, pipeline.app, stream.tenant, stream,
                            "palimpsest_read_dropped")
    finally:
        stream.stop()


def terminate(admin: Database, role: str) -> int:
    """Terminate every backend of ``role``; how many there were."""
    with admin.connect(autocommit=True) as conn:
        rows = conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                            (role,)).fetchall()
    return len(rows)


def test_a_consumer_that_gives_up_at_its_start_is_started_again(pg_settings, reads, tmp_path) -> None:
    """Faust stops for good when the broker fails while it starts: here something that answers a
    ping but is no Kafka. The projector starts its consumer again in the same process, with
    backoff, and follows the real broker once it runs at that address."""
    impostor = socket.create_server(("127.0.0.1", 0))
    port = impostor.getsockname()[1]
    answering = threading.Thread(target=answer_badly, args=(impostor,), daemon=True)
    answering.start()
    pipeline = Pipeline(pg_settings, f"127.0.0.1:{port}", tmp_path, topic_now=False)
    broker = EmbeddedBroker(tmp_path / "late-broker")
    try:
        pipeline.start_projector()
        deadline = time.monotonic() + 60
        while "stopped" not in pipeline.log.read_text():  # Faust gave up at its start
            assert time.monotonic() < deadline, pipeline.log.read_text()[-3000:]
            time.sleep(0.2)
        impostor.close()
        broker.start(port)
        ensure_topic(broker.bootstrap, pipeline.settings.kafka_topic, pipeline.settings.kafka_partitions)
        tenant = new_tenant()
        result = pipeline.app.remember(tenant, state("address", "Tainan"))
        wait_fresh(reads, tenant, result.position, pipeline)
        assert pipeline.projector is not None and pipeline.projector.poll() is None
        assert "starting the Kafka consumer again" in pipeline.log.read_text()
    finally:
        impostor.close()
        pipeline.close()
        broker.stop()


def answer_badly(server: socket.socket) -> None:
    """Answer every connection with four bytes and close it (a ping passes; Kafka clients fail)."""
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        with conn:
            conn.sendall(b"\x00\x00\x00\x00")
