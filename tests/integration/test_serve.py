"""``palimpsest serve`` as a user runs it, in a data folder of its own: it prints where it answers
and a key; a write answered over REST reaches the read models through the relay, Kafka and the
Faust projector, also after the projector was killed (serve starts it again); SIGTERM stops it
within seconds and leaves no server; the next start keeps the key's secret to itself, and every
write the first one accepted — also those answered while it was being stopped — is there."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import psutil
import psycopg
import pytest
from palimpsest_client import APIError, Client

from infra.broker_folder import embedded_brokers
from infra.embedded_pg import embedded_postmasters, stop_embedded
from infra.postgres import Database
from infra.settings import Settings
from tests.support import new_tenant

pytestmark = pytest.mark.integration

#: SIGTERM to exit, at most (the stop's own deadline is 5 s).
STOP_SECONDS = 6.0


class Served:
    """``palimpsest serve`` on a free port in ``root/data``, its stdout and stderr in files."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = root / "data"
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        #: More of the environment (``PALIMPSEST_*`` of the test's own are not passed on).
        self.extra: dict[str, str] = {}

    def env(self) -> dict[str, str]:
        kept = {k: v for k, v in os.environ.items() if not k.startswith("PALIMPSEST_")}
        return {**kept, "PALIMPSEST_DATA_DIR": str(self.data), "PALIMPSEST_PROJECTOR_BATCH": "100",
                "PALIMPSEST_PROJECTOR_EMBEDDINGS": "false",  # the model loads in the query side only
                **self.extra}

    def start(self, *flags: str) -> dict[str, str]:
        """Start it; what its banner says (url, mcp, key or key_note), once it says it."""
        self.starts += 1
        out = (self.root / f"serve-{self.starts}.out").open("wb")
        err = (self.root / f"serve-{self.starts}.err").open("wb")
        self.process = subprocess.Popen([sys.executable, "-m", "services.entrypoints.cli", "serve",
                                         "--port", "0", *flags], env=self.env(), stdout=out, stderr=err)
        deadline = time.monotonic() + 90
        while "Ctrl-C stops it." not in (text := self.out()):
            assert self.process.poll() is None, f"serve exited: {self.err()}"
            assert time.monotonic() < deadline, f"no banner: {text}\n{self.err()}"
            time.sleep(0.1)
        return banner(text)

    def out(self) -> str:
        return (self.root / f"serve-{self.starts}.out").read_text(errors="replace")

    def err(self) -> str:
        return (self.root / f"serve-{self.starts}.err").read_text(errors="replace")[-4000:]

    def stop(self, signum: int = signal.SIGTERM) -> tuple[int, float]:
        """Signal it; its exit code and how long it took."""
        assert self.process is not None
        started = time.monotonic()
        self.process.send_signal(signum)
        code = self.process.wait(30)
        return code, time.monotonic() - started

    def servers(self) -> list[Any]:
        return embedded_postmasters(self.data) + embedded_brokers(self.data)

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        if (self.data / "pg").exists():
            stop_embedded(self.data)


def banner(text: str) -> dict[str, str]:
    found = {"url": _find(r"REST\s+(http://\S+)/v1", text), "mcp": _find(r"MCP\s+(\S+)", text)}
    key = re.search(r"key\s+(pk_\S+)", text)
    if key:
        found["key"] = key.group(1)
    else:
        found["key_note"] = _find(r"key\s+(.+)", text)
    return found


def _find(pattern: str, text: str) -> str:
    match = re.search(pattern, text)
    assert match, f"{pattern!r} not in {text}"
    return match.group(1)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    made = Served(tmp_path)
    yield made
    made.close()


