"""The parts that keep a process's servers up and stop it in time, one at a time: the broker keeper
(a hung broker, a stable address), the shutdown's deadline, and the heartbeats' liveness."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infra.broker import ping
from infra.broker_folder import kafka_bootstrap, read_running
from infra.heartbeats import Beat, Heartbeats, read_liveness
from infra.postgres import Database, projector_database, runtime_database
from infra.settings import Settings
from infra.supervision import BrokerKeeper

pytestmark = pytest.mark.integration


def test_a_hung_broker_is_killed_and_started_again_on_its_port(pg_settings: Settings,
                                                               tmp_path: Path) -> None:
    settings = pg_settings.model_copy(update={"data_dir": tmp_path})
    bootstrap, broker = kafka_bootstrap(settings)
    assert broker is not None
    keeper = BrokerKeeper(tmp_path / "kafka", broker, ping_every=0.3, unanswered=2).start()
    try:
        hung = broker.pid
        assert hung is not None
        os.kill(hung, signal.SIGSTOP)  # it still accepts connections: only a request tells
        deadline = time.monotonic() + 15
        while keeper.restarts == 0:
            assert time.monotonic() < deadline, "the hung broker was not replaced"
            time.sleep(0.1)
        assert broker.bootstrap == bootstrap and broker.pid != hung and ping(bootstrap)
        running = read_running(tmp_path / "kafka")
        assert running is not None and running.pid == broker.pid and running.owner == os.getpid()
    finally:
        keeper.stop()
    # The address is the data folder's: whoever starts its broker next gets the same one.
    again, started = kafka_bootstrap(settings)
    assert started is not None and again == bootstrap
    started.stop()


_STUCK = """
import sys, threading, time
from infra.supervision import Shutdown
shutdown = Shutdown(deadline=0.5, name="stuck").install()
shutdown.on_force(lambda: print("forced", flush=True))
print("ready", flush=True)
shutdown.stop.wait()
time.sleep(60)  # a stop that hangs, as on a hung broker
"""


def test_a_stop_that_hangs_is_forced_within_its_deadline() -> None:
    process = subprocess.Popen([sys.executable, "-c", _STUCK], stdout=subprocess.PIPE, text=True,
                               cwd=Path(__file__).resolve().parents[2])
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    assert process.wait(10) == 1
    assert time.monotonic() - started < 2.5
    assert process.stdout.read().strip() == "forced"


def test_heartbeats_say_alive_dead_and_unknown(admin_db: Database, pg_settings: Settings) -> None:
    schema = pg_settings.event_schema
    working = {"now": True}
    relay = Heartbeats(runtime_database(admin_db, pg_settings).connect, schema, interval=0.2)
    relay.process = f"test-relay-{time.monotonic_ns()}"
    relay.add("test-relay", lambda: Beat(working["now"], time.time(), "publishing"))
    projector = Heartbeats(projector_database(admin_db, pg_settings).connect, schema, interval=0.2)
    projector.process = f"test-projector-{time.monotonic_ns()}"
    projector.add("test-projector", lambda: Beat(True, None, "following"))
    roles = ("test-relay", "test-projector", "test-never")

    def states() -> dict[str, str]:
        with projector_database(admin_db, pg_settings).connect() as conn:
            return {r: part.state for r, part in read_liveness(conn, schema, roles).items()}

    assert relay.beat() and projector.beat()
    assert states() == {"test-relay": "alive", "test-projector": "alive", "test-never": "unknown"}
    working["now"] = False  # its part stops working: it no longer beats, and goes stale
    relay.beat()
    time.sleep(0.7)
    projector.beat()
    assert states() == {"test-relay": "dead", "test-projector": "alive", "test-never": "unknown"}
    projector.stop()  # a clean stop says so at once
    with projector_database(admin_db, pg_settings).connect() as conn:
        stopped = read_liveness(conn, schema, roles)["test-projector"]
    assert stopped.state == "dead" and stopped.stopped and stopped.detail == "following"
    relay.stop()
