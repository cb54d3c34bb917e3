"""Forgetting through every edge, on the embedded PostgreSQL: ``DELETE /v1/cards/{id}`` and
``POST /v1/erasures`` (202, the erasure's position; another tenant's id refused like a missing one
with nothing erased; a tenant erased only by a key holding ``memory:erase``), ``GET /v1/erasures``,
``GET /v1/export`` streamed as JSON lines with both timelines and tombstones, the MCP tools
``forget`` and ``export``, and ``palimpsest forget`` / ``palimpsest export`` over a server and
locally."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mcp.client.session import ClientSession
from typer.testing import CliRunner

from infra.postgres import Database
from infra.settings import Settings
from services.bootstrap import Services
from services.entrypoints.cli import cli
from tests.integration.api_support import address, client, new_tenant, ok, project, services
from tests.integration.rest_server import ServedApi
from tests.integration.test_mcp import Served, ToolFailed, call

__all__ = ["client", "services"]  # the fixtures

pytestmark = pytest.mark.integration

WHERE = {"query": "where does the user live?"}


class Caller:
    """A key of one tenant, as REST headers, with its id (the erasures name it)."""

    def __init__(self, services: Services, tenant: str, *scopes: str) -> None:
        info, self.secret = services.keys.create(tenant, scopes, "erasure test")
        self.tenant, self.key_id = tenant, info.key_id
        self.headers = {"Authorization": f"Bearer {self.secret}"}


def _head(services: Services) -> int:
    return services.app.recorder.max_notification_id() or 0


def _lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _values(client: TestClient, caller: Caller, **extra: Any) -> list[str]:
    found = ok(client.post("/v1/search", json={**WHERE, **extra}, headers=caller.headers))
    return [card["value"] for card in found["results"]]


def _moved(client: TestClient, services: Services, admin_db: Database, caller: Caller,
           ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Taipei from 20 days ago, then Kyoto (superseding it), projected."""
    then = (datetime.now(UTC) - timedelta(days=20)).isoformat()
    taipei = ok(client.post("/v1/memories", headers=caller.headers,
                            json=address("Taipei", valid_from=then, session_id="s1", turn_id="1")))
    kyoto = ok(client.post("/v1/memories", headers=caller.headers,
                           json=address("Kyoto", session_id="s2", turn_id="1")))
    assert kyoto["outcome"] == "superseded"
    project(services, admin_db)
    return taipei, kyoto


@pytest.fixture
def me(services: Services) -> Caller:
    return Caller(services, new_tenant(), "memory:read", "memory:write")


# --- REST: erase ------------------------------------------------------------------------------


def test_delete_a_card_answers_202_with_the_erasure_and_its_position(
        client: TestClient, services: Services, admin_db: Database, me: Caller) -> None:
    taipei, kyoto = _moved(client, services, admin_db, me)
    answer = ok(client.delete(f"/v1/cards/{kyoto['card_id']}", headers=me.headers,
                              params={"basis": "gdpr-17", "reason": "asked in chat"}), 202)
    assert {"erasure_id", "position", "keys_destroyed", "card_ids"} <= set(answer)
    assert answer["card_ids"] == [kyoto["card_id"]] and answer["unit"] == "card"
    assert answer["keys_destroyed"] >= 1 and answer["position"] > kyoto["position"]
    assert answer["replayed"] is False


def test_an_erased_card_is_no_longer_found_and_the_erasure_is_listed(
        client: TestClient, services: Services, admin_db: Database, me: Caller) -> None:
    taipei, kyoto = _moved(client, services, admin_db, me)
    assert _values(client, me)[:1] == ["Kyoto"]
    erased = ok(client.delete(f"/v1/cards/{kyoto['card_id']}", headers=me.headers,
                              params={"basis": "gdpr-17"}), 202)
    project(services, admin_db)  # what the running projector does
    values = _values(client, me, min_position=erased["position"])
    assert "Kyoto" not in values
    listed = ok(client.get("/v1/erasures", headers=me.headers,
                           params={"min_position": erased["position"]}))
    assert listed["freshness"]["stale_by"] == 0
    assert [(e["erasure_id"], e["unit"], e["target"], e["basis"], e["requested_by"], e["cards"])
            for e in listed["erasures"]] == [
        (erased["erasure_id"], "card", kyoto["card_id"], "gdpr-17", f"key {me.key_id}", 1)]


