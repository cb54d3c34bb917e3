"""The commands as processes, each in a data folder of its own, under the faults RELIABILITY.md
lists: the broker killed with SIGKILL under ``palimpsest pipeline`` and under ``relay`` +
``project``, the relay killed, liveness in ``status``, ``status`` on a folder never initialised,
and the embedded PostgreSQL stopped by whoever started it (or, after a SIGKILL, by the next)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from infra.broker_folder import read_running
from infra.embedded_pg import embedded_postmasters, stop_embedded
from infra.postgres import admin_database, bootstrap, projector_database, runtime_database, start_embedded
from infra.settings import Settings
from projections.status import read_status
from services.factory import create_app
from services.query.readmodels import ReadModels
from tests.integration.faults import Stream, assert_applied_once, first_move, wait_projected
from tests.support import new_tenant

pytestmark = pytest.mark.integration

ROLES = ("broker", "relay", "projector")


class Folder:
    """A fresh data folder, and the commands run as processes against it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = root / "data"
        self.settings = Settings(data_dir=self.data, projector_embeddings=False, projector_batch=100)
        self.processes: list[subprocess.Popen[bytes]] = []

    def env(self) -> dict[str, str]:
        kept = {k: v for k, v in os.environ.items() if not k.startswith("PALIMPSEST_")}
        return {**kept, "PALIMPSEST_DATA_DIR": str(self.data), "PALIMPSEST_PROJECTOR_EMBEDDINGS": "false",
                "PALIMPSEST_PROJECTOR_BATCH": "100"}

    def spawn(self, *command: str) -> subprocess.Popen[bytes]:
        log = (self.root / f"{command[0]}.log").open("ab")
        process = subprocess.Popen([sys.executable, "-m", "services.entrypoints.cli", *command],
                                   env=self.env(), stdout=log, stderr=subprocess.STDOUT)
        self.processes.append(process)
        return process

    def run(self, *command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "services.entrypoints.cli", *command],
                              env=self.env(), capture_output=True, text=True, timeout=60)

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def broker(self) -> Any:
        return read_running(self.data / "kafka")

    def servers(self) -> list[Any]:
        """This folder's postmaster and tansu processes."""
        from infra.broker_folder import embedded_brokers

        return embedded_postmasters(self.data) + embedded_brokers(self.data)

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait(10)
        stop_embedded(self.data)


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[Folder]:
    made = Folder(tmp_path)
    yield made
    made.close()


def wait_until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < deadline, f"not {what} within {timeout} s"
        time.sleep(0.1)
    return found


def stop_in_time(process: subprocess.Popen[bytes], signum: int = signal.SIGINT) -> float:
    """Signal ``process`` and return how long it took to exit (at most 5 s, or the test fails)."""
    started = time.monotonic()
    process.send_signal(signum)
    process.wait(10)
    elapsed = time.monotonic() - started
    assert elapsed < 5.0, f"stopped in {elapsed:.1f} s"
    return elapsed


def liveness(folder: Folder) -> dict[str, str]:
    db = projector_database(admin_database(folder.settings), folder.settings)
    return {role: part.state for role, part in read_status(db, folder.settings).liveness.items()}


def following(folder: Folder) -> bool:
    db = projector_database(admin_database(folder.settings), folder.settings)
    parts = read_status(db, folder.settings).liveness
    return all(parts[r].state == "alive" for r in ROLES) and "Kafka" in (parts["projector"].detail or "")


class Writes:
    """The test process's own application and read models on the folder's database."""

    def __init__(self, folder: Folder) -> None:
        admin = admin_database(folder.settings)
        bootstrap(admin, folder.settings)
        self.admin = admin
        self.app = create_app(folder.settings.model_copy(update={"auto_bootstrap": False}))
        self.reads = ReadModels(runtime_database(admin, folder.settings), folder.settings.read_schema)

    def close(self) -> None:
        self.reads.close()
        self.app.close()


def kill_broker_mid_stream(folder: Folder, writes: Writes) -> Stream:
    """SIGKILL the folder's broker while one event a 20 ms streams; back on its port, a new pid,
    the old one reaped; writes before, during the outage and after; every one applied once."""
    stream = Stream(writes.app, new_tenant()).start()
    wait_projected(writes.reads.projected, stream.tenant, 20)
    killed_broker, killed = folder.broker(), time.monotonic()
    os.kill(killed_broker.pid, signal.SIGKILL)
    moved = first_move(writes.reads.projected, stream, killed)
    time.sleep(1.0)
    wait_projected(writes.reads.projected, stream.tenant, stream.stop())
    assert stream.between(0, killed) and stream.between(killed, moved) and stream.between(moved, 1e12)
    back = folder.broker()
    assert back.bootstrap == killed_broker.bootstrap and back.pid != killed_broker.pid
    assert not psutil.pid_exists(killed_broker.pid), "the killed broker is a zombie"
    assert_applied_once(writes.admin, folder.settings, writes.app, stream.tenant, stream,
                        f"palimpsest_read_{stream.tenant.replace('-', '_')}")
    return stream


