"""The Python client (``palimpsest_client``), sync and async, against a real HTTP server: uvicorn on
a loopback port (``serve``'s :class:`HttpServer`) serving the REST edge on the session's embedded
PostgreSQL; the read models are brought up to the log by the catch-up, and each read waits on the
write's position."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from palimpsest_client import (
    APIError,
    AsyncClient,
    AuthenticationError,
    Client,
    InvalidRequestError,
    NotFoundError,
    PermissionDeniedError,
)

from infra.postgres import Database
from infra.settings import Settings
from projections.worker import project_log
from tests.support import new_tenant

pytestmark = pytest.mark.integration

CLIENT_PROJECT = Path(__file__).resolve().parents[2] / "clients" / "python"


class Server:
    """The REST edge on the session's database, served by uvicorn in a thread of this process."""

    def __init__(self, settings: Settings) -> None:
        from services.bootstrap import build_services
        from services.entrypoints.api import create_api
        from services.entrypoints.http import HttpServer

        self.settings = settings
        self.services = build_services(settings)
        self.http = HttpServer(lambda: create_api(self.services), "127.0.0.1", 0)
        self.http.start()
        self.url = self.http.url

    def key(self, tenant: str, *scopes: str) -> str:
        return self.services.keys.create(tenant, scopes or ("memory:read", "memory:write"))[1]

    def project(self) -> None:
        project_log(self.settings, self.services.app)

    def close(self) -> None:
        self.http.stop()
        self.services.close()


@pytest.fixture(scope="module")
def server(pg_settings: Settings, admin_db: Database, broker: Any) -> Iterator[Server]:
    made = Server(pg_settings.model_copy(update={"kafka_bootstrap": broker.bootstrap,
                                                 "projector_embeddings": False}))
    yield made
    made.close()


def address(value: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "state", "memory_type": "fact", "subject": "user", "label": "address",
            "content": value, **extra}


def test_the_sync_client_writes_reads_and_asks_as_of(server: Server) -> None:
    tenant = new_tenant()
    with Client(server.url, server.key(tenant, "memory:admin")) as memory:
        taipei = memory.remember(**address("Taipei"))
        assert taipei["outcome"] == "remembered" and taipei["position"] > 0
        assert memory.remember(**address("Taipei", request_id="r-1"))["outcome"] == "verified"
        assert memory.remember(**address("Taipei", request_id="r-1"))["replayed"] is True
        between = datetime.now(UTC)
        kyoto = memory.remember(**address("Kyoto"))
        assert kyoto["outcome"] == "superseded"
        revised = memory.revise(kyoto["card_id"], "Kyoto, Sakyo-ku", edge="updates")
        assert memory.verify(revised["card_id"])["outcome"] == "verified"
        event = memory.remember(kind="event", memory_type="event", content="Kickof meeting",
                                occurred_at=datetime.now(UTC) - timedelta(hours=1))
        fixed = memory.correct(event["card_id"], "Kickoff meeting", "typo")
        due = datetime.now(UTC) + timedelta(days=3)
        doc = memory.remember(kind="state", memory_type="commitment", content="Send the doc",
                              owner="user", due_at=due)
        moved = memory.move(doc["card_id"], "wait", note="sent for review")
        server.project()

        now = memory.search("where does the user live?", min_position=moved["position"])
        assert now["freshness"]["stale_by"] == 0
        assert now["results"][0]["value"] == "Kyoto, Sakyo-ku"
        then = memory.search("where does the user live?", valid_at=between, known_at=between)
        assert then["results"][0]["value"] == "Taipei"
        facts = memory.facts("user", valid_at=between)
        assert [f["value"] for f in facts["facts"] if f["label"] == "address"] == ["Taipei"]
        card = memory.card(fixed["card_id"])
        assert card["value"] == "Kickoff meeting" and card["kind"] == "event"
        history = memory.history("user/address")
        assert {v["value"] for c in history["cards"] for v in c["versions"]} >= {"Taipei", "Kyoto"}
        lookup = memory.cards_by_id([taipei["card_id"], "00000000-0000-0000-0000-000000000000"])
        assert [c["value"] for c in lookup["cards"]] == ["Taipei"] and len(lookup["missing"]) == 1
        assert [i["value"] for i in memory.briefing()["waiting"]] == ["Send the doc"]
        context = memory.context("where does the user live?")
        assert "Kyoto, Sakyo-ku" in context["text"]
        assert memory.context_text("where does the user live?") == context["text"]
        assert memory.status()["tenant_id"] == tenant
        assert memory.health() == {"status": "up"}
        assert memory.ready()["ready"] is True
        assert "palimpsest" in memory.metrics()