def wait_ready(client: Client, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return client.ready()
        except APIError as error:  # 503 until the broker and the database answer
            assert time.monotonic() < deadline, f"not ready: {error.body}"
            time.sleep(0.2)


def projected(client: Client, position: int, timeout: float = 60.0) -> None:
    """Wait until the read models include ``position`` (each read waits a bounded while)."""
    deadline = time.monotonic() + timeout
    while client.facts("user", min_position=position)["freshness"]["stale_by"]:
        assert time.monotonic() < deadline, f"position {position} not projected in {timeout} s"


def address(value: str) -> dict[str, Any]:
    return {"kind": "state", "memory_type": "fact", "subject": "user", "label": "address",
            "content": value}


def values(found: dict[str, Any]) -> list[str]:
    return [card["value"] for card in found["results"]]


class Writer(threading.Thread):
    """Writes one skill after another until the server stops answering; keeps what it accepted."""

    def __init__(self, client: Client) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.accepted: list[tuple[str, int]] = []

    def run(self) -> None:
        while True:
            skill = f"skill {len(self.accepted)}"
            try:
                result = self.client.remember(kind="state", memory_type="fact", subject="user",
                                              label="skills", content=skill)
            except Exception:  # refused, reset or unreachable: the server is going
                return
            self.accepted.append((skill, result["position"]))


def test_serve_answers_projects_and_stops_without_losing_a_write(served: Served) -> None:
    first = served.start()
    assert first["mcp"] == first["url"] + "/mcp/"
    with Client(first["url"], first["key"], timeout=10) as client:
        assert wait_ready(client)["ready"] is True
        written = client.remember(**address("Kyoto"))
        assert written["outcome"] == "remembered"
        projected(client, written["position"])  # through the relay, Kafka and the Faust projector
        found = client.search("where does the user live?", min_position=written["position"])
        assert found["freshness"]["stale_by"] == 0 and values(found)[0] == "Kyoto"
        facts = client.facts("user")  # the read models alone
        assert [f["value"] for f in facts["facts"] if f["label"] == "address"] == ["Kyoto"]
        assert client.status()["tenant_id"] == "local"
        assert served.process is not None
        (projector,) = [c for c in psutil.Process(served.process.pid).children()
                        if "project" in c.cmdline()]
        projector.kill()  # started again by serve, which goes on answering meanwhile
        moved = client.remember(**address("Kaohsiung"))
        projected(client, moved["position"])
        writer = Writer(client)
        writer.start()
        while len(writer.accepted) < 5:
            time.sleep(0.05)
        code, took = served.stop()
        writer.join(10)
    assert code == 0, served.err()
    assert took < STOP_SECONDS, f"stopped in {took:.1f} s"
    assert "Traceback" not in served.err(), served.err()
    deadline = time.monotonic() + 10
    while served.servers():
        assert time.monotonic() < deadline, f"left running: {served.servers()}"
        time.sleep(0.2)

    second = served.start()
    assert "key" not in second and "has a key" in second["key_note"], served.out()
    with Client(second["url"], first["key"], timeout=10) as client:  # the first key still works
        wait_ready(client)
        projected(client, writer.accepted[-1][1])  # caught up by the new relay and projector
        facts = client.facts("user")
        skills = {f["value"] for f in facts["facts"] if f["label"] == "skills"}
        assert skills == {skill for skill, _ in writer.accepted}, "an accepted write was lost"
    # the new broker started empty: the relay published again only what the projector had not
    # applied by the stop (it had applied the move at least), not the whole log
    with psycopg.connect(host=str(served.data / "pg"), dbname="postgres", user="postgres") as conn:
        head = conn.execute("SELECT max(notification_id) FROM palimpsest.palimpsest_events").fetchone()
        again = conn.execute("SELECT published FROM palimpsest.relay_position "
                             "WHERE relay_name = 'main'").fetchone()
    assert head is not None and again is not None
    assert again[0] <= head[0] - moved["position"], (again, head, moved)
    code, took = served.stop(signal.SIGINT)
    assert code == 0 and took < STOP_SECONDS, (code, took, served.err())


def test_serve_on_external_servers_starts_only_its_own_parts(
    served: Served, admin_db: Database, pg_settings: Settings, broker: Any,
) -> None:
    from psycopg.conninfo import make_conninfo

    from infra.keyring import load_master_key
    from services.bootstrap import create_key_store

    load_master_key(pg_settings)  # the session's master key, made if no test made it yet

    served.extra = {
        "PALIMPSEST_DATABASE_URL": make_conninfo(host=admin_db.host, port=admin_db.port,
                                                 dbname=admin_db.dbname, user=admin_db.user,
                                                 password=admin_db.password or ""),
        "PALIMPSEST_KAFKA_BOOTSTRAP": broker.bootstrap,
        "PALIMPSEST_KAFKA_TOPIC": f"serve-{uuid4().hex[:8]}",
        # the keys in the external store are wrapped by the session's master key, not a new one
        "PALIMPSEST_MASTER_KEY": (pg_settings.data_dir / "master.key").read_text().strip()}
    started = served.start("--no-mcp")
    assert "key" not in started and "palimpsest keys create" in started["key_note"]
    assert f"Kafka: {broker.bootstrap}" in served.out()
    keys = create_key_store(pg_settings)
    try:
        tenant = new_tenant()
        _, secret = keys.create(tenant, ("memory:read", "memory:write"))
    finally:
        keys.close()
    with Client(started["url"], secret, timeout=10) as client:
        wait_ready(client)
        written = client.remember(**address("Kyoto"))
        projected(client, written["position"], timeout=120)
        assert client.status()["tenant_id"] == tenant
    code, took = served.stop()
    assert code == 0 and took < STOP_SECONDS, (code, took, served.err())
    assert not served.servers() and not (served.data / "pg").exists(), "it started a server"
    with admin_db.connect() as conn:  # the external server is left running
        assert conn.execute("SELECT 1").fetchone() == (1,)
