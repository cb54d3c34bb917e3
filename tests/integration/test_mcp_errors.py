"""MCP as ``palimpsest serve`` mounts it beside REST, through the MCP SDK's own client: a tool's
arguments that do not fit its schema are answered with REST's typed error body (``invalid_request``,
naming the field and the rule), as a tool error, never as the SDK's bare validation text; and the
server reports the installed package's version."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from importlib.metadata import version
from typing import Any, TypeVar

import anyio
import httpx
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from infra.postgres import Database
from infra.settings import Settings
from services.bootstrap import Services, build_services
from services.entrypoints.api import create_api
from services.entrypoints.http import with_lifespan_of
from services.entrypoints.mcp import mcp_http_app
from tests.integration.rest_server import ServedApp
from tests.support import new_tenant

pytestmark = pytest.mark.integration

T = TypeVar("T")


class Served(ServedApp):
    """REST under /v1 and MCP at /mcp/ on one port, mounted as ``serve`` mounts them."""

    def __init__(self, services: Services) -> None:
        def app(port: int) -> Any:
            mcp = mcp_http_app(services, path="/", port=port)
            api = create_api(services, mcp_app=mcp)
            with_lifespan_of(api, mcp)
            return api

        super().__init__(app, lifespan="on")

    def mcp(self, key: str, scenario: Callable[[ClientSession, Any], Awaitable[T]]) -> T:
        """``scenario(session, what initialize answered)`` in one MCP session with ``key``."""

        async def main() -> T:
            async with session(self.url + "/mcp/", key) as (opened, hello):
                return await scenario(opened, hello)

        return anyio.run(main)


@asynccontextmanager
async def session(url: str, key: str) -> AsyncIterator[tuple[ClientSession, Any]]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as client, \
            streamable_http_client(url, http_client=client) as (read, write), \
            ClientSession(read, write) as opened:
        yield opened, await opened.initialize()


@pytest.fixture(scope="module")
def services(pg_settings: Settings, admin_db: Database) -> Iterator[Services]:
    built = build_services(pg_settings)
    yield built
    built.close()


@pytest.fixture(scope="module")
def served(services: Services) -> Iterator[Served]:
    with Served(services) as running:
        yield running


@pytest.fixture(scope="module")
def key(services: Services) -> str:
    return services.keys.create(new_tenant(), ("memory:read", "memory:write"), "mcp errors")[1]


def rest(served: Served, key: str, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    answer = httpx.post(served.url + path, json=body, headers={"Authorization": f"Bearer {key}"},
                        timeout=30)
    return answer.status_code, answer.json()


def tool_errors(served: Served, key: str, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    async def scenario(opened: ClientSession, _: Any) -> list[Any]:
        return [await opened.call_tool(name, arguments) for name, arguments in calls]

    return served.mcp(key, scenario)


BAD = [  # (tool, its arguments, the REST route and body, the field, the rule)
    ("remember", {"kind": "state", "subject": "user", "label": "address"},
     "/v1/memories", "content", "Field required"),
    ("search", {"query": "where do I live", "top_n": 0},
     "/v1/search", "top_n", "greater than or equal to 1"),
    ("search", {"query": "where do I live", "top_n": "many"},
     "/v1/search", "top_n", "valid integer"),
    ("search", {"query": "where do I live", "colour": "blue"},
     "/v1/search", "colour", "Extra inputs are not permitted"),
]


def test_argument_errors_are_rests_typed_body_as_a_tool_error(served: Served, key: str) -> None:
    results = tool_errors(served, key, [(tool, arguments) for tool, arguments, *_ in BAD])
    for (tool, arguments, path, field, rule), result in zip(BAD, results, strict=True):
        assert result.is_error, (tool, arguments)
        body = result.structured_content
        assert body is not None and set(body) == {"error"}, body
        error = body["error"]
        assert (error["code"], error["retryable"]) == ("invalid_request", False), error
        assert f"{field}: " in error["message"] and rule in error["message"], error
        assert "Error executing tool" not in error["message"] and "pydantic" not in error["message"]
        (text,) = result.content
        assert json.loads(text.text) == body, "the text is the same JSON"
        status, answered = rest(served, key, path, arguments)
        assert status == 422 and set(answered) == set(body), answered
        assert set(answered["error"]) == set(error), "REST's body, key for key"
        assert answered["error"]["code"] == error["code"] and rule in answered["error"]["message"]


def test_a_good_call_still_works_and_json_given_as_a_string_is_read(served: Served, key: str) -> None:
    (listed,) = tool_errors(served, key, [("list_cards", {"kinds": '["knowledge"]', "limit": 5})])
    assert not listed.is_error, listed.content
    assert listed.structured_content == {"cards": [], "next_cursor": None, "freshness": None}


def test_a_use_case_error_keeps_its_own_code(served: Served, key: str) -> None:
    (wrong,) = tool_errors(served, key, [("list_cards", {"kinds": ["fact"]})])
    assert wrong.is_error and wrong.structured_content is not None
    assert wrong.structured_content["error"]["code"] == "invalid_kind"


def test_the_server_reports_the_package_version(served: Served, key: str) -> None:
    async def hello(_: ClientSession, answered: Any) -> Any:
        return answered.server_info

    info = served.mcp(key, hello)
    assert info.name == "palimpsest" and info.version == version("palimpsest") and info.version