def test_the_sync_client_decides_an_arbitration(server: Server) -> None:
    with Client(server.url, server.key(new_tenant(), "memory:admin")) as memory:
        old = (datetime.now(UTC) - timedelta(days=45)).isoformat()
        memory.remember(**address("Kyoto"))
        queued = memory.remember(**address("Osaka", valid_from=old))
        assert queued["outcome"] == "queued" and queued["case_id"]
        server.project()
        cases = memory.arbitrations(min_position=queued["position"])["cases"]
        assert [c["proposed_value"] for c in cases] == ["Osaka"]
        decided = memory.decide(queued["case_id"], "keep_old", decided_by="henry")
        server.project()
        assert memory.arbitrations(min_position=decided["position"])["cases"] == []
        (case,) = memory.arbitrations(decided=True)["cases"]
        assert (case["case_id"], case["decision"], case["decided_by"]) == (
            queued["case_id"], "keep_old", "henry")
        assert case["decided_at"] is not None
        assert memory.arbitrations(decided=True, slot_id=case["slot_id"])["cases"] == [case]
        other_slot = "00000000-0000-0000-0000-000000000000"
        assert memory.arbitrations(decided=True, slot_id=other_slot)["cases"] == []


def test_refusals_are_typed_errors(server: Server) -> None:
    tenant = new_tenant()
    with Client(server.url, server.key(tenant)) as memory:
        with pytest.raises(NotFoundError) as missing:
            memory.card("00000000-0000-0000-0000-000000000000")
        assert missing.value.status == 404 and missing.value.code
        with pytest.raises(InvalidRequestError):
            memory.remember(kind="state", memory_type="fact", subject="user", label="a/b",
                            content="x")
        with pytest.raises(InvalidRequestError):
            memory.remember(kind="nonsense", memory_type="fact", content="x")
    with Client(server.url, "pk_not-a-key") as stranger, pytest.raises(AuthenticationError):
        stranger.search("anything")
    with Client(server.url, server.key(tenant, "memory:read")) as reader:
        with pytest.raises(PermissionDeniedError) as refused:
            reader.remember(**address("Kyoto"))
        assert isinstance(refused.value, APIError) and refused.value.status == 403


def test_the_async_client_does_the_same(server: Server) -> None:
    tenant = new_tenant()
    key = server.key(tenant)

    async def scenario() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        async with AsyncClient(server.url, key) as memory:
            writes = await asyncio.gather(*(memory.remember(kind="state", memory_type="fact",
                                                            subject="user", label="skills",
                                                            content=skill)
                                            for skill in ("Python", "PostgreSQL", "Kafka")))
            await asyncio.to_thread(server.project)
            last = max(w["position"] for w in writes)
            facts = await memory.facts("user", min_position=last)
            found = await memory.search("what are the user's skills?")
            with pytest.raises(NotFoundError):
                await memory.history("00000000-0000-0000-0000-000000000000")
            return facts, found, await memory.status()

    facts, found, status = asyncio.run(scenario())
    assert facts["freshness"]["stale_by"] == 0
    assert {f["value"] for f in facts["facts"]} == {"Python", "PostgreSQL", "Kafka"}
    assert {"Python", "PostgreSQL", "Kafka"} <= {c["value"] for c in found["results"]}
    assert status["tenant_id"] == tenant


def test_importing_the_client_loads_no_server_stack() -> None:
    probe = ("import sys, palimpsest_client; heavy = [m for m in ('psycopg', 'eventsourcing', "
             "'numpy', 'faust', 'jieba', 'domain', 'infra', 'projections') if m in sys.modules]; "
             "print(heavy)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                          check=True)
    assert done.stdout.strip() == "[]"


def test_the_client_distribution_installs_alone_in_a_fresh_venv(tmp_path: Path) -> None:
    """``pip install ./clients/python`` in a venv of its own: one top-level package, httpx as the
    one requirement, and an import that finds no server module anywhere."""
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels),
                    str(CLIENT_PROJECT)], check=True, timeout=300, capture_output=True)
    (wheel,) = wheels.glob("palimpsest_client-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = next(archive.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {
        "palimpsest_client"}
    required = [line.split(":", 1)[1].strip() for line in metadata.splitlines()
                if line.startswith("Requires-Dist:")]
    assert [r for r in required if "extra ==" not in r] == ["httpx>=0.27"]

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", str(wheel)],
                   check=True, timeout=600, capture_output=True)
    probe = ("import importlib.util, sys, palimpsest_client; "
             "print(sorted(m for m in ('services', 'domain', 'infra', 'projections', 'psycopg', "
             "'eventsourcing', 'numpy') if importlib.util.find_spec(m)), palimpsest_client.Client)")
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=60,
                          check=True, cwd=tmp_path)
    assert done.stdout.startswith("[] <class 'palimpsest_client.client.Client'>")