def test_pipeline_restarts_a_killed_broker_on_its_port_and_stops_in_time(folder: Folder) -> None:
    writes = Writes(folder)
    pipeline = folder.spawn("pipeline")
    try:
        wait_until(lambda: following(folder), 60, "alive and following Kafka")
        kill_broker_mid_stream(folder, writes)
        assert liveness(folder) == dict.fromkeys(ROLES, "alive")
        assert len(folder.log("pipeline").splitlines()) < 80, folder.log("pipeline")
        stop_in_time(pipeline)
        assert liveness(folder) == dict.fromkeys(ROLES, "dead")
        assert "Traceback" not in folder.log("pipeline"), folder.log("pipeline")
        assert not [p for p in folder.servers() if p.name().startswith("tansu")]
    finally:
        writes.close()


def test_relay_and_projector_apart_resume_after_the_broker_and_the_relay_die(folder: Folder) -> None:
    writes = Writes(folder)
    relay = folder.spawn("relay")
    wait_until(folder.broker, 60, "a broker")  # the relay's: it started first
    project = folder.spawn("project")
    try:
        wait_until(lambda: following(folder), 60, "alive and following Kafka")
        kill_broker_mid_stream(folder, writes)
        owner = folder.broker()
        os.kill(relay.pid, signal.SIGKILL)  # the broker's owner: the projector takes it over
        relay.wait(10)
        taken = wait_until(lambda: (b := folder.broker()) and b.owner == project.pid and b, 20,
                           "taken over by the projector")
        assert taken.bootstrap == owner.bootstrap
        relay = folder.spawn("relay")
        stream = Stream(writes.app, new_tenant()).start()
        time.sleep(2.0)
        wait_projected(writes.reads.projected, stream.tenant, stream.stop())
        for process in (relay, project):
            stop_in_time(process, signal.SIGTERM)
        assert not [p for p in folder.servers() if p.name().startswith("tansu")]
    finally:
        writes.close()


def test_status_on_a_data_folder_never_initialised_says_how_to_fix_it(folder: Folder) -> None:
    for flags in ((), ("--json",), ("--prometheus",)):
        result = folder.run("status", *flags)
        out = result.stdout + result.stderr
        assert result.returncode == 2 and "palimpsest init-db" in out and "Traceback" not in out, out
    assert json.loads(folder.run("status", "--json").stdout)["error"]
    assert not (folder.data / "pg").exists(), "status made a database"
    relay = folder.run("relay")  # a process command refuses it too, and makes nothing
    assert relay.returncode == 2 and "palimpsest init-db" in relay.stderr, relay.stderr
    assert not folder.data.exists(), "relay made a data folder"
    start_embedded(folder.data)  # a server without the event store: no roles, no tables
    result = folder.run("status")
    assert result.returncode == 2 and "init-db" in result.stderr and "Traceback" not in result.stderr


def test_embedded_servers_stop_with_their_process_and_are_found_after_kill_9(folder: Folder) -> None:
    made = folder.run("init-db")  # the relay opens a data folder; it makes none
    assert made.returncode == 0, made.stderr
    wait_until(lambda: not folder.servers(), 10, "init-db's server stopped")
    relay = folder.spawn("relay")
    wait_until(folder.broker, 60, "a broker")
    stop_in_time(relay, signal.SIGTERM)
    wait_until(lambda: not folder.servers(), 10, "every server stopped")

    relay = folder.spawn("relay")
    wait_until(folder.broker, 60, "a broker")
    (postmaster,) = embedded_postmasters(folder.data)
    os.kill(relay.pid, signal.SIGKILL)
    relay.wait(10)
    time.sleep(1.0)
    assert embedded_postmasters(folder.data) == [postmaster], "nothing stops it yet"

    relay = folder.spawn("relay")  # finds the server and the broker the killed one left
    wait_until(lambda: (b := folder.broker()) and b.owner == relay.pid, 60, "a broker of its own")
    assert embedded_postmasters(folder.data) == [postmaster], "the server is reused"
    stop_in_time(relay, signal.SIGTERM)
    wait_until(lambda: not folder.servers(), 10, "every server stopped")