def test_a_card_just_written_is_not_overlaid_once_erased(
        client: TestClient, services: Services, me: Caller) -> None:
    written = ok(client.post("/v1/memories", json=address("Lisbon"), headers=me.headers))
    assert _values(client, me)[:1] == ["Lisbon"]  # the overlay: not projected yet
    ok(client.delete(f"/v1/cards/{written['card_id']}", headers=me.headers), 202)
    assert "Lisbon" not in _values(client, me)


def test_another_tenants_card_is_not_found_and_nothing_is_erased(
        client: TestClient, services: Services, admin_db: Database, me: Caller) -> None:
    taipei, kyoto = _moved(client, services, admin_db, me)
    intruder = Caller(services, new_tenant(), "memory:read", "memory:write", "memory:admin")
    head = _head(services)
    for response in (client.delete(f"/v1/cards/{kyoto['card_id']}", headers=intruder.headers),
                     client.post("/v1/erasures", headers=intruder.headers,
                                 json={"unit": "card", "card_id": kyoto["card_id"]}),
                     client.post("/v1/erasures", headers=intruder.headers,
                                 json={"unit": "slot", "slot_id": kyoto["aggregate_id"]})):
        assert response.status_code == 404, response.text
        assert response.json()["error"]["code"] == "card_not_found"
    assert _head(services) == head
    assert services.app.keyring is not None
    assert services.app.keyring.find(me.tenant, cards=[kyoto["card_id"]])  # the key lives
    project(services, admin_db)
    assert _values(client, me)[:1] == ["Kyoto"]


def test_a_tenant_is_erased_only_with_memory_erase(
        client: TestClient, services: Services, admin_db: Database, me: Caller) -> None:
    _moved(client, services, admin_db, me)
    whole = {"unit": "tenant", "reason": "offboarding", "basis": "contract-end"}
    admin = Caller(services, me.tenant, "memory:admin")
    head = _head(services)
    for caller in (me, admin):
        refused = client.post("/v1/erasures", json=whole, headers=caller.headers)
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["code"] == "permission_denied"
        assert "memory:erase" in refused.json()["error"]["message"]
    assert _head(services) == head
    eraser = Caller(services, me.tenant, "memory:erase")
    one_slot = client.post("/v1/erasures", headers=eraser.headers,
                           json={"unit": "slot", "subject": "user", "label": "address"})
    assert one_slot.status_code == 403  # erase does not hold write: a card or a slot needs it
    erased = ok(client.post("/v1/erasures", json=whole, headers=eraser.headers), 202)
    assert erased["unit"] == "tenant" and len(erased["card_ids"]) == 2
    project(services, admin_db)
    assert _values(client, me) == []


def test_a_slot_by_subject_and_label_and_who_asked_is_the_key(
        client: TestClient, services: Services, admin_db: Database, me: Caller) -> None:
    taipei, kyoto = _moved(client, services, admin_db, me)
    named = client.post("/v1/erasures", headers=me.headers, json={
        "unit": "slot", "subject": "user", "label": "address", "requested_by": "someone"})
    assert named.status_code == 422  # who asked is the key, never the body
    missing = client.post("/v1/erasures", headers=me.headers, json={"unit": "card"})
    assert missing.status_code == 422 and missing.json()["error"]["code"] == "invalid_command"
    unknown = client.post("/v1/erasures", headers=me.headers, json={"unit": "planet"})
    assert unknown.status_code == 422
    erased = ok(client.post("/v1/erasures", headers=me.headers, json={
        "unit": "slot", "subject": "user", "label": "address", "reason": "moved away"}), 202)
    assert set(erased["card_ids"]) == {taipei["card_id"], kyoto["card_id"]}


