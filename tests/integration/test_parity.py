"""REST and MCP give the same answer for the same call, for every MCP tool.

One server as ``serve`` builds it (``create_api`` with the MCP app mounted at ``/mcp``, its
lifespan run by the API's), under uvicorn. Writes: the same script goes through REST for one
tenant and through MCP for its twin, at the same moments, and each answer is the same but for
the ids and positions the two tenants' logs give. Reads: each read asked of one tenant through
both edges answers the same JSON (a search's diagnostics apart); so does an error."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

import anyio
import httpx
import pytest
import uvicorn
from mcp.client.session import ClientSession

from infra.postgres import Database
from infra.settings import Settings
from projections.replay import catch_up, make_projector
from services.bootstrap import Services, build_services
from services.command.commands import Remember
from services.command.consolidation import Propose
from services.entrypoints.api import create_api
from services.entrypoints.http import with_lifespan_of
from services.entrypoints.mcp import mcp_http_app, tool_specs
from tests.integration.test_mcp import ToolFailed, call, http_session, patient
from tests.support import Clock, new_tenant

pytestmark = pytest.mark.integration

def comparable(data: Any) -> Any:
    """An answer without what says how it was computed rather than what it is: a search's
    diagnostics (each route's latency and health under the machine's load at that moment) are
    kept as the routes' names only."""
    if isinstance(data, dict):
        return {k: sorted(v["routes"]) if k == "diagnostics" else comparable(v)
                for k, v in data.items()}
    if isinstance(data, list):
        return [comparable(v) for v in data]
    return data


