"""Parked events over REST in an HTTP process (decision 0018): every connection as the tenant-bound
HTTP role, no projector role. The tenant's parked events are listed; a retry asked after the fix
answers 202 and ``serve``'s own request thread (``projections.worker.start_requests``) carries it
out, so the parked aggregate projects; a skip likewise; ``/v1/status`` tells the tenant's own
figures — its newest event, never the log's head — and whether the projector is alive."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from infra.heartbeats import Beat, Heartbeats
from infra.postgres import Database, projector_database
from infra.settings import Settings
from infra.tenancy import acting_for
from projections.replay import catch_up
from projections.worker import start_requests
from services.bootstrap import Services, build_services, create_key_store
from services.entrypoints.api import create_api
from tests.integration.api_support import ok
from tests.poison import handler_bug, write_world

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def edge(pg_settings: Settings, admin_db: Database) -> Iterator[Services]:
    """What an HTTP process builds: the HTTP role, no ``monitor``."""
    with acting_for(None):
        made = build_services(pg_settings, http=True)
    assert made.monitor is None
    yield made
    made.close()


def bearer(settings: Settings, tenant: str, *scopes: str) -> dict[str, str]:
    keys = create_key_store(settings.model_copy(update={"auto_bootstrap": False}))
    try:
        _, secret = keys.create(tenant, scopes or ("memory:admin",), "failures")
    finally:
        keys.close()
    return {"Authorization": f"Bearer {secret}"}


def followed(client: TestClient, headers: dict[str, str], request_id: str,
             timeout: float = 30.0) -> dict[str, Any]:
    """The request once carried out (``GET /v1/failures/requests/{id}``)."""
    deadline = time.monotonic() + timeout
    while True:
        found = ok(client.get(f"/v1/failures/requests/{request_id}", headers=headers))
        if found["status"] != "requested" or time.monotonic() > deadline:
            return dict(found)
        time.sleep(0.1)


def test_a_retry_requested_over_rest_projects_the_parked_aggregate(  # type: ignore[no-untyped-def]
        app, projector, admin_db, pg_settings, edge, monkeypatch) -> None:
    handler_bug(monkeypatch)
    world = write_world(app)
    catch_up(projector, app)
    a, b = bearer(pg_settings, world.a), bearer(pg_settings, world.b)
    reader = bearer(pg_settings, world.a, "memory:read")
    stop = threading.Event()
    beats = Heartbeats(projector_database(admin_db, pg_settings).connect, pg_settings.event_schema)
    beats.add("projector", lambda: Beat(True, None, "following Kafka: 7 event(s) applied")).beat()
    with TestClient(create_api(edge)) as client:
        try:
            listed = ok(client.get("/v1/failures", headers=reader))["events"]
            assert [e["reason"] for e in listed] == ["projection", "undecodable", "waiting"]
            assert ok(client.get("/v1/failures", headers=b))["events"] == []
            acme, lost = listed[0]["notification_id"], listed[1]["notification_id"]

            status = ok(client.get("/v1/status", headers=reader))
            assert status["parked"] == 3
            pipeline = status["pipeline"]
            assert pipeline["head"] == world.last[world.a] < world.last[world.b], "a's own head"
            assert pipeline["liveness"]["projector"] == "alive"
            assert "7 event" not in str(status), "no heartbeat's detail"

            assert client.post(f"/v1/failures/{acme}/retry", headers=reader).status_code == 403
            assert client.post(f"/v1/failures/{acme}/retry", headers=b).status_code == 404

            monkeypatch.undo()  # the fix, then the request: carried out by serve's own thread
            asked = ok(client.post(f"/v1/failures/{acme}/retry", headers=a), 202)
            assert (asked["status"], asked["action"]) == ("requested", "retry")
            assert ok(client.get("/v1/status", headers=a))["pipeline"]["requests_pending"] == 1
            start_requests(pg_settings, app, projector_database(admin_db, pg_settings), stop,
                           interval=0.1)
            done = followed(client, a, asked["request_id"])
            assert (done["status"], done["outcome"]) == ("done", "retried: 2 event(s) applied")
            facts = ok(client.get("/v1/facts/user", headers=a))["facts"]
            assert "Globex" in str(facts), facts

            asked = ok(client.post(f"/v1/failures/{lost}/skip", headers=a,
                                   json={"reason": "written by a release nobody runs"}), 202)
            assert followed(client, a, asked["request_id"])["status"] == "done"
            assert ok(client.get("/v1/failures", headers=a))["events"] == []
            resolved = ok(client.get("/v1/failures?resolved=true", headers=a))["events"]
            assert {e["notification_id"]: e["status"] for e in resolved}[lost] == "skipped"
            assert ok(client.get("/v1/status", headers=a))["parked"] == 0
        finally:
            stop.set()
            beats.stop()