def test_a_slot_forgotten_then_written_again_starts_afresh_and_is_found(
        client: TestClient, services: Services, admin_db: Database, me: Caller) -> None:
    """The forgotten slot keeps its tombstones; the next write to the same subject and label opens
    a slot of its own (its next generation), found by them, with no history of the old one (no
    change counted against it), and forgetting the slot again forgets both generations."""
    taipei, kyoto = _moved(client, services, admin_db, me)
    forget = {"unit": "slot", "subject": "user", "label": "address"}
    ok(client.post("/v1/erasures", headers=me.headers, json=forget), 202)
    for city in ("Osaka", "Nara"):  # two changes after the erasure: the old two do not count
        written = ok(client.post("/v1/memories", headers=me.headers, json=address(city)))
    assert written["outcome"] == "superseded"
    assert written["aggregate_id"] not in (taipei["aggregate_id"], kyoto["aggregate_id"])
    project(services, admin_db)
    assert _values(client, me)[:1] == ["Nara"]
    listed = ok(client.get("/v1/cards", headers=me.headers,
                           params={"subjects": ["user"], "labels": ["address"]}))
    assert [c["content"] for c in listed["cards"]] == ["Nara"]
    history = ok(client.get("/v1/history", headers=me.headers, params={"ref": "user/address"}))
    assert {c["versions"][-1]["value"] for c in history["cards"]} == {"Osaka", "Nara"}
    again = ok(client.post("/v1/erasures", headers=me.headers, json=forget), 202)
    assert {written["card_id"]} <= set(again["card_ids"])
    assert taipei["card_id"] not in again["card_ids"]  # its key is long gone
    project(services, admin_db)
    assert "Nara" not in _values(client, me)


def test_an_idempotency_key_erases_once(client: TestClient, services: Services,
                                        admin_db: Database, me: Caller) -> None:
    taipei, _ = _moved(client, services, admin_db, me)
    headers = {**me.headers, "Idempotency-Key": "forget-1"}
    first = ok(client.delete(f"/v1/cards/{taipei['card_id']}", headers=headers), 202)
    head = _head(services)
    again = ok(client.delete(f"/v1/cards/{taipei['card_id']}", headers=headers), 202)
    assert (again["erasure_id"], again["replayed"]) == (first["erasure_id"], True)
    assert _head(services) == head


# --- REST: export -----------------------------------------------------------------------------


def test_export_streams_json_lines_with_both_timelines_edges_and_tombstones(
        client: TestClient, services: Services, admin_db: Database, me: Caller) -> None:
    taipei, kyoto = _moved(client, services, admin_db, me)
    note = ok(client.post("/v1/memories", headers=me.headers, json={
        "kind": "knowledge", "memory_type": "note", "title": "JWT", "agent_id": "scribe",
        "content": "Tokens expire after an hour", "tags": ["jwt"]}))
    promise = ok(client.post("/v1/memories", headers=me.headers, json={
        "kind": "state", "memory_type": "commitment", "owner": "henry",
        "content": "Send the report", "due_at": (datetime.now(UTC) + timedelta(days=3)).isoformat()}))
    erased = ok(client.delete(f"/v1/cards/{taipei['card_id']}", headers=me.headers), 202)
    project(services, admin_db)
    response = client.get("/v1/export", headers=me.headers,
                          params={"min_position": erased["position"]})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/x-ndjson")
    assert response.headers["palimpsest-stale-by"] == "0"
    assert "Taipei" not in response.text
    lines = {line["card_id"]: line for line in _lines(response.text)}
    assert set(lines) == {taipei["card_id"], kyoto["card_id"], note["card_id"], promise["card_id"]}

    current = lines[kyoto["card_id"]]
    assert (current["content"], current["subject"], current["label"]) == ("Kyoto", "user", "address")
    assert current["erased"] is False and current["current"] is True
    assert current["valid_from"] and current["valid_to"] is None and current["recorded_at"]
    assert current["provenance"]["session_id"] == "s2"
    assert [v["content"] for v in current["versions"]] == ["Kyoto"]
    assert {"valid_from", "valid_to", "known_from", "known_to"} <= set(current["versions"][0])
    assert {(e["edge"], e["src_id"], e["dst_id"]) for e in current["edges"]} == {
        ("supersedes", kyoto["card_id"], taipei["card_id"])}

    tomb = lines[taipei["card_id"]]
    assert tomb["erased"] is True and tomb["erased_at"]
    assert all(tomb[name] is None for name in ("content", "title", "subject", "label", "owner"))
    assert tomb["tags"] == [] and all(v["content"] is None for v in tomb["versions"])
    assert tomb["valid_to"] == current["valid_from"]  # closed by Kyoto: both timelines stay
    assert tomb["recorded_at"] and tomb["versions"][0]["known_from"]
    assert tomb["edges"] == current["edges"]
    assert tomb["provenance"]["session_id"] == "s1"

    knowledge = lines[note["card_id"]]
    assert (knowledge["title"], knowledge["tags"]) == ("JWT", ["json web token"])
    assert knowledge["provenance"]["agent_id"] == "scribe"
    henry = _lines(ok_text(client.get("/v1/export", params={"subject": "henry"},
                                      headers=me.headers)))
    assert [line["card_id"] for line in henry] == [promise["card_id"]]


