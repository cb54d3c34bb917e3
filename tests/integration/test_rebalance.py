"""Projector processes in one consumer group over a four-partition topic, on an event store of their
own in the embedded PostgreSQL and a broker of their own: while writes go on, one projector is
killed (SIGKILL, mid-stream) and another joins; the group's partitions move between them twice.
Afterwards every tenant's read models hold the last event, and they equal a rebuild of the same
log: no event lost, none applied twice."""

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
from psycopg import sql

from infra.broker import EmbeddedBroker, ensure_topic
from infra.postgres import Database, bootstrap
from infra.relay import Relay
from infra.settings import Settings
from projections.replay import rebuild
from services.factory import create_app
from tests.integration.test_projections import COMPARED, dump
from tests.support import state

pytestmark = pytest.mark.integration

TENANTS = [f"rebalance-{i}" for i in range(12)]


@pytest.fixture(scope="module")
def settings(admin_db: Database, pg_settings: Settings,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    name = f"rebalance_{uuid4().hex[:8]}"
    broker = EmbeddedBroker(tmp_path_factory.mktemp("rebalance-kafka"))
    made = pg_settings.model_copy(update={
        "event_schema": name, "read_schema": f"{name}_read", "kafka_partitions": 4,
        "kafka_topic": f"{name}.events", "kafka_bootstrap": broker.start(),
        "projector_embeddings": False, "projector_batch": 50})
    bootstrap(admin_db, made)
    ensure_topic(broker.bootstrap, made.kafka_topic, made.kafka_partitions)
    yield made
    broker.stop()
    with admin_db.connect(autocommit=True) as conn:
        for schema in (made.event_schema, made.read_schema, f"{name}_check"):
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def projector(settings: Settings, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALIMPSEST_")}
    env.update({"PALIMPSEST_DATA_DIR": str(settings.data_dir), "PALIMPSEST_AUTO_BOOTSTRAP": "false",
                "PALIMPSEST_EVENT_SCHEMA": settings.event_schema,
                "PALIMPSEST_READ_SCHEMA": settings.read_schema,
                "PALIMPSEST_KAFKA_BOOTSTRAP": settings.kafka_bootstrap or "",
                "PALIMPSEST_KAFKA_TOPIC": settings.kafka_topic,
                "PALIMPSEST_KAFKA_PARTITIONS": str(settings.kafka_partitions),
                "PALIMPSEST_PROJECTOR_EMBEDDINGS": "false", "PALIMPSEST_PROJECTOR_BATCH": "50"})
    return subprocess.Popen([sys.executable, "-m", "services.entrypoints.cli", "project"], env=env,
                            stdout=log.open("wb"), stderr=subprocess.STDOUT)


def positions(admin_db: Database, schema: str) -> dict[str, int]:
    with admin_db.connect() as conn:
        rows = conn.execute(sql.SQL("SELECT tenant_id, position FROM {}.projection_position "
                                    "WHERE tenant_id <> '*'").format(sql.Identifier(schema)))
        return {tenant: int(position) for tenant, position in rows}


def applied_by(admin_db: Database, settings: Settings, pid: int) -> bool:
    """Whether the projector process ``pid`` says (its heartbeat) it applied events from Kafka."""
    with admin_db.connect() as conn:
        row = conn.execute(sql.SQL("SELECT progress_at FROM {}.heartbeats WHERE role = 'projector' "
                                   "AND pid = %s").format(sql.Identifier(settings.event_schema)),
                           (pid,)).fetchone()
    return row is not None and row[0] is not None


class Writer(threading.Thread):
    """Writes round the tenants until stopped; each tenant's last position."""

    def __init__(self, app: Any) -> None:
        super().__init__(daemon=True)
        self.app = app
        self.stop = threading.Event()
        self.last: dict[str, int] = {}
        self.count = 0

    def run(self) -> None:
        while not self.stop.is_set():
            tenant = TENANTS[self.count % len(TENANTS)]
            label = ("address", "skills", "employer")[self.count % 3]
            written = self.app.remember(tenant, state(label, f"value {self.count}"))
            self.last[tenant] = int(written.position or 0)
            self.count += 1
            time.sleep(0.005)


def test_a_projector_killed_and_another_added_lose_and_double_nothing(
        settings: Settings, admin_db: Database, tmp_path: Path) -> None:
    app = create_app(settings)
    relay = Relay.from_settings(app.recorder, settings, settings.kafka_bootstrap or "")
    stop_relay = threading.Event()
    relaying = threading.Thread(target=relay.run, args=(stop_relay,), daemon=True)
    writer = Writer(app)
    running = [projector(settings, tmp_path / "first.log"), projector(settings, tmp_path / "second.log")]
    try:
        relaying.start()
        writer.start()
        deadline = time.monotonic() + 120
        while len(positions(admin_db, settings.read_schema)) < len(TENANTS) // 2:
            assert time.monotonic() < deadline, (tmp_path / "first.log").read_text()[-3000:]
            time.sleep(0.2)
        running[0].send_signal(signal.SIGKILL)  # mid-stream: its partitions go to the other
        running[0].wait(10)
        time.sleep(3)
        running.append(projector(settings, tmp_path / "third.log"))  # the group grows again
        time.sleep(8)
        writer.stop.set()
        writer.join(10)
        assert writer.count > 200, "writes went on meanwhile"
        deadline = time.monotonic() + 180
        while True:
            seen = positions(admin_db, settings.read_schema)
            if all(seen.get(t, 0) >= p for t, p in writer.last.items()):
                break
            assert time.monotonic() < deadline, f"not projected: {writer.last} vs {seen}"
            time.sleep(0.2)
        time.sleep(3)  # a heartbeat more: each projector says when it last applied events
        assert applied_by(admin_db, settings, running[2].pid), "the projector that joined got events"
    finally:
        writer.stop.set()
        stop_relay.set()
        for process in running:
            if process.poll() is None:
                process.terminate()
                process.wait(30)
        relaying.join(5)
        relay.close()
    check = settings.read_schema.replace("_read", "_check")
    rebuild(settings, app, into=check, workers=1)
    app.close()
    for table in COMPARED:
        assert dump(admin_db, check, table) == dump(admin_db, settings.read_schema, table), \
            f"{table}: the group's read models differ from a rebuild of the log"
