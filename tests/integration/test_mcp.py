"""The MCP edge through the SDK's own client: over streamable HTTP (uvicorn on a free port) and over
stdio (``palimpsest mcp`` spawned), on the embedded PostgreSQL, the read models filled by the
projector from the log."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar
from uuid import uuid4

import anyio
import httpx
import httpx2
import pytest
import uvicorn
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from domain.values import Scope, ScopeKind
from infra.postgres import Database
from infra.settings import Settings
from projections.replay import catch_up, make_projector
from services.bootstrap import Services, build_services
from services.entrypoints.mcp import TOOLS, mcp_http_app, tool_specs, transport_security
from services.entrypoints.operations import OPERATIONS
from tests.integration.rest_server import ServedApp
from tests.support import START, Clock, new_tenant

pytestmark = pytest.mark.integration

T = TypeVar("T")
CLI = Path(sys.executable).parent / "palimpsest"
READ_WRITE = ("memory:read", "memory:write")


class ToolFailed(Exception):
    """A tool answered an error: ``error`` is its structured body's ``error`` object."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error)
        self.error = error


async def call(session: ClientSession, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    body = result.structured_content
    assert body is not None, result
    if result.is_error:
        raise ToolFailed(body["error"])
    return body


# --- the service under test ------------------------------------------------------------------


class Served(ServedApp):
    """The MCP app of one ``Services`` under uvicorn on a free loopback port."""

    def __init__(self, services: Services) -> None:
        self.services = services
        super().__init__(lambda port: mcp_http_app(services, path="/mcp", port=port),
                         lifespan="on")
        self.url += "/mcp"

    def run(self, key: str | None, scenario: Callable[[ClientSession], Awaitable[T]]) -> T:
        """``scenario`` in one MCP session over streamable HTTP with ``key``."""

        async def main() -> T:
            async with http_session(self.url, key) as session:
                return await scenario(session)

        return anyio.run(main)


@asynccontextmanager
async def http_session(url: str, key: str | None):  # type: ignore[no-untyped-def]
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as client, \
            streamable_http_client(url, http_client=client) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        yield session


@pytest.fixture(scope="module")
def clock() -> Clock:
    return Clock()


def patient(settings: Settings) -> Settings:
    """``settings`` with retrieval routes that wait and never quarantine: on a loaded machine a
    route that times out changes the answer, and these tests are about the edge, not the load."""
    retrieval = settings.retrieval.model_copy(update={
        "route_timeout_ms": 60_000, "graph_budget_ms": 60_000, "breaker_p95_ms": 60_000.0})
    return settings.model_copy(update={"retrieval": retrieval})


@pytest.fixture(scope="module")
def services(pg_settings: Settings, admin_db: Database, clock: Clock) -> Iterator[Services]:
    built = build_services(patient(pg_settings), clock=clock)
    yield built
    built.close()


@pytest.fixture(scope="module")
def project(pg_settings: Settings, admin_db: Database, services: Services
            ) -> Iterator[Callable[[], None]]:
    """Fill the read models from the log, as the projector does."""
    projector = make_projector(pg_settings, services.app, admin=admin_db)

    def fill() -> None:
        catch_up(projector, services.app)

    yield fill
    projector.close()


@pytest.fixture(scope="module")
def served(services: Services) -> Iterator[Served]:
    with Served(services) as running:
        yield running


def key_of(services: Services, tenant: str, scopes: tuple[str, ...] = READ_WRITE) -> str:
    return services.keys.create(tenant, scopes, "mcp test")[1]


def address(value: str, session: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "state", "memory_type": "fact", "subject": "user", "label": "address",
            "content": value, "session_id": session, "turn_id": "1", **extra}


# --- tools, schemas and annotations ----------------------------------------------------------


def test_every_tool_is_listed_with_its_schemas_and_hints(services: Services, served: Served) -> None:
    listed = served.run(key_of(services, new_tenant()), lambda s: s.list_tools())
    tools = {tool.name: tool for tool in listed.tools}
    assert set(tools) == {spec.name for spec in tool_specs()}
    assert {"remember", "revise", "correct", "verify", "search", "get_facts", "get_memories",
            "history", "briefing", "resolve", "arbitrate", "context"} <= set(tools)
    for spec in tool_specs():
        tool, operation = tools[spec.name], OPERATIONS[spec.operation]
        assert tool.input_schema["type"] == "object" and tool.input_schema["properties"]
        assert tool.output_schema is not None and tool.output_schema["type"] == "object"
        assert set(tool.output_schema["properties"]) == set(operation.output.model_json_schema()
                                                            ["properties"])
        hints = tool.annotations
        assert hints is not None
        assert (hints.read_only_hint, hints.destructive_hint, hints.idempotent_hint) == (
            operation.read_only, operation.destructive, operation.idempotent), spec.name
        assert tool.description == operation.summary
    assert tools["search"].annotations.read_only_hint  # type: ignore[union-attr]
    assert not tools["remember"].annotations.read_only_hint  # type: ignore[union-attr]
    assert tools["arbitrate"].annotations.destructive_hint  # type: ignore[union-attr]
    with_as_of = {spec.name for spec in tool_specs()
                  if "as_of" in OPERATIONS[spec.operation].input.model_fields}
    assert {"search", "get_facts", "context"} <= with_as_of
    for name in with_as_of:
        schema = tools[name].input_schema
        assert "asOf" in schema["properties"] and "as_of" not in schema["properties"], name
        as_of = schema["$defs"]["McpAsOf"]["properties"]
        assert set(as_of) == {"validAt", "asKnownAt"}
    assert set(tools["get_memories"].input_schema["required"]) == {"card_ids"}


def test_the_table_names_only_operations_that_exist_or_are_announced() -> None:
    assert {spec.operation for spec in TOOLS} - set(OPERATIONS) <= {"list_cards", "count_cards"}


# --- remember, then ask as of both timelines --------------------------------------------------


def test_remember_then_search_and_facts_as_of_both_timelines(
        services: Services, served: Served, project: Callable[[], None], clock: Clock) -> None:
    key = key_of(services, new_tenant())
    first_at = clock.advance(hours=1)
    learned_kyoto_at = first_at + timedelta(days=10)

    async def write(session: ClientSession) -> list[dict[str, Any]]:
        taipei = await call(session, "remember", address("Taipei", "s1", valid_from=first_at.isoformat()))
        clock.now = learned_kyoto_at
        kyoto = await call(session, "remember", address("Kyoto", "s2"))
        return [taipei, kyoto]

    taipei, kyoto = served.run(key, write)
    assert (taipei["outcome"], kyoto["outcome"]) == ("remembered", "superseded")
    assert kyoto["position"] > taipei["position"]
    project()
    between = (first_at + timedelta(days=3)).isoformat()

    async def ask(session: ClientSession) -> dict[str, Any]:
        return {
            "now": await call(session, "search", {"query": "address", "top_n": 1}),
            "valid_then": await call(session, "search", {"query": "address", "top_n": 1,
                                                         "asOf": {"validAt": between}}),
            "believed_then": await call(session, "search", {
                "query": "address", "top_n": 1,
                "asOf": {"validAt": learned_kyoto_at.isoformat(), "asKnownAt": between}}),
            "facts_then": await call(session, "get_facts", {"subject": "user",
                                                            "asOf": {"asKnownAt": between}}),
            "facts_now": await call(session, "get_facts", {"subject": "user"}),
        }

    answers = served.run(key, ask)
    assert [c["value"] for c in answers["now"]["results"]] == ["Kyoto"]
    assert [c["value"] for c in answers["valid_then"]["results"]] == ["Taipei"]
    assert answers["valid_then"]["valid_at"].startswith(between[:19])
    # valid at the time Kyoto began, but as known before anyone said so: Taipei
    assert [c["value"] for c in answers["believed_then"]["results"]] == ["Taipei"]
    assert answers["believed_then"]["known_at"].startswith(between[:19])
    assert [f["value"] for f in answers["facts_then"]["facts"] if f["label"] == "address"] == ["Taipei"]
    assert [f["value"] for f in answers["facts_now"]["facts"] if f["label"] == "address"] == ["Kyoto"]


def test_as_of_takes_only_the_mcp_spelling(services: Services, served: Served) -> None:
    key = key_of(services, new_tenant())

    async def ask(session: ClientSession) -> list[Any]:
        snake = await session.call_tool("search", {"query": "x", "as_of": {"valid_at": START.isoformat()}})
        naive = await session.call_tool("search", {"query": "x", "asOf": {"validAt": "2026-06-01T09:00"}})
        return [snake, naive]

    for result in served.run(key, ask):
        assert result.is_error


def test_writes_revise_verify_correct_and_resolve_through_mcp(
        services: Services, served: Served, project: Callable[[], None], clock: Clock) -> None:
    key = key_of(services, new_tenant())
    clock.advance(hours=1)

    async def scenario(session: ClientSession) -> dict[str, Any]:
        job = await call(session, "remember", {"kind": "state", "memory_type": "fact", "subject": "user",
                                               "label": "job title", "content": "engineer"})
        clock.advance(minutes=5)
        revised = await call(session, "revise", {"card_id": job["card_id"], "content": "senior engineer",
                                                 "edge": "updates"})
        clock.advance(minutes=5)
        verified = await call(session, "verify", {"card_id": revised["card_id"]})
        an_hour_ago = (clock.now - timedelta(hours=1)).isoformat()
        meeting = await call(session, "remember", {"kind": "event", "memory_type": "event",
                                                   "content": "Kickoff meetnig", "occurred_at": an_hour_ago})
        corrected = await call(session, "correct", {"card_id": meeting["card_id"],
                                                    "description": "Kickoff meeting", "reason": "typo"})
        promise = await call(session, "remember", {"kind": "state", "memory_type": "commitment",
                                                   "content": "send the report", "owner": "henry",
                                                   "due_at": (clock.now + timedelta(days=2)).isoformat()})
        resolved = await call(session, "resolve", {"card_id": promise["card_id"], "to": "resolve"})
        return {"revised": revised, "verified": verified, "corrected": corrected,
                "resolved": resolved, "ids": [revised["card_id"], meeting["card_id"], promise["card_id"]],
                "slot": revised["aggregate_id"]}

    done = served.run(key, scenario)
    assert done["revised"]["card_id"] and done["verified"]["outcome"] == "verified"
    assert done["corrected"]["outcome"] and done["resolved"]["outcome"]
    project()

    async def read(session: ClientSession) -> dict[str, Any]:
        return {"cards": await call(session, "get_memories", {"card_ids": done["ids"]}),
                "history": await call(session, "history", {"ref": done["slot"]}),
                "briefing": await call(session, "briefing", {}),
                "context": await call(session, "context", {"query": "job title"})}

    seen = served.run(key, read)
    by_id = {c["card_id"]: c for c in seen["cards"]["cards"]}
    assert by_id[done["ids"][0]]["value"] == "senior engineer"
    assert by_id[done["ids"][1]]["value"] == "Kickoff meeting"
    assert by_id[done["ids"][2]]["status"] == "resolved"
    assert seen["cards"]["missing"] == []
    values = [v["value"] for card in seen["history"]["cards"] for v in card["versions"]]
    assert "engineer" in values and "senior engineer" in values
    assert "senior engineer" in seen["context"]["text"]
    assert "<current_time>" in seen["context"]["text"] or "current_time" in seen["context"]["text"]


def test_an_arbitration_is_listed_and_decided_with_an_admin_key(
        services: Services, served: Served, project: Callable[[], None], clock: Clock) -> None:
    tenant = new_tenant()
    writer, admin = key_of(services, tenant), key_of(services, tenant, ("memory:admin",))
    clock.advance(hours=1)

    async def write(session: ClientSession) -> dict[str, Any]:
        await call(session, "remember", address("Taipei", "a1"))
        return await call(session, "remember", address(
            "Osaka", "a2", valid_from=(clock.now - timedelta(days=45)).isoformat()))

    queued = served.run(writer, write)
    assert queued["outcome"] == "queued" and queued["case_id"]
    project()
    decision = {"case_id": queued["case_id"], "decision": "keep_old", "decided_by": "henry"}

    async def refused(session: ClientSession) -> dict[str, Any]:
        with pytest.raises(ToolFailed) as failed:
            await call(session, "arbitrate", decision)
        return failed.value.error

    assert served.run(writer, refused)["code"] == "permission_denied"

    async def decide(session: ClientSession) -> tuple[dict[str, Any], dict[str, Any]]:
        pending = await call(session, "arbitrations", {})
        return pending, await call(session, "arbitrate", decision)

    pending, decided = served.run(admin, decide)
    assert queued["case_id"] in [case["case_id"] for case in pending["cases"]]
    assert decided["outcome"]


def test_mounted_where_no_lifespan_reaches_it_the_first_request_starts_the_sessions(
        services: Services) -> None:
    from services.entrypoints.api import create_api

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    api = create_api(services, mcp_app=mcp_http_app(services, port=port))
    server = uvicorn.Server(uvicorn.Config(api, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            assert thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)

        async def listed(url: str) -> set[str]:
            async with http_session(url, key_of(services, new_tenant())) as session:
                return {tool.name for tool in (await session.list_tools()).tools}

        for url in (f"http://127.0.0.1:{port}/mcp/", f"http://127.0.0.1:{port}/mcp"):
            assert anyio.run(listed, url) == {spec.name for spec in tool_specs()}, url
    finally:
        server.should_exit = True
        thread.join(10)


# --- keys and tenancy --------------------------------------------------------------------------


def raw_post(served: Served, headers: dict[str, str]) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}}
    return httpx.post(served.url, json=body, timeout=10, headers={
        "Accept": "application/json, text/event-stream", **headers})