def ok_text(response: Any) -> str:
    assert response.status_code == 200, response.text
    return str(response.text)


def test_export_is_refused_before_a_byte_is_streamed(client: TestClient, services: Services,
                                                     me: Caller) -> None:
    missing = client.get("/v1/export")
    assert missing.status_code == 401 and missing.json()["error"]["code"] == "unauthenticated"
    writer = Caller(services, me.tenant, "memory:write")
    assert client.get("/v1/export", headers=writer.headers).status_code == 403
    nul = client.get("/v1/export", params={"subject": "a\x00b"}, headers=me.headers)
    assert nul.status_code == 422 and nul.json()["error"]["code"] == "invalid_text"
    assert ok_text(client.get("/v1/export", headers=me.headers)) == ""  # no cards: no lines


# --- MCP ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mcp(services: Services) -> Iterator[Served]:
    with Served(services) as running:
        yield running


def test_forget_and_export_through_mcp(client: TestClient, services: Services,
                                       admin_db: Database, me: Caller, mcp: Served) -> None:
    taipei, kyoto = _moved(client, services, admin_db, me)

    async def scenario(session: ClientSession) -> dict[str, Any]:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        with pytest.raises(ToolFailed) as refused:
            await call(session, "forget", {"unit": "tenant"})
        forgot = await call(session, "forget", {"unit": "card", "card_id": taipei["card_id"],
                                                "basis": "user-request"})
        again = await call(session, "forget", {"unit": "card", "card_id": taipei["card_id"]})
        return {"tools": tools, "refused": refused.value.error, "forgot": forgot, "again": again}

    done = mcp.run(me.secret, scenario)
    hints = done["tools"]["forget"].annotations
    assert (hints.destructive_hint, hints.idempotent_hint, hints.read_only_hint) == (True, True, False)
    assert done["tools"]["export"].annotations.read_only_hint is True
    assert done["refused"]["code"] == "permission_denied"
    assert done["forgot"]["card_ids"] == [taipei["card_id"]] and done["forgot"]["keys_destroyed"] >= 1
    assert done["again"]["keys_destroyed"] == 0  # nothing left to destroy
    project(services, admin_db)

    async def export(session: ClientSession) -> list[dict[str, Any]]:
        return [await call(session, "export", {"limit": 1}),
                await call(session, "export", {"subject": "user"})]

    first, everything = mcp.run(me.secret, export)
    assert (first["exported"], first["left_off"]) == (1, 1) and "1 more" in first["note"]
    assert len(_lines(first["text"])) == 1
    lines = {line["card_id"]: line for line in _lines(everything["text"])}
    assert everything["left_off"] == 0 and everything["note"] is None
    assert lines[taipei["card_id"]]["erased"] is True and "Taipei" not in everything["text"]
    assert lines[kyoto["card_id"]]["content"] == "Kyoto"