class Ids:
    """A tenant's ids and positions, named by their order of first appearance."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def __call__(self, data: Any, key: str = "") -> Any:
        if isinstance(data, dict):
            return {k: self(v, k) for k, v in data.items()}
        if isinstance(data, list):
            return [self(v) for v in data]
        if key == "position" and isinstance(data, int):
            return "position"
        if isinstance(data, str) and _is_uuid(data):
            return self.names.setdefault(data, f"id{len(self.names)}")
        return data


def _is_uuid(text: str) -> bool:
    try:
        UUID(text)
    except ValueError:
        return False
    return True


class Edges:
    """The same service through REST (httpx) and through MCP (the SDK's client at ``/mcp``)."""

    def __init__(self, services: Services) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.base = f"http://127.0.0.1:{self.port}"
        mcp_app = mcp_http_app(services, port=self.port)
        api = create_api(services, mcp_app=mcp_app)
        with_lifespan_of(api, mcp_app)  # as serve builds it
        self.server = uvicorn.Server(uvicorn.Config(api, host="127.0.0.1", port=self.port,
                                                    log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    def rest(self, key: str, method: str, path: str, body: Any = None,
             params: dict[str, Any] | None = None) -> Any:
        response = httpx.request(method, self.base + path, json=body, params=params, timeout=30,
                                 headers={"Authorization": f"Bearer {key}"})
        return response.json()

    def mcp(self, key: str, tool: str, arguments: dict[str, Any]) -> Any:
        async def main() -> Any:
            async with http_session(self.base + "/mcp", key) as session:
                return await self._answer(session, tool, arguments)

        return anyio.run(main)

    @staticmethod
    async def _answer(session: ClientSession, tool: str, arguments: dict[str, Any]) -> Any:
        try:
            return await call(session, tool, arguments)
        except ToolFailed as failed:
            return {"error": failed.error}


@pytest.fixture(scope="module")
def clock() -> Clock:
    return Clock()


@pytest.fixture(scope="module")
def services(pg_settings: Settings, admin_db: Database, clock: Clock) -> Iterator[Services]:
    built = build_services(patient(pg_settings), clock=clock)
    yield built
    built.close()


@pytest.fixture(scope="module")
def edges(services: Services) -> Iterator[Edges]:
    running = Edges(services)
    yield running
    running.close()


@pytest.fixture(scope="module")
def project(pg_settings: Settings, admin_db: Database, services: Services
            ) -> Iterator[Callable[[], None]]:
    projector = make_projector(pg_settings, services.app, admin=admin_db)

    def fill() -> None:
        catch_up(projector, services.app)

    yield fill
    projector.close()


def at(clock: Clock, **delta: float) -> str:
    return (clock.now + timedelta(**delta)).isoformat()


def address(value: str, session: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "state", "memory_type": "fact", "subject": "user", "label": "address",
            "content": value, "session_id": session, "turn_id": "1", **extra}


#: Each write: (tool, its REST call); both built from the tenant's earlier answers (``seen``).
Rest = tuple[str, str, dict[str, Any] | None]
Step = tuple[str, Callable[[dict[str, Any], Clock], tuple[dict[str, Any], Rest]]]


def _card(tool_arguments: dict[str, Any], path: str) -> tuple[dict[str, Any], Rest]:
    body = {k: v for k, v in tool_arguments.items() if k != "card_id"}
    return tool_arguments, ("POST", path.format(**tool_arguments), body)


WRITES: list[Step] = [
    ("remember", lambda seen, clock: (address("Taipei", "s1"), ("POST", "/v1/memories",
                                                                 address("Taipei", "s1")))),
    ("remember", lambda seen, clock: (address("Kyoto", "s2"), ("POST", "/v1/memories",
                                                                address("Kyoto", "s2")))),
    ("revise", lambda seen, clock: _card({"card_id": seen["remember"][1]["card_id"],
                                          "content": "Kyoto, Sakyo-ku", "edge": "updates"},
                                         "/v1/cards/{card_id}/revise")),
    ("verify", lambda seen, clock: _card({"card_id": seen["revise"][0]["card_id"]},
                                         "/v1/cards/{card_id}/verify")),
    ("remember", lambda seen, clock: (
        event := {"kind": "event", "memory_type": "event", "content": "Kickoff meetnig",
                  "occurred_at": at(clock, hours=-2), "tags": ["fibon", "會議"]},
        ("POST", "/v1/memories", event))),
    ("correct", lambda seen, clock: _card({"card_id": seen["remember"][2]["card_id"],
                                           "description": "Kickoff meeting", "reason": "typo"},
                                          "/v1/cards/{card_id}/correct")),
    ("remember", lambda seen, clock: (
        note := {"kind": "knowledge", "memory_type": "note", "title": "JWT",
                 "content": "Tokens expire after an hour", "tags": ["jwt"]},
        ("POST", "/v1/memories", note))),
    ("link", lambda seen, clock: _card({"card_id": seen["remember"][3]["card_id"],
                                        "edge": "evidenced_by",
                                        "target_id": seen["remember"][2]["card_id"]},
                                       "/v1/cards/{card_id}/links")),
    ("remember", lambda seen, clock: (
        promise := {"kind": "state", "memory_type": "commitment", "content": "send the report",
                    "owner": "henry", "due_at": at(clock, days=2)},
        ("POST", "/v1/memories", promise))),
    ("resolve", lambda seen, clock: (
        {"card_id": seen["remember"][4]["card_id"], "to": "wait"},
        ("POST", f"/v1/cards/{seen['remember'][4]['card_id']}/moves", {"to": "wait"}))),
    ("remember", lambda seen, clock: (address("Osaka", "s3", valid_from=at(clock, days=-45)),
                                      ("POST", "/v1/memories",
                                       address("Osaka", "s3", valid_from=at(clock, days=-45))))),
    ("arbitrate", lambda seen, clock: (
        {"case_id": seen["remember"][5]["case_id"], "decision": "keep_old", "decided_by": "henry"},
        ("POST", f"/v1/arbitrations/{seen['remember'][5]['case_id']}/decision",
         {"decision": "keep_old", "decided_by": "henry"}))),
]


def test_every_tool_answers_alike_through_rest_and_mcp(
        services: Services, edges: Edges, project: Callable[[], None], clock: Clock) -> None:
    covered: set[str] = set()
    through_rest, through_mcp = new_tenant(), new_tenant()
    rest_key = services.keys.create(through_rest, ("memory:admin",), "parity")[1]
    mcp_key = services.keys.create(through_mcp, ("memory:admin",), "parity")[1]
    seen: dict[str, dict[str, list[Any]]] = {through_rest: {}, through_mcp: {}}
    rest_ids, mcp_ids = Ids(), Ids()
    for tool, step in WRITES:
        clock.advance(minutes=10)
        arguments, _ = step(seen[through_mcp], clock)
        _, (method, path, body) = step(seen[through_rest], clock)
        by_rest = edges.rest(rest_key, method, path, body)
        by_mcp = edges.mcp(mcp_key, tool, arguments)
        assert "error" not in by_mcp, (tool, by_mcp)
        assert rest_ids(by_rest) == mcp_ids(by_mcp), tool
        seen[through_rest].setdefault(tool, []).append(by_rest)
        seen[through_mcp].setdefault(tool, []).append(by_mcp)
        covered.add(tool)
    assert [w["outcome"] for w in seen[through_mcp]["remember"]] == [
        "remembered", "superseded", "recorded", "learned", "open", "queued"]
    project()

    mine = seen[through_mcp]
    kyoto, event, promise = (mine["revise"][0]["card_id"], mine["remember"][2]["card_id"],
                             mine["remember"][4]["card_id"])
    slot = mine["revise"][0]["aggregate_id"]
    then = at(clock, minutes=-95)  # after the first writes, before the revision
    unknown = str(uuid4())
    reads: list[tuple[str, dict[str, Any], Rest, dict[str, Any] | None]] = [
        ("search", {"query": "address", "asOf": {"validAt": then}},
         ("POST", "/v1/search", {"query": "address", "as_of": {"valid_at": then}}), None),
        ("search", {"query": "address", "asOf": {"validAt": at(clock), "asKnownAt": then}},
         ("POST", "/v1/search", {"query": "address",
                                 "as_of": {"valid_at": at(clock), "known_at": then}}), None),
        ("context", {"query": "where does the user live"},
         ("POST", "/v1/context", {"query": "where does the user live"}), None),
        ("get_facts", {"subject": "user", "asOf": {"asKnownAt": then}},
         ("GET", "/v1/facts/user", None), {"known_at": then}),
        ("get_facts", {"subject": "user"}, ("GET", "/v1/facts/user", None), None),
        ("get_memories", {"card_ids": [kyoto, event, promise, unknown]},
         ("POST", "/v1/cards/lookup", {"card_ids": [kyoto, event, promise, unknown]}), None),
        ("history", {"ref": slot}, ("GET", "/v1/history", None), {"ref": slot}),
        ("history", {"ref": unknown}, ("GET", "/v1/history", None), {"ref": unknown}),
        ("briefing", {}, ("GET", "/v1/briefing", None), None),
        ("arbitrations", {}, ("GET", "/v1/arbitrations", None), None),
        ("list_cards", {"kinds": ["state"], "include_superseded": True},
         ("GET", "/v1/cards", None), {"kinds": ["state"], "include_superseded": True}),
        ("count_cards", {"group_by": "memory_type"},
         ("GET", "/v1/cards/count", None), {"group_by": "memory_type"}),
    ]
    for tool, arguments, (method, path, body), params in reads:
        by_mcp = edges.mcp(mcp_key, tool, arguments)
        by_rest = edges.rest(mcp_key, method, path, body, params)
        assert comparable(by_mcp) == comparable(by_rest), tool
        covered.add(tool)
    answered = {tool: edges.mcp(mcp_key, tool, arguments) for tool, arguments, _, _ in reads}
    assert [c["card_id"] for c in answered["get_memories"]["cards"]] == [kyoto, event, promise]
    assert answered["get_memories"]["missing"] == [unknown]
    assert edges.mcp(mcp_key, "history", {"ref": unknown})["error"]["code"] == "card_not_found"
    covered |= ingest_and_review(services, edges, project, clock, {
        through_rest: (rest_key, rest_ids, seen[through_rest]),
        through_mcp: (mcp_key, mcp_ids, seen[through_mcp])})
    covered |= forget_and_export(edges, project, {
        through_rest: (rest_key, rest_ids, seen[through_rest]),
        through_mcp: (mcp_key, mcp_ids, seen[through_mcp])})
    assert covered == {spec.name for spec in tool_specs()}, "a tool without a parity check"


def ingest_and_review(services: Services, edges: Edges, project: Callable[[], None], clock: Clock,
                      tenants: dict[str, tuple[str, Ids, dict[str, list[Any]]]]) -> set[str]:
    """Turns handed over, a dead letter listed and re-run, a proposal listed and reviewed: the
    writes through REST for one tenant and MCP for the other, the reads both ways for the MCP one."""
    (rest_tenant, (rest_key, rest_ids, _)), (mcp_tenant, (mcp_key, mcp_ids, _)) = tenants.items()
    turn = {"session_id": "p1", "turn_id": "1", "role": "user", "text": "We met in Tainan",
            "said_at": at(clock, minutes=-5), "timezone": "Asia/Taipei"}
    by_rest = edges.rest(rest_key, "POST", "/v1/ingest", {"turns": [turn]})
    by_mcp = edges.mcp(mcp_key, "ingest", {"turns": [turn]})
    assert rest_ids(by_rest) == mcp_ids(by_mcp), "ingest"
    turns = {rest_tenant: by_rest["turns"][0]["ingestion_id"], mcp_tenant: by_mcp["turns"][0]["ingestion_id"]}
    proposals = {}
    for tenant, (_, _, seen) in tenants.items():
        services.app.record_dead_letter(tenant, turns[tenant], "the model timed out", 3)
        twin = services.app.remember(tenant, Remember(
            kind="knowledge", memory_type="note", title="JWTs", content="Tokens expire in an hour",
            tags=("jwt",)))
        proposals[tenant] = str(services.app.propose(tenant, Propose(
            kind="duplicate", src_id=twin.card_id, dst_id=seen["remember"][3]["card_id"],
            edge="merge", rationale="the same concept twice", score=0.95)).aggregate_id)
    project()
    dead = {"status": "dead_letter"}
    reads = [("ingestions", dead, ("GET", "/v1/ingest", None), dead),
             ("proposals", {}, ("GET", "/v1/proposals", None), None)]
    for tool, arguments, (method, path, body), params in reads:
        found = edges.mcp(mcp_key, tool, arguments)
        assert comparable(found) == comparable(edges.rest(mcp_key, method, path, body, params)), tool
    assert len(edges.mcp(mcp_key, "ingestions", {"status": "dead_letter"})["ingestions"]) == 1
    by_rest = edges.rest(rest_key, "POST", f"/v1/ingest/{turns[rest_tenant]}/rerun", {})
    by_mcp = edges.mcp(mcp_key, "rerun_ingestion", {"ingestion_id": turns[mcp_tenant]})
    assert rest_ids(by_rest) == mcp_ids(by_mcp) and by_mcp["outcome"] == "received", "rerun_ingestion"
    review = {"decision": "reject", "note": "two cards on purpose"}
    by_rest = edges.rest(rest_key, "POST", "/v1/proposals/review",
                         {"reviews": [{"proposal_id": proposals[rest_tenant], **review}]})
    by_mcp = edges.mcp(mcp_key, "review_proposals",
                       {"reviews": [{"proposal_id": proposals[mcp_tenant], **review}]})
    assert rest_ids(by_rest) == mcp_ids(by_mcp), "review_proposals"
    assert by_mcp["results"][0]["review"] == "rejected"
    return {"ingest", "ingestions", "rerun_ingestion", "proposals", "review_proposals"}


def forget_and_export(edges: Edges, project: Callable[[], None],
                      tenants: dict[str, tuple[str, Ids, dict[str, list[Any]]]]) -> set[str]:
    """A card forgotten through REST for one tenant and MCP for the other; then the MCP one's
    export through both: the same lines, the tombstone among them."""
    (_, (rest_key, rest_ids, rest_seen)), (_, (mcp_key, mcp_ids, mcp_seen)) = tenants.items()
    by_rest = edges.rest(rest_key, "POST", "/v1/erasures", {
        "unit": "card", "card_id": rest_seen["remember"][0]["card_id"], "basis": "gdpr-17"})
    by_mcp = edges.mcp(mcp_key, "forget", {"unit": "card", "card_id": mcp_seen["remember"][0]["card_id"],
                                           "basis": "gdpr-17"})
    assert "error" not in by_mcp and rest_ids(by_rest) == mcp_ids(by_mcp), "forget"
    refused = {"unit": "tenant"}
    assert edges.mcp(mcp_key, "forget", refused) == edges.rest(mcp_key, "POST", "/v1/erasures",
                                                                refused)
    project()
    for subject in (None, "user"):
        exported = edges.mcp(mcp_key, "export", {"limit": 1_000, "subject": subject})
        streamed = httpx.get(edges.base + "/v1/export", timeout=30,
                             params={"subject": subject} if subject else None,
                             headers={"Authorization": f"Bearer {mcp_key}"})
        assert streamed.status_code == 200 and exported["left_off"] == 0
        assert exported["text"] == streamed.text, "export"
    erased = [line for line in exported["text"].splitlines() if '"erased": true' in line]
    assert len(erased) == 1 and mcp_seen["remember"][0]["card_id"] in erased[0]
    return {"forget", "export"}


def test_a_refusal_answers_alike(services: Services, edges: Edges) -> None:
    reader = services.keys.create(new_tenant(), ("memory:read",), "parity")[1]
    by_mcp = edges.mcp(reader, "remember", address("Taipei", "r1"))
    by_rest = edges.rest(reader, "POST", "/v1/memories", address("Taipei", "r1"))
    assert by_mcp == by_rest and by_mcp["error"]["code"] == "permission_denied"
    too_long = address("x" * (services.settings.max_content_chars + 1), "r2")
    assert edges.mcp(reader, "remember", too_long) == edges.rest(reader, "POST", "/v1/memories",
                                                                 too_long)