def test_a_missing_unknown_or_revoked_key_is_refused(services: Services, served: Served) -> None:
    missing = raw_post(served, {})
    assert missing.status_code == 401
    assert missing.json()["error"]["data"]["code"] == "unauthenticated"
    assert missing.headers["www-authenticate"].lower().startswith("bearer")
    unknown = raw_post(served, {"Authorization": "Bearer pk_nobody"})
    assert unknown.status_code == 401
    assert raw_post(served, {"Authorization": "Basic abc"}).status_code == 401

    info, key = services.keys.create(new_tenant(), READ_WRITE, "soon revoked")
    assert raw_post(served, {"Authorization": f"Bearer {key}"}).status_code == 200

    async def revoked_mid_session(session: ClientSession) -> str:
        await call(session, "briefing", {})
        services.keys.revoke(info.key_id)
        with pytest.raises(MCPError) as refused:
            await call(session, "briefing", {})
        return str(refused.value)

    assert "revoked" in served.run(key, revoked_mid_session)
    refused = raw_post(served, {"Authorization": f"Bearer {key}"})
    assert refused.status_code == 401 and "revoked" in refused.json()["error"]["data"]["message"]


def test_a_key_without_the_scope_is_refused(services: Services, served: Served) -> None:
    reader = key_of(services, new_tenant(), ("memory:read",))

    async def scenario(session: ClientSession) -> dict[str, Any]:
        await call(session, "briefing", {})
        with pytest.raises(ToolFailed) as failed:
            await call(session, "remember", address("Taipei", "r1"))
        return failed.value.error

    assert served.run(reader, scenario)["code"] == "permission_denied"


