"""Retention through every edge, on the embedded PostgreSQL: ``PUT /v1/retention`` (a key with
``memory:erase``; who set it is the key; bad days refused with nothing stored) and
``GET /v1/retention``; the worker ``serve`` runs, on the server's own services, erasing a turn said
before the cut-off so that search stops finding it; ``palimpsest retention`` over a server and
locally; the Python client, sync and async."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from palimpsest_client import AsyncClient, Client, PermissionDeniedError
from typer.testing import CliRunner

from domain.retention import Retention
from infra.postgres import Database
from infra.settings import Settings
from services.bootstrap import Services
from services.command.retention import RetentionWorker
from services.entrypoints.cli import cli
from tests.integration.api_support import client, new_tenant, ok, project, services
from tests.integration.rest_server import ServedApi

__all__ = ["client", "services"]  # the fixtures

pytestmark = pytest.mark.integration

OLD, NEW = "I lived in Valparaiso back then", "These days I live in Lima"


class Caller:
    """A key of one tenant, as REST headers, with its id (the policy names it)."""

    def __init__(self, services: Services, tenant: str, *scopes: str) -> None:
        info, self.secret = services.keys.create(tenant, scopes, "retention test")
        self.tenant, self.key_id = tenant, info.key_id
        self.headers = {"Authorization": f"Bearer {self.secret}"}


@pytest.fixture
def dpo(services: Services) -> Caller:
    """Whoever may set a policy: ``memory:erase``, and ``memory:read`` to see it."""
    return Caller(services, new_tenant(), "memory:read", "memory:erase")


def _head(services: Services) -> int:
    return services.app.recorder.max_notification_id() or 0


def _policy(client: TestClient, caller: Caller) -> Any:
    return ok(client.get("/v1/retention", headers=caller.headers))


def _said(client: TestClient, caller: Caller, *turns: tuple[str, str, float]) -> list[Any]:
    """Turns ingested over REST: (turn id, text, days ago)."""
    now = datetime.now(UTC)
    body = {"turns": [{"session_id": "s-1", "turn_id": turn_id, "role": "user", "text": text,
                       "said_at": (now - timedelta(days=days)).isoformat()}
                      for turn_id, text, days in turns]}
    return list(ok(client.post("/v1/ingest", json=body, headers=caller.headers), 202)["turns"])


def _found(client: TestClient, caller: Caller, query: str) -> list[str]:
    found = ok(client.post("/v1/search", json={"query": query}, headers=caller.headers))
    return [card["value"] for card in found["results"]]


# --- REST -------------------------------------------------------------------------------------


def test_a_policy_is_set_then_read_and_who_set_it_is_the_key(
        client: TestClient, services: Services, dpo: Caller) -> None:
    assert _policy(client, dpo) == {"turn_days": None, "extracted": False}  # none: keep all
    answer = ok(client.put("/v1/retention", json={"turn_days": 30}, headers=dpo.headers))
    assert set(answer) == {"turn_days", "extracted", "position", "replayed"}
    assert (answer["turn_days"], answer["extracted"], answer["replayed"]) == (30, False, False)
    assert answer["position"] == _head(services)
    assert _policy(client, dpo) == {"turn_days": 30, "extracted": False}
    stored = services.app.load(dpo.tenant, Retention.create_id(dpo.tenant), Retention, "retention")
    assert stored.set_by == f"key {dpo.key_id}"

    ok(client.put("/v1/retention", json={"turn_days": 7, "extracted": True}, headers=dpo.headers))
    assert _policy(client, dpo) == {"turn_days": 7, "extracted": True}
    ok(client.put("/v1/retention", json={"turn_days": None}, headers=dpo.headers))
    assert _policy(client, dpo) == {"turn_days": None, "extracted": False}
    assert _policy(client, Caller(services, new_tenant(), "memory:read"))["turn_days"] is None


def test_setting_needs_memory_erase_and_reading_memory_read(
        client: TestClient, services: Services, dpo: Caller) -> None:
    head = _head(services)
    for scopes in (("memory:admin",), ("memory:read", "memory:write")):
        refused = client.put("/v1/retention", json={"turn_days": 30},
                             headers=Caller(services, dpo.tenant, *scopes).headers)
        assert refused.status_code == 403, refused.text
        error = refused.json()["error"]
        assert error["code"] == "permission_denied" and "memory:erase" in error["message"]
    eraser_only = Caller(services, dpo.tenant, "memory:erase")
    assert client.get("/v1/retention", headers=eraser_only.headers).status_code == 403
    assert client.get("/v1/retention").status_code == 401
    assert _head(services) == head
    assert _policy(client, dpo)["turn_days"] is None


@pytest.mark.parametrize("body", [
    {"turn_days": 0}, {"turn_days": -3}, {"turn_days": 36_501}, {"turn_days": "thirty"},
    {"turn_days": 1.5}, {}, {"turn_days": 30, "set_by": "someone"},
    {"turn_days": 30, "extracted": "maybe"}], ids=str)
def test_bad_days_are_422_with_nothing_stored(client: TestClient, services: Services,
                                              dpo: Caller, body: dict[str, Any]) -> None:
    head = _head(services)
    refused = client.put("/v1/retention", json=body, headers=dpo.headers)
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["code"] == "invalid_request"
    assert _head(services) == head
    assert _policy(client, dpo)["turn_days"] is None


def test_an_idempotency_key_sets_once(client: TestClient, services: Services, dpo: Caller) -> None:
    headers = {**dpo.headers, "Idempotency-Key": "policy-1"}
    first = ok(client.put("/v1/retention", json={"turn_days": 90}, headers=headers))
    head = _head(services)
    again = ok(client.put("/v1/retention", json={"turn_days": 90}, headers=headers))
    assert (again["replayed"], again["position"], again["turn_days"]) == (True, None, 90)
    assert first["replayed"] is False and _head(services) == head
    other = client.put("/v1/retention", json={"turn_days": 10}, headers=headers)
    assert other.status_code == 409 and other.json()["error"]["code"] == "idempotency_key_reused"


def test_the_worker_on_the_servers_services_erases_a_turn_said_before_the_cut_off(
        client: TestClient, services: Services, admin_db: Database, dpo: Caller) -> None:
    writer = Caller(services, dpo.tenant, "memory:read", "memory:write")
    old, new = _said(client, writer, ("1", OLD, 40), ("2", NEW, 2))
    project(services, admin_db)
    assert OLD in _found(client, writer, "Valparaiso")
    ok(client.put("/v1/retention", json={"turn_days": 30}, headers=dpo.headers))
    worker = RetentionWorker(services.app, services.queries.read,
                             services.settings.retention_interval_seconds,
                             services.settings.retention_batch)

    assert worker.apply(dpo.tenant) == 1
    project(services, admin_db)  # what the running projector does
    assert OLD not in _found(client, writer, "Valparaiso")
    assert NEW in _found(client, writer, "Lima")
    erasures = ok(client.get("/v1/erasures", headers=writer.headers))["erasures"]
    assert [(e["unit"], e["target"], e["basis"], e["requested_by"]) for e in erasures] == [
        ("card", old["event_card_id"], "retention", "retention")]
    assert worker.apply(dpo.tenant) == 0, "an erased turn is not found again"
    stored = services.app.load(dpo.tenant, Retention.create_id(dpo.tenant), Retention, "retention")
    assert stored.runs == 1  # the run that erased nothing recorded nothing
    assert new["event_card_id"] != old["event_card_id"]


# --- the command line -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(services: Services) -> Iterator[ServedApi]:
    with ServedApi(services) as running:
        yield running


def _run(env: dict[str, str], *args: str, code: int = 0) -> Any:
    result = CliRunner().invoke(cli, list(args), env=env)
    assert result.exit_code == code, (args, result.stdout, result.stderr)
    return result


def test_retention_over_a_server(services: Services, served: ServedApi, dpo: Caller) -> None:
    env = {"PALIMPSEST_URL": served.url, "PALIMPSEST_KEY": dpo.secret}
    assert _run(env, "retention", "show").stdout == "every raw conversation turn is kept\n"
    answer = json.loads(_run(env, "retention", "set", "--days", "30", "--extracted",
                             "--json").stdout)
    assert (answer["turn_days"], answer["extracted"], answer["replayed"]) == (30, True, False)
    assert json.loads(_run(env, "retention", "show", "--json").stdout) == {
        "turn_days": 30, "extracted": True}
    said = _run(env, "retention", "set", "--keep").stdout
    assert said.startswith("retention set: every raw conversation turn is kept; position ")
    both = json.loads(_run(env, "retention", "set", "--days", "3", "--keep", "--json",
                           code=2).stdout)
    assert both["error"]["code"] == "usage_error"
    writer = Caller(services, dpo.tenant, "memory:read", "memory:write")
    refused = json.loads(_run({**env, "PALIMPSEST_KEY": writer.secret}, "retention", "set",
                              "--days", "3", "--json", code=2).stdout)
    assert refused["error"]["code"] == "permission_denied"
    too_long = json.loads(_run(env, "retention", "set", "--days", "99999", "--json",
                               code=2).stdout)
    assert too_long["error"]["status"] == 422


def test_retention_locally_set_shown_and_applied(
        client: TestClient, services: Services, admin_db: Database, dpo: Caller,
        pg_settings: Settings) -> None:
    writer = Caller(services, dpo.tenant, "memory:read", "memory:write")
    old, _ = _said(client, writer, ("1", OLD, 40), ("2", NEW, 2))
    project(services, admin_db)
    env = {"PALIMPSEST_DATA_DIR": str(pg_settings.data_dir), "PALIMPSEST_AUTO_BOOTSTRAP": "false",
           "PALIMPSEST_PERSISTENCE": "postgres", "PALIMPSEST_URL": "http://127.0.0.1:9",
           "XDG_RUNTIME_DIR": os.environ.get("XDG_RUNTIME_DIR", "/tmp")}
    nothing = json.loads(_run(env, "retention", "apply", "--tenant", dpo.tenant, "--json").stdout)
    assert nothing == {"tenant": dpo.tenant, "turn_days": None, "extracted": False,
                       "turns_erased": 0}
    set_ = json.loads(_run(env, "retention", "set", "--days", "30", "--tenant", dpo.tenant,
                           "--by", "dpo", "--json").stdout)
    assert (set_["turn_days"], set_["extracted"]) == (30, False) and set_["position"]
    shown = _run(env, "retention", "show", "--tenant", dpo.tenant).stdout
    assert shown == ("raw conversation turns are kept 30 days; the cards extraction made of them "
                     "are kept\n")
    applied = _run(env, "retention", "apply", "--tenant", dpo.tenant).stdout
    assert applied == f"erased 1 turn(s) of tenant {dpo.tenant} said more than 30 days ago\n"
    stored = services.app.load(dpo.tenant, Retention.create_id(dpo.tenant), Retention, "retention")
    assert stored.set_by == "dpo"
    project(services, admin_db)
    assert OLD not in _found(client, writer, "Valparaiso")
    too_long = json.loads(_run(env, "retention", "set", "--days", "99999", "--tenant", dpo.tenant,
                               "--json", code=2).stdout)
    assert too_long["error"]["code"] == "invalid_command"


# --- the Python client ------------------------------------------------------------------------


def test_the_client_sets_and_reads_the_policy(services: Services, served: ServedApi,
                                              dpo: Caller) -> None:
    with Client(served.url, dpo.secret) as memory:
        assert memory.retention() == {"turn_days": None, "extracted": False}
        first = memory.set_retention(30, extracted=True, request_id="p-1")
        assert (first["turn_days"], first["extracted"], first["replayed"]) == (30, True, False)
        assert memory.retention() == {"turn_days": 30, "extracted": True}

    async def asynchronously() -> tuple[Any, Any, Any]:
        async with AsyncClient(served.url, dpo.secret) as memory:
            again = await memory.set_retention(30, extracted=True, request_id="p-1")
            kept = await memory.set_retention(None)
            return again, kept, await memory.retention()

    again, kept, policy = asyncio.run(asynchronously())
    assert (again["replayed"], again["position"]) == (True, None)
    assert kept["turn_days"] is None and kept["position"] > first["position"]
    assert policy == {"turn_days": None, "extracted": False}
    writer = Caller(services, dpo.tenant, "memory:read", "memory:write")
    with Client(served.url, writer.secret) as memory, pytest.raises(PermissionDeniedError):
        memory.set_retention(30)