# --- the command line -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(services: Services) -> Iterator[ServedApi]:
    with ServedApi(services) as running:
        yield running


def _run(env: dict[str, str], *args: str, code: int = 0) -> Any:
    result = CliRunner().invoke(cli, list(args), env=env)
    assert result.exit_code == code, (args, result.stdout, result.stderr)
    return result


def test_forget_and_export_over_a_server(client: TestClient, services: Services,
                                         admin_db: Database, me: Caller, served: ServedApi,
                                         tmp_path: Path) -> None:
    taipei, kyoto = _moved(client, services, admin_db, me)
    env = {"PALIMPSEST_URL": served.url, "PALIMPSEST_KEY": me.secret}
    forgot = json.loads(_run(env, "forget", "card", taipei["card_id"], "--reason", "asked",
                             "--basis", "gdpr-17", "--json").stdout)
    assert forgot["card_ids"] == [taipei["card_id"]]
    said = _run(env, "forget", "card", taipei["card_id"]).stdout
    assert said.startswith("erased card: 0 key(s) destroyed")  # forgotten before: idempotent
    unsure = json.loads(_run(env, "forget", "tenant", "--json", code=2).stdout)
    assert unsure["error"]["code"] == "usage_error" and "--yes" in unsure["error"]["message"]
    refused = json.loads(_run(env, "forget", "tenant", "--yes", "--json", code=2).stdout)
    assert refused["error"]["code"] == "permission_denied"
    project(services, admin_db)

    output = tmp_path / "export.jsonl"
    summary = json.loads(_run(env, "export", "--output", str(output), "--json").stdout)
    assert summary == {"exported": 2, "erased": 1, "output": str(output)}
    lines = {line["card_id"]: line for line in _lines(output.read_text("utf-8"))}
    assert lines[taipei["card_id"]]["erased"] and lines[kyoto["card_id"]]["content"] == "Kyoto"
    assert not (tmp_path / "export.jsonl.partial").exists()
    printed = _lines(_run(env, "export", "--subject", "user").stdout)
    assert [line["card_id"] for line in printed] == list(lines)


def test_forget_and_export_locally(client: TestClient, services: Services, admin_db: Database,
                                   me: Caller, pg_settings: Settings) -> None:
    taipei, kyoto = _moved(client, services, admin_db, me)
    env = {"PALIMPSEST_DATA_DIR": str(pg_settings.data_dir), "PALIMPSEST_AUTO_BOOTSTRAP": "false",
           "PALIMPSEST_PERSISTENCE": "postgres", "PALIMPSEST_URL": "http://127.0.0.1:9",
           "XDG_RUNTIME_DIR": os.environ.get("XDG_RUNTIME_DIR", "/tmp")}
    forgot = json.loads(_run(env, "forget", "slot", "--subject", "user", "--label", "address",
                             "--tenant", me.tenant, "--by", "dpo", "--json").stdout)
    assert set(forgot["card_ids"]) == {taipei["card_id"], kyoto["card_id"]}
    other = json.loads(_run(env, "forget", "card", kyoto["card_id"], "--tenant", new_tenant(),
                            "--json", code=2).stdout)
    assert other["error"]["code"] == "card_not_found"
    project(services, admin_db)
    lines = _lines(_run(env, "export", "--tenant", me.tenant).stdout)
    assert {line["card_id"] for line in lines} == {taipei["card_id"], kyoto["card_id"]}
    assert all(line["erased"] and line["content"] is None for line in lines)
    listed = ok(client.get("/v1/erasures", headers=me.headers))["erasures"]
    assert [(e["unit"], e["requested_by"]) for e in listed] == [("slot", "dpo")]