def test_another_tenants_ids_are_not_visible(
        services: Services, served: Served, project: Callable[[], None]) -> None:
    owner, other = new_tenant(), new_tenant()
    written = served.run(key_of(services, owner),
                         lambda s: call(s, "remember", address("Secret street", "x1")))
    project()
    card_id, unknown = written["card_id"], str(uuid4())

    async def snoop(session: ClientSession) -> dict[str, Any]:
        seen: dict[str, Any] = {
            "memories": await call(session, "get_memories", {"card_ids": [card_id, unknown]}),
            "search": await call(session, "search", {"query": "Secret street address"}),
        }
        for tool, arguments in (("history", {"ref": card_id}),
                                ("revise", {"card_id": card_id, "content": "Mine now"}),
                                ("verify", {"card_id": card_id}),
                                ("resolve", {"card_id": card_id, "to": "resolve"}),
                                ("naming_the_owner", {"query": "x", "tenant_id": owner})):
            with pytest.raises(ToolFailed) as failed:
                await call(session, "search" if tool == "naming_the_owner" else tool, arguments)
            seen[tool] = failed.value.error["code"]
        return seen

    seen = served.run(key_of(services, other), snoop)
    assert seen["memories"] == {"cards": [], "missing": [card_id, unknown], "freshness": None}
    assert card_id not in [c["card_id"] for c in seen["search"]["results"]]
    assert seen["history"] in ("not_found", "card_not_found")
    assert seen["revise"] == seen["verify"] == "card_not_found"
    assert seen["resolve"] in ("not_found", "card_not_found")
    assert seen["naming_the_owner"] == "permission_denied"
    # the owner, asking the same, sees its card and is told only of the unknown id
    mine = served.run(key_of(services, owner),
                      lambda s: call(s, "get_memories", {"card_ids": [card_id, unknown]}))
    assert [c["card_id"] for c in mine["cards"]] == [card_id] and mine["missing"] == [unknown]


