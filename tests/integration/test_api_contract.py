"""Every REST endpoint: the happy path, a missing key, an unknown key, a revoked key, a wrong scope,
a tenant named in the body that is not the key's, another tenant's id, and oversized input —
against the embedded PostgreSQL, through the HTTP app."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import uuid4

import pytest
from fastapi.testclient import TestClient

from infra.postgres import Database
from services.bootstrap import Services
from services.entrypoints.operations import OPERATIONS
from tests.integration.api_support import (
    LIMITS,
    World,
    address,
    bearer,
    client,
    make_world,
    new_tenant,
    ok,
    services,
)

__all__ = ["client", "services"]  # the fixtures

Json = dict[str, Any]


def _values(found: Json) -> set[str]:
    return {fact["value"] for fact in found["facts"]}


@dataclass(frozen=True)
class Endpoint:
    name: str
    method: str
    path: Callable[[World], str]
    scope: str
    check: Callable[[World, Any], None]
    body: Callable[[World], Json] | None = None
    #: The path names a card or case of the world: another tenant is told 404.
    names_id: bool = False
    #: Body fields whose text the size limit holds.
    text: tuple[str, ...] = field(default=())
    #: The operation called, when the name is a variant of it.
    operation: str = ""


def _expect(outcome: str) -> Callable[[World, Any], None]:
    def check(world: World, response: Any) -> None:
        answer = ok(response)
        assert answer["outcome"] == outcome
        assert answer["position"] > world.queued["position"]
    return check


def _revised(world: World, answer: Json) -> None:
    assert answer["card_id"] != world.state["card_id"]
    assert answer["aggregate_id"] == world.state["aggregate_id"]
    assert answer["position"] > world.queued["position"]


def _search_check(world: World, response: Any) -> None:
    assert ok(response)["results"][0]["value"] == "Taipei"


def _context_check(world: World, response: Any) -> None:
    answer = ok(response)
    assert "Taipei" in answer["text"] and "<memory" in answer["text"]
    assert answer["result"]["results"][0]["value"] == "Taipei"


def _context_text_check(world: World, response: Any) -> None:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    assert "<current_time>" in response.text and "Taipei" in response.text


def _briefing_check(world: World, response: Any) -> None:
    answer = ok(response)
    assert [item["card_id"] for item in answer["open"]] == [world.commitment["card_id"]]
    assert [case["case_id"] for case in answer["arbitrations"]] == [world.queued["case_id"]]


def _counts_check(world: World, response: Any) -> None:
    counts = {each["key"]: each["count"] for each in ok(response)["counts"]}
    assert counts["event"] == 2 and counts["knowledge"] == 2  # the ingested turn; the twin


def _turn(turn_id: str) -> Json:
    return {"session_id": "s9", "turn_id": turn_id, "role": "user", "text": f"turn {turn_id}",
            "said_at": datetime.now(UTC).isoformat(), "timezone": "Asia/Taipei"}


def _ingested(world: World, response: Any) -> None:
    assert response.status_code == 202, response.text
    answer = response.json()
    assert [t["replayed"] for t in answer["turns"]] == [False, False]
    assert answer["extraction"]["on"] is False and "PALIMPSEST_LLM_BASE_URL" in answer["extraction"]["note"]

def _erased(*cards: str, unit: str = "card") -> Callable[[World, Any], None]:
    def check(world: World, response: Any) -> None:
        answer = ok(response, 202)
        assert answer["unit"] == unit and answer["position"] > world.queued["position"]
        expected = {world.state["card_id"], *(getattr(world, c)["card_id"] for c in cards)}
        assert expected <= set(answer["card_ids"]), answer
    return check


def _not_found(code: str) -> Callable[[World, Any], None]:
    def check(world: World, response: Any) -> None:
        assert response.status_code == 404, response.text
        assert response.json()["error"]["code"] == code
    return check


def _exported(world: World, response: Any) -> None:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/x-ndjson")
    ids = {json.loads(line)["card_id"] for line in response.text.splitlines()}
    assert {world.state["card_id"], world.event["card_id"], world.knowledge["card_id"]} <= ids


def _retention_set(world: World, response: Any) -> None:
    answer = ok(response)
    assert (answer["turn_days"], answer["extracted"]) == (30, True)
    assert answer["position"] > world.queued["position"] and answer["replayed"] is False


ENDPOINTS = [
    Endpoint("remember", "POST", lambda w: "/v1/memories", "memory:write", _expect("remembered"),
             body=lambda w: address("Lisbon", label="home_town"), text=("content",)),
    Endpoint("revise", "POST", lambda w: f"/v1/cards/{w.state['card_id']}/revise", "memory:write",
             lambda w, r: _revised(w, ok(r)),
             body=lambda w: {"content": "Taipei, Da'an", "edge": "updates"}, names_id=True,
             text=("content",)),
    Endpoint("correct", "POST", lambda w: f"/v1/cards/{w.event['card_id']}/correct",
             "memory:write", _expect("corrected"),
             body=lambda w: {"description": "Kickoff meeting in Kaohsiung", "reason": "wrong city"},
             names_id=True, text=("description",)),
    Endpoint("verify", "POST", lambda w: f"/v1/cards/{w.state['card_id']}/verify", "memory:write",
             _expect("verified"), body=lambda w: {}, names_id=True),
    Endpoint("link", "POST", lambda w: f"/v1/cards/{w.knowledge['card_id']}/links", "memory:write",
             _expect("linked"),
             body=lambda w: {"edge": "evidenced_by", "target_id": w.event["card_id"]}, names_id=True),
    Endpoint("move", "POST", lambda w: f"/v1/cards/{w.commitment['card_id']}/moves",
             "memory:write", _expect("waiting"), body=lambda w: {"to": "wait"}, names_id=True),
    Endpoint("arbitrate", "POST", lambda w: f"/v1/arbitrations/{w.queued['case_id']}/decision",
             "memory:admin", _expect("kept_old"),
             body=lambda w: {"decision": "keep_old", "decided_by": "henry"}, names_id=True),
    Endpoint("get_card", "GET", lambda w: f"/v1/cards/{w.state['card_id']}", "memory:read",
             lambda w, r: _same(ok(r), card_id=w.state["card_id"], value="Taipei"), names_id=True),
    Endpoint("get_memories", "POST", lambda w: "/v1/cards/lookup", "memory:read",
             lambda w, r: _same({"found": [c["card_id"] for c in ok(r)["cards"]],
                                 "missing": ok(r)["missing"]},
                                found=[w.state["card_id"]], missing=[MISSING]),
             body=lambda w: {"card_ids": [w.state["card_id"], MISSING]}),
    Endpoint("history", "GET", lambda w: f"/v1/cards/{w.state['card_id']}/history", "memory:read",
             lambda w, r: _same(ok(r)["cards"][0], card_id=w.state["card_id"]), names_id=True),
    Endpoint("history by slot", "GET", lambda w: "/v1/history?ref=user/address", "memory:read",
             lambda w, r: _has(ok(r), "Taipei"), operation="history"),
    Endpoint("search", "POST", lambda w: "/v1/search", "memory:read", _search_check,
             body=lambda w: {"query": "where does the user live?"}),
    Endpoint("context", "POST", lambda w: "/v1/context", "memory:read", _context_check,
             body=lambda w: {"query": "where does the user live?"}),
    Endpoint("context as text", "POST", lambda w: "/v1/context?format=text", "memory:read",
             _context_text_check, body=lambda w: {"query": "where does the user live?"},
             operation="context"),
    Endpoint("facts", "GET", lambda w: "/v1/facts/user", "memory:read",
             lambda w, r: _same({"values": _values(ok(r))},
                                values={"Taipei", "Send the quarterly report"})),
    Endpoint("facts as of", "GET", lambda w: "/v1/facts/user?valid_at="
             + (datetime.now(UTC) - timedelta(days=10)).isoformat().replace("+", "%2B"),
             "memory:read", lambda w, r: _same({"values": _values(ok(r))}, values=set()),
             operation="facts"),
    Endpoint("briefing", "GET", lambda w: "/v1/briefing", "memory:read", _briefing_check),
    Endpoint("arbitrations", "GET", lambda w: "/v1/arbitrations", "memory:read",
             lambda w, r: _same({"ids": [c["case_id"] for c in ok(r)["cases"]]},
                                ids=[w.queued["case_id"]])),
    Endpoint("status", "GET", lambda w: "/v1/status", "memory:read",
             lambda w, r: _same(ok(r), tenant_id=w.tenant, pending_writes=0)),
    Endpoint("list_cards", "GET", lambda w: "/v1/cards?kinds=knowledge", "memory:read",
             lambda w, r: _same({"ids": [c["card_id"] for c in ok(r)["cards"]]},
                                ids=[w.proposal["twin"], w.knowledge["card_id"]])),
    Endpoint("count_cards", "GET", lambda w: "/v1/cards/count?group_by=kind", "memory:read",
             _counts_check),
    Endpoint("ingest", "POST", lambda w: "/v1/ingest", "memory:write", _ingested,
             body=lambda w: {"turns": [_turn("2"), _turn("3")]}),
    Endpoint("ingestions", "GET", lambda w: "/v1/ingest?status=dead_letter", "memory:read",
             lambda w, r: _same({"ids": [i["ingestion_id"] for i in ok(r)["ingestions"]],
                                 "dead": ok(r)["counts"]["dead_letter"]},
                                ids=[w.dead_letter["ingestion_id"]], dead=1)),
    Endpoint("rerun_ingestion", "POST",
             lambda w: f"/v1/ingest/{w.dead_letter['ingestion_id']}/rerun", "memory:write",
             _expect("received"), body=lambda w: {}, names_id=True),
    Endpoint("proposals", "GET", lambda w: "/v1/proposals", "memory:read",
             lambda w, r: _same({"ids": [p["proposal_id"] for p in ok(r)["proposals"]]},
                                ids=[w.proposal["proposal_id"]])),
    Endpoint("review_proposals", "POST", lambda w: "/v1/proposals/review", "memory:admin",
             lambda w, r: _same(ok(r)["results"][0], proposal_id=w.proposal["proposal_id"],
                                review="rejected"),
             body=lambda w: {"reviews": [{"proposal_id": w.proposal["proposal_id"],
                                          "decision": "reject", "note": "two different cards"}]}),
    Endpoint("parked_events", "GET", lambda w: "/v1/failures", "memory:read",
             lambda w, r: _same(ok(r), events=[], requests=[])),
    # the world parks nothing: a retry, a skip or a request of it is not found (the requests
    # carried out: tests/integration/test_failures_rest.py)
    Endpoint("parked_request", "GET", lambda w: f"/v1/failures/requests/{MISSING}", "memory:read",
             _not_found("parked_request_not_found")),
    Endpoint("retry_parked", "POST", lambda w: "/v1/failures/999999999/retry", "memory:admin",
             _not_found("parked_event_not_found"), body=lambda w: {}),
    Endpoint("skip_parked", "POST", lambda w: "/v1/failures/999999999/skip", "memory:admin",
             _not_found("parked_event_not_found"), body=lambda w: {"reason": "obsolete"}),
    Endpoint("forget card", "DELETE", lambda w: f"/v1/cards/{w.state['card_id']}",
             "memory:write", _erased(), names_id=True, operation="forget"),
    Endpoint("forget", "POST", lambda w: "/v1/erasures", "memory:write",
             _erased("queued", unit="slot"),
             body=lambda w: {"unit": "slot", "subject": "user", "label": "address",
                             "basis": "gdpr-17", "reason": "asked"}),
    Endpoint("forget tenant", "POST", lambda w: "/v1/erasures", "memory:erase",
             _erased("event", "knowledge", "commitment", unit="tenant"),
             body=lambda w: {"unit": "tenant", "reason": "offboarding"}, operation="forget"),
    Endpoint("erasures", "GET", lambda w: "/v1/erasures", "memory:read",
             lambda w, r: _same(ok(r), erasures=[])),
    Endpoint("export", "GET", lambda w: "/v1/export", "memory:read", _exported),
    Endpoint("set_retention", "PUT", lambda w: "/v1/retention", "memory:erase", _retention_set,
             body=lambda w: {"turn_days": 30, "extracted": True}),
    Endpoint("retention", "GET", lambda w: "/v1/retention", "memory:read",
             lambda w, r: _same(ok(r), turn_days=None, extracted=False)),
]
MISSING = str(uuid4())
#: The methods whose requests carry a body.
WITH_BODY = ("POST", "PUT")
NAMES = [e.name for e in ENDPOINTS]



def _same(answer: Json, **expected: Any) -> None:
    for name, value in expected.items():
        assert answer[name] == value, (name, answer)


def _has(found: Json, value: str) -> None:
    values = [v["value"] for card in found["cards"] for v in card["versions"]]
    assert value in values, values


def _send(client: TestClient, endpoint: Endpoint, world: World, headers: dict[str, str] | None,
          body: Json | None = None, path: str | None = None) -> Any:
    payload = body if body is not None else (endpoint.body(world) if endpoint.body else None)
    return client.request(endpoint.method, path or endpoint.path(world), headers=headers or {},
                          json=payload)


@pytest.fixture(scope="module")
def world(client: TestClient, services: Services, admin_db: Database) -> World:
    return make_world(client, services, admin_db)


def test_the_table_covers_every_operation() -> None:
    assert {e.operation or e.name for e in ENDPOINTS} == set(OPERATIONS)


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=NAMES)
def test_happy_path(endpoint: Endpoint, client: TestClient, services: Services,
                    admin_db: Database) -> None:
    fresh = make_world(client, services, admin_db)
    headers = bearer(services, fresh.tenant, endpoint.scope)
    endpoint.check(fresh, _send(client, endpoint, fresh, headers))


def _refused(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code
    assert response.json()["error"]["retryable"] is False


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=NAMES)
def test_a_missing_or_unknown_key_is_401(endpoint: Endpoint, client: TestClient,
                                         world: World) -> None:
    missing = _send(client, endpoint, world, None)
    _refused(missing, 401, "unauthenticated")
    assert missing.headers["www-authenticate"] == "Bearer"
    _refused(_send(client, endpoint, world, {"Authorization": "Bearer pk_unknown"}), 401,
             "unauthenticated")
    _refused(_send(client, endpoint, world, {"Authorization": "Basic dXNlcjpwYXNz"}), 401,
             "unauthenticated")


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=NAMES)
def test_a_revoked_key_is_refused_at_once(endpoint: Endpoint, client: TestClient,
                                          services: Services, world: World) -> None:
    info, secret = services.keys.create(world.tenant, ["memory:admin"])
    headers = {"Authorization": f"Bearer {secret}"}
    assert client.get("/v1/status", headers=headers).status_code == 200
    services.keys.revoke(info.key_id)
    response = _send(client, endpoint, world, headers)
    _refused(response, 401, "unauthenticated")
    assert "revoked" in response.json()["error"]["message"]


_WRONG = {"memory:read": ("memory:write",), "memory:write": ("memory:read",),
          "memory:admin": ("memory:read", "memory:write"),
          "memory:erase": ("memory:read", "memory:write", "memory:admin")}


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=NAMES)
def test_a_key_without_the_scope_is_403(endpoint: Endpoint, client: TestClient,
                                        services: Services, world: World) -> None:
    headers = bearer(services, world.tenant, *_WRONG[endpoint.scope])
    _refused(_send(client, endpoint, world, headers), 403, "permission_denied")


@pytest.mark.parametrize("endpoint", [e for e in ENDPOINTS if e.body and e.method in WITH_BODY],
                         ids=lambda e: e.name)
def test_a_body_naming_another_tenant_is_403(endpoint: Endpoint, client: TestClient,
                                             world: World) -> None:
    assert endpoint.body is not None
    body = {**endpoint.body(world), "tenant_id": "someone-else"}
    _refused(_send(client, endpoint, world, world.headers, body), 403, "permission_denied")


@pytest.mark.parametrize("endpoint", [e for e in ENDPOINTS if e.names_id], ids=lambda e: e.name)
def test_another_tenants_id_is_answered_as_a_missing_one(
        endpoint: Endpoint, client: TestClient, services: Services, world: World) -> None:
    other = bearer(services, new_tenant(), "memory:admin")
    theirs = _send(client, endpoint, world, other)
    missing = endpoint.path(world)
    for known in (world.state, world.event, world.knowledge, world.commitment):
        missing = missing.replace(known["card_id"], MISSING)
    missing = missing.replace(str(world.queued["case_id"]), MISSING)
    missing = missing.replace(world.dead_letter["ingestion_id"], MISSING)
    unknown = _send(client, endpoint, world, other, path=missing)
    assert theirs.status_code == unknown.status_code == 404, (theirs.text, unknown.text)
    ids = [MISSING, str(world.queued["case_id"]), world.dead_letter["ingestion_id"]] + [
        card["card_id"] for card in (world.state, world.event, world.knowledge, world.commitment)]

    def anonymous(response: Any) -> Json:
        error = dict(response.json()["error"])
        for each in ids:
            error["message"] = error["message"].replace(each, "?")
        return error
    assert anonymous(theirs) == anonymous(unknown)


def _head(services: Services) -> int:
    return services.app.recorder.max_notification_id() or 0


@pytest.mark.parametrize("endpoint", [e for e in ENDPOINTS if e.method in WITH_BODY],
                         ids=lambda e: e.name)
def test_an_oversized_body_is_413_before_the_key_is_looked_up(
        endpoint: Endpoint, client: TestClient, services: Services, world: World) -> None:
    head = _head(services)
    padding = "x" * (LIMITS["api_max_body_bytes"] + 1)
    assert endpoint.body is not None
    body = {**endpoint.body(world), "note": padding}
    _refused(_send(client, endpoint, world, None, body), 413, "payload_too_large")

    def chunks() -> Any:  # no Content-Length: counted as it comes
        yield b'{"note": "'
        for _ in range(10):
            yield b"y" * (LIMITS["api_max_body_bytes"] // 8)
        yield b'"}'

    chunked = client.request(endpoint.method, endpoint.path(world), content=chunks(),
                             headers={"content-type": "application/json"})
    _refused(chunked, 413, "payload_too_large")
    assert _head(services) == head


@pytest.mark.parametrize("endpoint", [e for e in ENDPOINTS if e.text], ids=lambda e: e.name)
def test_oversized_text_is_413_before_the_key_is_looked_up(
        endpoint: Endpoint, client: TestClient, services: Services, world: World) -> None:
    head = _head(services)
    assert endpoint.body is not None
    for name in endpoint.text:
        body = {**endpoint.body(world), name: "長" * (LIMITS["max_content_chars"] + 1)}
        _refused(_send(client, endpoint, world, None, body), 413, "content_too_large")
    if endpoint.name == "remember":
        body = {**endpoint.body(world), "tags": [f"tag{i}" for i in range(LIMITS["max_tags"] + 1)]}
        _refused(_send(client, endpoint, world, None, body), 413, "too_many_tags")
    assert _head(services) == head


@pytest.mark.parametrize("endpoint", [e for e in ENDPOINTS if e.body], ids=lambda e: e.name)
def test_a_malformed_body_is_422_with_the_error_shape(endpoint: Endpoint, client: TestClient,
                                                      world: World) -> None:
    response = client.request(endpoint.method, endpoint.path(world), headers=world.headers,
                              content=b"{not json")
    _refused(response, 422, "invalid_request")
