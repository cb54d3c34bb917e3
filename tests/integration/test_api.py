"""The REST edge end to end on the embedded PostgreSQL: a command stored once per Idempotency-Key,
read-your-writes (the overlay before the projector runs, ``min_position`` and ``stale_by``), the
cross-tenant matrix, the probes and metrics, MCP mounted beside, and ``palimpsest keys``."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from typer.testing import CliRunner

from infra.postgres import Database
from infra.settings import Settings
from services.bootstrap import Services
from services.entrypoints.api import create_api
from tests.integration.api_support import (
    address,
    bearer,
    client,
    make_world,
    new_tenant,
    ok,
    project,
    services,
)

__all__ = ["client", "services"]  # the fixtures

QUESTION = {"query": "where does the user live?"}


def _head(services: Services) -> int:
    return services.app.recorder.max_notification_id() or 0


# --- idempotency ----------------------------------------------------------------------------


def test_an_idempotency_key_stores_the_command_once(client: TestClient, services: Services) -> None:
    headers = bearer(services, new_tenant(), "memory:write")
    first = ok(client.post("/v1/memories", json=address("Taipei"),
                           headers={**headers, "Idempotency-Key": "msg-1"}))
    head = _head(services)
    again = ok(client.post("/v1/memories", json=address("Taipei"),
                           headers={**headers, "Idempotency-Key": "msg-1"}))
    assert (again["card_id"], again["replayed"]) == (first["card_id"], True)
    assert first["replayed"] is False and isinstance(first["position"], int)
    assert _head(services) == head
    by_body = ok(client.post("/v1/memories", json=address("Taipei", request_id="msg-1"),
                             headers=headers))
    assert by_body["card_id"] == first["card_id"] and by_body["replayed"]


def test_an_idempotency_key_reused_for_another_command_is_409(client: TestClient,
                                                             services: Services) -> None:
    headers = {**bearer(services, new_tenant(), "memory:write"), "Idempotency-Key": "msg-2"}
    ok(client.post("/v1/memories", json=address("Taipei"), headers=headers))
    reused = client.post("/v1/memories", json=address("Kyoto"), headers=headers)
    assert reused.status_code == 409
    assert reused.json()["error"]["code"] == "idempotency_key_reused"


def test_a_header_and_a_body_request_id_that_differ_are_refused(client: TestClient,
                                                                services: Services) -> None:
    headers = {**bearer(services, new_tenant(), "memory:write"), "Idempotency-Key": "a"}
    head = _head(services)
    response = client.post("/v1/memories", json=address("Taipei", request_id="b"), headers=headers)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_command"
    assert _head(services) == head


# --- read your writes -----------------------------------------------------------------------


def _top(client: TestClient, headers: dict[str, str]) -> dict[str, Any]:
    return ok(client.post("/v1/search", json=QUESTION, headers=headers))


def test_remember_then_search_at_once_shows_the_new_value(client: TestClient, services: Services,
                                                          admin_db: Database) -> None:
    tenant = new_tenant()
    headers = bearer(services, tenant, "memory:read", "memory:write")
    ok(client.post("/v1/memories", json=address("Taipei"), headers=headers))
    project(services, admin_db)
    moved = ok(client.post("/v1/memories", json=address("Kyoto"), headers=headers))
    assert moved["outcome"] == "superseded"

    unprojected = _top(client, headers)  # no projector has run since the write
    values = [card["value"] for card in unprojected["results"]]
    assert values[0] == "Kyoto" and "Taipei" not in values
    assert unprojected["diagnostics"]["overlaid_writes"] == 1
    assert unprojected["diagnostics"]["projected_position"] < moved["position"]

    project(services, admin_db)
    projected = _top(client, headers)
    assert [card["value"] for card in projected["results"]][0] == "Kyoto"
    assert projected["results"][0]["source"] != "pending"
    assert projected["diagnostics"]["overlaid_writes"] == 0
    assert services.pending.of(tenant) == []  # the read models hold it: forgotten


def test_revise_then_search_at_once_shows_the_revision(client: TestClient, services: Services,
                                                       admin_db: Database) -> None:
    headers = bearer(services, new_tenant(), "memory:read", "memory:write")
    first = ok(client.post("/v1/memories", json=address("Taipei"), headers=headers))
    project(services, admin_db)
    revised = ok(client.post(f"/v1/cards/{first['card_id']}/revise", headers=headers,
                             json={"content": "Kaohsiung"}))
    assert revised["outcome"] == "superseded"
    unprojected = _top(client, headers)
    assert [c["value"] for c in unprojected["results"]][:1] == ["Kaohsiung"]
    assert "Taipei" not in [c["value"] for c in unprojected["results"]]
    assert unprojected["diagnostics"]["overlaid_writes"] == 1


def test_a_first_write_is_found_before_it_is_projected(client: TestClient, services: Services,
                                                       admin_db: Database) -> None:
    headers = bearer(services, new_tenant(), "memory:read", "memory:write")
    ok(client.post("/v1/memories", json={"kind": "knowledge", "memory_type": "note",
                                         "title": "Token rotation",
                                         "content": "Rotate refresh tokens every week"},
                   headers=headers))
    ok(client.post("/v1/memories", json=address("Taipei"), headers=headers))  # a slot never seen
    found = _top(client, headers)  # the question names the address slot
    assert [c["value"] for c in found["results"]][:1] == ["Taipei"]
    assert found["results"][0]["source"] == "pending"
    rotation = ok(client.post("/v1/search", json={"query": "how often do we rotate tokens?"},
                              headers=headers))
    assert "Rotate refresh tokens every week" in [c["value"] for c in rotation["results"]]
    unrelated = ok(client.post("/v1/search", json={"query": "lunch plans"}, headers=headers))
    assert unrelated["results"] == [], "a fresh write joins only a question it answers"


def test_the_overlay_is_the_writers_tenants_only(client: TestClient, services: Services,
                                                 admin_db: Database) -> None:
    writer, other = new_tenant(), new_tenant()
    headers = bearer(services, writer, "memory:read", "memory:write")
    others = bearer(services, other, "memory:read", "memory:write")
    for h in (headers, others):
        ok(client.post("/v1/memories", json=address("Taipei"), headers=h))
    project(services, admin_db)
    ok(client.post("/v1/memories", json=address("Kyoto"), headers=headers))
    assert _top(client, others)["results"][0]["value"] == "Taipei"
    assert _top(client, others)["diagnostics"]["overlaid_writes"] == 0


def test_a_read_with_min_position_says_how_far_behind_it_is(client: TestClient, services: Services,
                                                            admin_db: Database) -> None:
    headers = bearer(services, new_tenant(), "memory:read", "memory:write")
    written = ok(client.post("/v1/memories", json=address("Taipei"), headers=headers))
    started = time.monotonic()
    stale = ok(client.get(f"/v1/facts/user?min_position={written['position']}", headers=headers))
    waited = time.monotonic() - started
    assert stale["freshness"]["stale_by"] > 0 and stale["facts"] == []
    assert 0.4 <= waited < 3.0  # bounded by PALIMPSEST_API_MAX_WAIT_SECONDS (0.5 here)
    assert ok(client.get("/v1/facts/user", headers=headers))["freshness"] is None


def test_a_read_with_min_position_waits_for_the_projection(client: TestClient, services: Services,
                                                           admin_db: Database) -> None:
    headers = bearer(services, new_tenant(), "memory:read", "memory:write")
    written = ok(client.post("/v1/memories", json=address("Taipei"), headers=headers))
    projecting = threading.Timer(0.1, project, (services, admin_db))
    projecting.start()
    try:
        fresh = ok(client.get(f"/v1/facts/user?min_position={written['position']}",
                              headers=headers))
    finally:
        projecting.join()
    assert fresh["freshness"]["stale_by"] == 0
    assert fresh["freshness"]["projected"] >= written["position"]
    assert [f["value"] for f in fresh["facts"]] == ["Taipei"]


# --- tenancy --------------------------------------------------------------------------------


def test_another_tenant_sees_nothing_of_a_tenants_cards(client: TestClient, services: Services,
                                                        admin_db: Database) -> None:
    world = make_world(client, services, admin_db)
    intruder = bearer(services, new_tenant(), "memory:admin")
    mine = world.headers
    ids = [world.state["card_id"], world.event["card_id"], world.knowledge["card_id"],
           world.commitment["card_id"]]
    questions = ["where does the user live?", "Taipei", "kickoff meeting", "JWT",
                 "quarterly report", "what did I do today?"]
    for question in questions:
        assert ok(client.post("/v1/search", json={"query": question},
                              headers=intruder))["results"] == []
        context = ok(client.post("/v1/context", json={"query": question}, headers=intruder))
        assert "Taipei" not in context["text"] and context["result"]["results"] == []
    assert ok(client.post("/v1/search", json=QUESTION, headers=mine))["results"][0]["value"] == "Taipei"

    assert ok(client.get("/v1/facts/user", headers=intruder))["facts"] == []
    assert len(ok(client.get("/v1/facts/user", headers=mine))["facts"]) == 2
    for card_id in ids:
        assert client.get(f"/v1/cards/{card_id}", headers=intruder).status_code == 404
        assert client.get(f"/v1/cards/{card_id}/history", headers=intruder).status_code == 404
        assert ok(client.get(f"/v1/cards/{card_id}", headers=mine))["card_id"] == card_id
    assert client.get("/v1/history?ref=user/address", headers=intruder).status_code == 404
    assert ok(client.get("/v1/history?ref=user/address", headers=mine))["cards"]
    lookup = ok(client.post("/v1/cards/lookup", json={"card_ids": ids}, headers=intruder))
    assert lookup["cards"] == [] and lookup["missing"] == ids

    briefing = ok(client.get("/v1/briefing", headers=intruder))
    assert all(briefing[part] == [] for part in ("open", "waiting", "overdue", "blockers",
                                                 "arbitrations", "aging_facts", "stale_knowledge"))
    assert ok(client.get("/v1/briefing", headers=mine))["open"]
    assert ok(client.get("/v1/arbitrations", headers=intruder))["cases"] == []
    assert ok(client.get("/v1/cards", headers=intruder))["cards"] == []
    assert ok(client.get("/v1/cards/count", headers=intruder))["total"] == 0
    assert ok(client.get("/v1/cards/count", headers=mine))["total"] >= 4
    status = ok(client.get("/v1/status", headers=intruder))
    assert status["projected_position"] == 0 and status["tenant_id"] != world.tenant


# --- probes, metrics, OpenAPI, MCP ----------------------------------------------------------


def test_health_and_ready(client: TestClient) -> None:
    assert ok(client.get("/health")) == {"status": "up"}
    ready = ok(client.get("/ready"))
    assert ready["ready"] is True
    assert set(ready["checks"]) == {"database", "row_level_security", "append_only", "locale",
                                    "broker", "extraction"}
    assert "extraction is off" in ready["checks"]["extraction"]["detail"]
    assert all(check["ok"] for check in ready["checks"].values())


def test_metrics_show_latency_per_endpoint_routes_breakers_and_the_projection(
        client: TestClient, services: Services, admin_db: Database) -> None:
    headers = bearer(services, new_tenant(), "memory:read", "memory:write")
    ok(client.post("/v1/memories", json=address("Taipei"), headers=headers))
    project(services, admin_db)
    ok(client.post("/v1/search", json=QUESTION, headers=headers))
    assert client.get("/metrics").status_code == 401  # not public: other tenants' activity
    assert client.get("/metrics", headers=headers).status_code == 403  # admin, or the token
    scraped = client.get("/metrics", headers=bearer(services, new_tenant(), "memory:admin"))
    assert scraped.status_code == 200, scraped.text
    text = scraped.text
    assert 'palimpsest_http_request_seconds_count{endpoint="/v1/search",method="POST",status="200"}' in text
    assert 'endpoint="/v1/memories"' in text
    assert 'palimpsest_retrieval_route_seconds_count{route="tags"}' in text
    assert 'palimpsest_retrieval_route_quarantined{route="fuzzy"} 0.0' in text
    assert 'palimpsest_projection_lag{projection="cards"}' in text
    assert 'palimpsest_projection_parked{projection="cards"}' in text
    head = services.app.recorder.max_notification_id()
    assert f"palimpsest_log_head {float(head)}" in text


def test_the_openapi_document_lists_every_route(client: TestClient) -> None:
    document = ok(client.get("/openapi.json"))
    paths = set(document["paths"])
    assert {"/v1/memories", "/v1/cards/{card_id}/revise", "/v1/cards/{card_id}/correct",
            "/v1/cards/{card_id}/verify", "/v1/cards/{card_id}/links", "/v1/cards/{card_id}/moves",
            "/v1/cards/{card_id}", "/v1/cards/lookup", "/v1/cards/{card_id}/history",
            "/v1/history", "/v1/search", "/v1/facts/{subject}", "/v1/briefing",
            "/v1/arbitrations", "/v1/arbitrations/{case_id}/decision", "/v1/context",
            "/v1/status", "/v1/cards", "/v1/cards/count", "/health", "/ready",
            "/metrics"} <= paths
    assert "HTTPBearer" in document["components"]["securitySchemes"]
    assert client.get("/docs").status_code == 200


def test_an_mcp_app_is_mounted_at_mcp(services: Services) -> None:
    async def hello(request: Any) -> PlainTextResponse:
        return PlainTextResponse("mcp here")

    mounted = Starlette(routes=[Route("/", hello)])
    with TestClient(create_api(services, mcp_app=mounted)) as client:
        assert client.get("/mcp/").text == "mcp here"
        assert client.post("/mcp", follow_redirects=False).status_code == 405  # not redirected
        assert client.get("/mcp", follow_redirects=False).text == "mcp here"
        assert client.get("/health").status_code == 200


def test_a_search_as_of_both_timelines_over_rest(client: TestClient, services: Services,
                                                 admin_db: Database) -> None:
    headers = bearer(services, new_tenant(), "memory:read", "memory:write")
    now = datetime.now(UTC)
    ok(client.post("/v1/memories", headers=headers,
                   json=address("Taipei", valid_from=(now - timedelta(days=20)).isoformat())))
    ok(client.post("/v1/memories", headers=headers,
                   json=address("Kyoto", valid_from=(now - timedelta(days=5)).isoformat())))
    project(services, admin_db)
    then = (now - timedelta(days=10)).isoformat()
    as_of = ok(client.post("/v1/search", headers=headers,
                           json={**QUESTION, "as_of": {"valid_at": then}}))
    assert as_of["results"][0]["value"] == "Taipei" and as_of["valid_at"] is not None
    assert _top(client, headers)["results"][0]["value"] == "Kyoto"
    known_before = (now - timedelta(days=1)).isoformat()
    nothing_known = ok(client.post("/v1/search", headers=headers, json={
        **QUESTION, "as_of": {"valid_at": now.isoformat(), "known_at": known_before}}))
    assert nothing_known["results"] == []  # both were written just now


def test_a_memory_type_filter_keeps_only_those_types(client: TestClient, services: Services,
                                                     admin_db: Database) -> None:
    world = make_world(client, services, admin_db)
    found = ok(client.post("/v1/search", headers=world.headers, json={
        "query": "Taipei kickoff meeting", "memory_types": ["event"]}))
    assert [card["card_id"] for card in found["results"]] == [world.event["card_id"]]
    unknown = client.post("/v1/search", headers=world.headers, json={
        "query": "Taipei", "memory_types": ["gossip"]})
    assert unknown.status_code == 422 and unknown.json()["error"]["code"] == "invalid_kind"


# --- palimpsest keys ------------------------------------------------------------------------


def _keys(settings: Settings, *args: str) -> tuple[int, dict[str, Any]]:
    from services.entrypoints.cli import cli

    env = {"PALIMPSEST_DATA_DIR": str(settings.data_dir), "PALIMPSEST_AUTO_BOOTSTRAP": "false"}
    result = CliRunner().invoke(cli, ["keys", *args, "--json"], env=env)
    return result.exit_code, json.loads(result.stdout)


def test_keys_create_list_revoke_from_the_command_line(pg_settings: Settings, client: TestClient,
                                                       admin_db: Database) -> None:
    tenant = new_tenant()
    code, made = _keys(pg_settings, "create", "--tenant", tenant, "--scope", "memory:read",
                       "--name", "ci")
    assert code == 0 and made["secret"].startswith("pk_") and made["scopes"] == ["memory:read"]
    headers = {"Authorization": f"Bearer {made['secret']}"}
    assert ok(client.get("/v1/status", headers=headers))["tenant_id"] == tenant
    code, listed = _keys(pg_settings, "list", "--tenant", tenant)
    assert code == 0 and [k["key_id"] for k in listed["keys"]] == [made["key_id"]]
    assert "secret" not in listed["keys"][0]
    code, revoked = _keys(pg_settings, "revoke", made["key_id"])
    assert code == 0 and revoked["revoked_at"] is not None
    assert client.get("/v1/status", headers=headers).status_code == 401


@pytest.mark.parametrize(("args", "code"), [
    (("create", "--tenant", "no spaces"), "invalid_tenant"),
    (("create", "--tenant", "acme", "--scope", "memory:root"), "invalid_command"),
    (("revoke", "key_unknown"), "not_found"),
])
def test_keys_errors_are_one_json_object_and_exit_2(pg_settings: Settings, admin_db: Database,
                                                    args: tuple[str, ...], code: str) -> None:
    exit_code, answer = _keys(pg_settings, *args)
    assert exit_code == 2 and answer["error"]["code"] == code


def test_ready_is_503_when_the_configured_broker_does_not_answer(services: Services) -> None:
    from dataclasses import replace

    unreachable = services.settings.model_copy(update={"kafka_bootstrap": "127.0.0.1:9"})
    with TestClient(create_api(replace(services, settings=unreachable))) as client:
        response = client.get("/ready")
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["broker"]["ok"] is False and "unreachable" in checks["broker"]["detail"]
    assert "127.0.0.1" not in response.text  # no address: /ready answers anyone
    assert checks["database"]["ok"] is True


# --- the key stores -------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["postgres", "memory"])
def test_a_key_store_authenticates_lists_and_revokes(backend: str, services: Services,
                                                     pg_settings: Settings) -> None:
    from domain.errors import AuthenticationError, NotFoundError
    from services.bootstrap import create_key_store

    settings = pg_settings.model_copy(update={"persistence": backend, "key_pepper": SecretStr("pepper-1")})
    store = create_key_store(settings)
    try:
        tenant = new_tenant()
        info, secret = store.create(tenant, ["memory:write", "memory:read"], "agent")
        assert info.scopes == ("memory:read", "memory:write") and secret.startswith("pk_")
        who = store.authenticate(secret)
        assert (who.tenant_id, who.key_id, who.scopes) == (
            tenant, info.key_id, frozenset({"memory:read", "memory:write"}))
        assert [k.key_id for k in store.list(tenant)] == [info.key_id]
        if backend == "postgres":  # another pepper hashes differently: the key is unknown there
            with pytest.raises(AuthenticationError, match="unknown"):
                services.keys.authenticate(secret)
        revoked = store.revoke(info.key_id)
        assert revoked.revoked_at is not None and store.revoke(info.key_id) == revoked
        with pytest.raises(AuthenticationError, match="revoked"):
            store.authenticate(secret)
        with pytest.raises(NotFoundError):
            store.revoke("key_missing")
    finally:
        store.close()


def test_admin_holds_every_scope_and_the_others_only_their_own() -> None:
    from domain.errors import PermissionDeniedError
    from services.keys import Principal, require

    admin = Principal("t", frozenset({"memory:admin"}), "k1")
    reader = Principal("t", frozenset({"memory:read"}), "k2")
    for scope in ("memory:read", "memory:write", "memory:admin"):
        require(admin, scope)
    require(reader, "memory:read")
    with pytest.raises(PermissionDeniedError):
        require(reader, "memory:write")