def test_no_session_is_kept_and_each_request_is_served_as_its_own_key(
        services: Services, served: Served) -> None:
    """Stateless: whichever HTTP worker takes a request answers it, as the key it carries; a
    session id from elsewhere lends nothing."""
    first, second = new_tenant(), new_tenant()
    opened = raw_post(served, {"Authorization": f"Bearer {key_of(services, first)}"})
    assert opened.status_code == 200 and "mcp-session-id" not in opened.headers
    remember = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "remember", "arguments": {"kind": "state", "memory_type": "fact",
                                          "subject": "user", "label": "address",
                                          "content": "Kyoto"}}}
    answered = httpx.post(served.url, json=remember, timeout=10, headers={
        "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {key_of(services, second)}",
        "Mcp-Session-Id": "a-session-of-someone-else", "Mcp-Protocol-Version": "2025-06-18"})
    assert answered.status_code == 200 and '"remembered"' in answered.text, answered.text
    assert services.app.live_slot(second, Scope(ScopeKind.PERSONAL), "user", "address")[1] is not None
    assert services.app.live_slot(first, Scope(ScopeKind.PERSONAL), "user", "address")[1] is None


def test_dns_rebinding_is_refused(services: Services, served: Served) -> None:
    key = key_of(services, new_tenant())
    auth = {"Authorization": f"Bearer {key}"}
    assert raw_post(served, {**auth, "Host": "attacker.example"}).status_code == 421
    assert raw_post(served, {**auth, "Origin": "http://attacker.example"}).status_code == 403
    assert raw_post(served, {**auth, "Origin": f"http://localhost:{served.port}"}).status_code == 200


def test_binding_beyond_loopback_allows_this_machines_names_only(pg_settings: Settings) -> None:
    loopback = transport_security(pg_settings, "127.0.0.1", 8765)
    assert loopback.enable_dns_rebinding_protection
    assert "localhost:8765" in loopback.allowed_hosts and socket.gethostname() + ":8765" not in \
        loopback.allowed_hosts
    wide = transport_security(pg_settings, "0.0.0.0", 8765)
    assert wide.enable_dns_rebinding_protection
    assert f"{socket.gethostname()}:8765" in wide.allowed_hosts
    assert "0.0.0.0:8765" not in wide.allowed_hosts and "attacker.example:8765" not in wide.allowed_hosts
    assert f"http://{socket.gethostname()}:8765" in wide.allowed_origins
    proxied = transport_security(pg_settings, "127.0.0.1", None, ["memory.example.com"])
    assert {"memory.example.com", "memory.example.com:*"} <= set(proxied.allowed_hosts)
    assert "https://memory.example.com" in proxied.allowed_origins


# --- stdio -------------------------------------------------------------------------------------


def stdio_env(settings: Settings, key: str | None) -> dict[str, str]:
    env = {"PALIMPSEST_DATA_DIR": str(settings.data_dir), "PALIMPSEST_PERSISTENCE": "postgres",
           "PALIMPSEST_AUTO_BOOTSTRAP": "false", "PALIMPSEST_READ_SCHEMA": settings.read_schema,
           "PALIMPSEST_EVENT_SCHEMA": settings.event_schema}
    if key:
        env["PALIMPSEST_KEY"] = key
    return env


def run_stdio(settings: Settings, key: str, scenario: Callable[[ClientSession], Awaitable[T]]) -> T:
    params = StdioServerParameters(command=str(CLI), args=["mcp"], env=stdio_env(settings, key))

    async def main() -> T:
        with open(os.devnull, "w") as quiet:
            async with stdio_client(params, errlog=quiet) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                return await scenario(session)

    return anyio.run(main)


def test_stdio_serves_the_same_tools_with_the_keys_tenant(
        pg_settings: Settings, services: Services, project: Callable[[], None]) -> None:
    info, key = services.keys.create(new_tenant(), READ_WRITE, "stdio")

    async def owner(session: ClientSession) -> dict[str, Any]:
        listed = await session.list_tools()
        written = await call(session, "remember", address("Tainan", "o1"))
        await anyio.to_thread.run_sync(project)
        found = await call(session, "get_memories", {"card_ids": [written["card_id"]]})
        services.keys.revoke(info.key_id)
        with pytest.raises(ToolFailed) as revoked:
            await call(session, "get_memories", {"card_ids": [written["card_id"]]})
        return {"names": {t.name for t in listed.tools}, "written": written, "found": found,
                "revoked": revoked.value.error}

    seen = run_stdio(pg_settings, key, owner)
    assert seen["names"] == {spec.name for spec in tool_specs()}
    assert seen["written"]["outcome"] == "remembered"
    assert [c["value"] for c in seen["found"]["cards"]] == ["Tainan"]
    assert seen["revoked"]["code"] == "unauthenticated", "a key revoked mid-session is refused at once"
    card_id = seen["written"]["card_id"]
    stranger = run_stdio(pg_settings, key_of(services, new_tenant()),
                         lambda s: call(s, "get_memories", {"card_ids": [card_id]}))
    assert stranger == {"cards": [], "missing": [card_id], "freshness": None}


@pytest.mark.parametrize("key", [None, "pk_unknown"])
def test_stdio_refuses_to_start_without_a_valid_key(pg_settings: Settings, admin_db: Database,
                                                     key: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PALIMPSEST_KEY"}
    done = subprocess.run([str(CLI), "mcp"], env={**env, **stdio_env(pg_settings, key)},
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert ("no API key" if key is None else "unknown API key") in done.stderr
