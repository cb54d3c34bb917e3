"""mem0's own ``MemoryClient`` (mem0ai, telemetry off, nothing leaves the loopback) against a real
``palimpsest serve`` at ``<url>/mem0``: its relay, projector and extraction worker run, the model
is the scripted local server (tests.fakes.openai_server). Stored as given and extracted, searched
by user, agent and run (never another user's or tenant's), read, updated (the old version kept),
its history on both timelines, erased one by one and by user; a wrong key, a missing scope and a
route we do not offer are refused in mem0's error shape."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import pytest
from psycopg.conninfo import make_conninfo

from infra.postgres import Database
from infra.settings import Settings
from tests.fakes.openai_server import FakeOpenAIServer, Reply
from tests.integration.test_serve import Served
from tests.support import new_tenant

pytestmark = pytest.mark.integration

os.environ.setdefault("MEM0_TELEMETRY", "false")  # before mem0 is imported: no PostHog
os.environ.setdefault("MEM0_DIR", tempfile.mkdtemp(prefix="mem0-"))  # not the user's ~/.mem0
ALL = ("memory:read", "memory:write", "memory:admin", "memory:erase")
#: What the scripted model extracts from a turn: (a word of the turn, the label, the value).
FACTS = [("Paris", "city", "Paris"), ("Berlin", "city", "Berlin"), ("Rome", "city", "Rome")]


def mem0() -> Any:
    import mem0 as package  # imported once the environment above is set

    assert package.memory.telemetry.MEM0_TELEMETRY is False
    return package


def extracted(text: str) -> Reply:
    cards = [{"kind": "state", "memory_type": "fact", "subject": "user", "label": label,
              "value": value, "cardinality_hint": None, "tags": [], "occurred_at_hint": None,
              "confidence": 0.9, "title": None, "related_concepts": []}
             for word, label, value in FACTS if word in text]
    return Reply.json({"candidates": cards})


class World:
    """The server, and keys: two tenants with every scope, one with read and write only."""

    def __init__(self, url: str, keys: dict[str, str], served: Served) -> None:
        self.url, self.keys, self.served = url + "/mem0", keys, served

    def client(self, name: str = "main") -> Any:
        return mem0().MemoryClient(api_key=self.keys[name], host=self.url)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, admin_db: Database, pg_settings: Settings,
          broker: Any) -> Iterator[World]:
    from infra.keyring import MASTER_KEY_FILE, load_master_key
    from services.bootstrap import create_key_store

    load_master_key(pg_settings)  # made by the session's first application, if none was yet
    store = create_key_store(pg_settings)
    try:
        main = new_tenant()
        keys = {name: store.create(tenant, scopes, "mem0 test")[1] for name, tenant, scopes in (
            ("main", main, ALL), ("other", new_tenant(), ALL), ("speaker", new_tenant(), ALL),
            ("no_erase", main, ("memory:read", "memory:write")))}
    finally:
        store.close()
    with FakeOpenAIServer() as model:
        model.responder = extracted
        served = Served(tmp_path_factory.mktemp("mem0"))
        served.extra = {
            "PALIMPSEST_DATABASE_URL": make_conninfo(
                host=admin_db.host, port=admin_db.port, dbname=admin_db.dbname, user=admin_db.user,
                password=admin_db.password or ""),
            "PALIMPSEST_KAFKA_BOOTSTRAP": broker.bootstrap,
            "PALIMPSEST_KAFKA_TOPIC": f"mem0-{uuid4().hex[:8]}",
            "PALIMPSEST_MASTER_KEY": (pg_settings.data_dir / MASTER_KEY_FILE).read_text().strip(),
            "PALIMPSEST_LLM_BASE_URL": model.base_url, "PALIMPSEST_LLM_MODEL": "scripted",
            "PALIMPSEST_LLM_RETRIES": "1", "PALIMPSEST_LLM_BACKOFF_SECONDS": "0.01"}
        try:
            started = served.start("--no-mcp")
            yield World(started["url"], keys, served)
        finally:
            served.close()


def eventually(probe: Callable[[], Any], timeout: float = 60.0) -> Any:
    """``probe()`` once it answers truthy (the read models follow the log within moments)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = probe()
        except Exception as error:  # not projected yet: 404 and the like
            found, last = None, error
        else:
            last = None
        if found:
            return found
        assert time.monotonic() < deadline, f"not so within {timeout} s (last: {last!r})"
        time.sleep(0.2)


def texts(found: dict[str, Any]) -> list[str]:
    return [memory["memory"] for memory in found["results"]]


def stored(client: Any, content: str, **entities: str) -> str:
    answer = client.add([{"role": "user", "content": content}], infer=False, **entities)
    (result,) = answer["results"]
    assert result["event"] == "ADD" and result["memory"] == content, answer
    return str(result["id"])


def test_a_wrong_key_is_refused_when_the_client_is_made(world: World) -> None:
    with pytest.raises(ValueError, match="unknown API key"):
        mem0().MemoryClient(api_key="pk_" + "x" * 43, host=world.url)
    client = world.client()  # its constructor pinged: the key is good
    assert client.org_id == client.project_id and client.org_id.startswith("t-")


def test_stored_as_given_is_read_back_by_id_and_by_user(world: World) -> None:
    client, user = world.client(), f"alice-{uuid4().hex[:6]}"
    answer = client.add([{"role": "system", "content": "You are terse."},
                         {"role": "user", "content": "I am allergic to peanuts"},
                         {"role": "assistant", "content": "Noted: no peanuts in suggestions"}],
                        user_id=user, agent_id="planner", run_id="trip-1", infer=False)
    assert answer["status"] == "SUCCEEDED"
    assert [(r["role"], r["event"]) for r in answer["results"]] == [("user", "ADD"),
                                                                   ("assistant", "ADD")]
    first = answer["results"][0]["id"]
    got = eventually(lambda: client.get(first))
    assert got["memory"] == "I am allergic to peanuts" and got["user_id"] == user
    assert got["agent_id"] == "planner" and got["palimpsest"]["kind"] == "state"
    assert got["palimpsest"]["source"] == "user_stated" and got["hash"]
    listed = eventually(lambda: (found := client.get_all(filters={"user_id": user}))["count"] == 2
                        and found)
    assert sorted(texts(listed)) == ["I am allergic to peanuts", "Noted: no peanuts in suggestions"]
    assert all(m["run_id"] == "trip-1" for m in listed["results"])
    by_run = client.get_all(filters={"AND": [{"user_id": user}, {"run_id": "trip-1"}]})
    assert by_run["count"] == 2
    assert client.get_all(filters={"AND": [{"user_id": user}, {"run_id": "trip-2"}]})["count"] == 0


def test_search_keeps_to_the_user_agent_and_run_asked_and_to_the_key_tenant(world: World) -> None:
    client, other = world.client(), world.client("other")
    alice, bob = f"alice-{uuid4().hex[:6]}", f"bob-{uuid4().hex[:6]}"
    stored(client, "Alice prefers aisle seats on trains", user_id=alice, agent_id="booker",
           run_id="r-a")
    stored(client, "Alice drinks oolong tea", user_id=alice, agent_id="barista")
    stored(client, "Bob prefers window seats on trains", user_id=bob, agent_id="booker")
    stored(other, "Alice of the other tenant prefers standing on trains", user_id=alice)

    def seats(**filters: str) -> list[str]:
        return texts(client.search("seat preference on trains", filters=filters, top_k=10))

    found = eventually(lambda: "Alice drinks oolong tea" in texts(
        client.get_all(filters={"user_id": alice})) and seats(user_id=alice))
    assert "Alice prefers aisle seats on trains" in found
    assert not any("Bob" in t or "other tenant" in t for t in found), found
    assert seats(user_id=bob) == ["Bob prefers window seats on trains"]
    by_agent = seats(agent_id="booker")
    assert {"Alice prefers aisle seats on trains", "Bob prefers window seats on trains"} <= set(
        by_agent) and "Alice drinks oolong tea" not in by_agent
    assert seats(run_id="r-a") == ["Alice prefers aisle seats on trains"]
    tea = texts(client.search("oolong tea", filters={"AND": [{"user_id": alice},
                                                             {"agent_id": "barista"}]}))
    assert tea == ["Alice drinks oolong tea"]
    assert "Alice drinks oolong tea" not in texts(client.search("oolong tea", filters={
        "AND": [{"user_id": alice}, {"agent_id": "booker"}]}))
    theirs = eventually(lambda: texts(other.search("trains", filters={"user_id": alice})))
    assert theirs == ["Alice of the other tenant prefers standing on trains"]
    either = texts(client.search("trains", filters={"OR": [{"user_id": alice}, {"user_id": bob}]}))
    assert {"Alice prefers aisle seats on trains", "Bob prefers window seats on trains"} <= set(either)
    hit = client.search("aisle seats", filters={"user_id": alice}, top_k=1)
    assert hit["results"][0]["score"] > 0 and "alerts" in hit["palimpsest"]


def test_an_update_supersedes_and_history_shows_both_timelines(world: World) -> None:
    client, user = world.client(), f"carol-{uuid4().hex[:6]}"
    old = stored(client, "Carol works at Acme", user_id=user)
    then = datetime.now(UTC).isoformat()
    updated = client.update(old, text="Carol works at Globex")  # projected or not yet
    new = updated["id"]
    assert updated["event"] == "UPDATE" and new != old and updated["palimpsest"]["replaces"] == old
    assert eventually(lambda: client.get(new))["memory"] == "Carol works at Globex"
    before = eventually(lambda: (card := client.get(old))["palimpsest"]["superseded"] and card)
    assert before["memory"] == "Carol works at Acme" and before["palimpsest"]["valid_to"]
    assert texts(client.get_all(filters={"user_id": user})) == ["Carol works at Globex"]
    entries = client.history(new)
    assert [(e["event"], e["old_memory"], e["new_memory"]) for e in entries
            if e["event"] != "NONE"] == [("ADD", None, "Carol works at Acme"),
                                          ("UPDATE", "Carol works at Acme", "Carol works at Globex")]
    closed = [e for e in entries if e["event"] == "NONE"]
    update = next(e for e in entries if e["event"] == "UPDATE")
    assert closed and closed[0]["palimpsest"]["valid_to"] == update["palimpsest"]["valid_from"]
    assert all(e["palimpsest"]["known_from"] and "valid_from" in e["palimpsest"] for e in entries)
    assert client.history(old) == entries  # one lineage, from either end
    asked = "where does Carol work"
    assert texts(client.search(asked, filters={"user_id": user})) == ["Carol works at Globex"]
    past = client.search(asked, filters={"user_id": user}, valid_at=then)
    assert texts(past) == ["Carol works at Acme"] and past["palimpsest"]["valid_at"]
    with pytest.raises(mem0().exceptions.ValidationError, match="no longer current"):
        client.update(old, text="Carol works at Initech")


def test_extraction_supersedes_a_contradicted_fact_and_history_shows_both(world: World) -> None:
    """Two users of one tenant, each speaking for themselves: each one's facts land under their
    own user_id (the turn's speaker), a contradiction supersedes, and neither sees the other's."""
    client = world.client("speaker")
    ada, bo = f"ada-{uuid4().hex[:6]}", f"bo-{uuid4().hex[:6]}"
    first = client.add([{"role": "user", "content": "I live in Paris"}], user_id=ada,
                       run_id="chat-1")
    assert first["status"] == "PENDING" and first["palimpsest"]["extraction"]["on"] is True
    client.add([{"role": "user", "content": "I live in Rome"}], user_id=bo, run_id="chat-3")
    eventually(lambda: texts(client.search("where do I live", filters={"user_id": ada})) ==
               ["Paris"])
    client.add([{"role": "user", "content": "I moved to Berlin last week"}], user_id=ada,
               run_id="chat-2")
    found = eventually(lambda: (hits := client.search(
        "where do I live", filters={"user_id": ada}))["results"] and texts(hits) == ["Berlin"]
        and hits)
    berlin = found["results"][0]
    assert berlin["user_id"] == ada
    assert berlin["palimpsest"]["source"] == "agent_inferred" and berlin["categories"] == [
        "fact", "city"]
    entries = [(e["event"], e["old_memory"], e["new_memory"]) for e in client.history(berlin["id"])
               if e["event"] != "NONE"]
    assert entries == [("ADD", None, "Paris"), ("UPDATE", "Paris", "Berlin")]
    assert texts(client.get_all(filters={"user_id": ada})) == ["Berlin"]
    assert eventually(lambda: texts(client.get_all(filters={"user_id": bo})) == ["Rome"])
    assert "Rome" not in texts(client.search("where do I live", filters={"user_id": ada}))
    by_run = texts(client.search("Berlin", filters={"run_id": "chat-2"}))
    assert "Berlin" in by_run  # the extracted fact (and the turn itself, a conversation record)


def test_delete_erases_one_memory_and_delete_all_a_user(world: World) -> None:
    client, user = world.client(), f"erin-{uuid4().hex[:6]}"
    gone = stored(client, "Erin's locker code is 4411", user_id=user)
    kept = stored(client, "Erin likes climbing", user_id=user)
    eventually(lambda: client.get(gone) and client.get(kept))
    users = client.users()["results"]
    assert {"type": "user", "name": user, "total_memories": 2} in [
        {k: e[k] for k in ("type", "name", "total_memories")} for e in users]
    with pytest.raises(mem0().exceptions.AuthenticationError, match="memory:erase"):
        world.client("no_erase").delete_all(user_id=user)  # a person: memory:erase
    assert "deleted" in world.client("no_erase").delete(gone)["message"]  # a card: memory:write
    eventually(lambda: texts(client.get_all(filters={"user_id": user})) == ["Erin likes climbing"])
    with pytest.raises(mem0().exceptions.MemoryNotFoundError):
        client.get(gone)
    last = client.history(gone)[-1]
    assert last["event"] == "DELETE" and last["new_memory"] is None
    assert all(e["new_memory"] is None for e in client.history(gone))  # erasure is retroactive
    with pytest.raises(mem0().exceptions.ValidationError, match="names no user_id"):
        client.delete_all()
    answer = client.delete_all(user_id=user)
    assert answer["palimpsest"]["cards"] >= 1
    eventually(lambda: client.get_all(filters={"user_id": user})["count"] == 0)
    assert texts(client.search("climbing", filters={"user_id": user})) == []


def test_get_all_answers_pages(world: World) -> None:
    client, user = world.client(), f"gina-{uuid4().hex[:6]}"
    for n in range(3):
        stored(client, f"Gina's note number {n}", user_id=user)
    eventually(lambda: client.get_all(filters={"user_id": user})["count"] == 3)
    first = client.get_all(filters={"user_id": user}, page=1, page_size=2)
    last = client.get_all(filters={"user_id": user}, page=2, page_size=2)
    assert len(first["results"]) == 2 and first["next"] and first["previous"] is None
    assert len(last["results"]) == 1 and last["next"] is None and last["previous"]
    assert sorted(texts(first) + texts(last)) == [f"Gina's note number {n}" for n in range(3)]


def test_routes_we_do_not_offer_answer_a_clear_error(world: World) -> None:
    client = world.client()
    errors = mem0().exceptions
    with pytest.raises(errors.MemoryError, match="does not offer") as refused:
        client.feedback(str(uuid4()), feedback="POSITIVE")
    assert refused.value.details["error"]["code"] == "not_supported"
    with pytest.raises(errors.MemoryError, match="does not offer"):
        client.batch_delete([{"memory_id": str(uuid4())}])
    with pytest.raises(errors.MemoryError, match="metadata is not stored"):
        client.add("I like jazz", user_id="frank", infer=False, metadata={"topic": "music"})
    with pytest.raises(errors.ValidationError, match="'/'"):
        client.add("I like jazz", user_id="a/b", infer=False)
    with pytest.raises(errors.MemoryNotFoundError):
        client.get("not-a-memory-id")


@pytest.fixture(scope="module")
def local(pg_settings: Settings, admin_db: Database) -> Iterator[Any]:
    from fastapi.testclient import TestClient

    from services.bootstrap import build_services
    from services.entrypoints.api import create_api

    made = build_services(pg_settings)
    try:
        with TestClient(create_api(made)) as client:
            _, secret = made.keys.create(new_tenant(), ALL, "mem0 test")
            client.headers["Authorization"] = f"Token {secret}"
            yield client
    finally:
        made.close()


def test_an_inferred_add_without_a_model_says_so(local: Any) -> None:
    answer = local.post("/mem0/v3/memories/add/", json={
        "messages": [{"role": "user", "content": "I live in Lisbon"}], "run_id": "s-1"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["status"] == "SUCCEEDED" and body["results"] == []
    assert "extraction is off" in body["message"] and body["palimpsest"]["extraction"]["on"] is False
    no_key = local.get("/mem0/v1/ping/", headers={"Authorization": ""})
    assert no_key.status_code == 401 and no_key.json()["error"]["code"] == "unauthenticated"
    assert no_key.json()["detail"] and no_key.headers["WWW-Authenticate"] == "Token"
    bearer = local.get("/mem0/v1/ping/", headers={
        "Authorization": local.headers["Authorization"].replace("Token", "Bearer")})
    assert bearer.status_code == 200 and bearer.json()["status"] == "ok"
    once = {"messages": "I keep my passport in the blue drawer", "user_id": "ivy", "infer": False}
    first, again = (local.post("/mem0/v3/memories/add/", json=once,
                               headers={"Idempotency-Key": "ivy-passport"}).json() for _ in "12")
    assert first["results"][0]["id"] == again["results"][0]["id"]
    assert again["results"][0]["palimpsest"]["replayed"] is True
    bad = local.post("/mem0/v3/memories/search/", json=["not", "an", "object"])
    assert bad.status_code == 400 and "JSON object" in bad.json()["detail"]
    assert "/mem0/v3/memories/add/" not in local.get("/openapi.json").json()["paths"]


@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", "/mem0/v3/memories/add/", {"messages": []}),
    ("POST", "/mem0/v3/memories/add/", {"messages": [{"role": "user"}], "user_id": "u"}),
    ("POST", "/mem0/v3/memories/add/", {"messages": "hi", "infer": "yes", "user_id": "u"}),
    ("POST", "/mem0/v3/memories/add/", {"messages": "hi", "infer": False}),
    ("POST", "/mem0/v3/memories/add/", {"messages": "hi", "infer": False, "user_id": 7}),
    ("POST", "/mem0/v3/memories/add/", {"messages": "hi", "infer": False, "user_id": "u",
                                        "timestamp": 1e30}),
    ("POST", "/mem0/v3/memories/add/", {"messages": "hi", "infer": False, "user_id": "u",
                                        "expiration_date": "2020-02-30"}),
    ("POST", "/mem0/v3/memories/add/", {"messages": "hi", "infer": False, "user_id": "u",
                                        "timestamp": 32503680000}),
    ("POST", "/mem0/v3/memories/add/", {"messages": "hi", "infer": False, "filters": {
        "AND": [{"user_id": "a"}, {"user_id": "b"}]}}),
    ("POST", "/mem0/v3/memories/add/", {"messages": "x" * 3_000_000, "infer": False}),
    ("POST", "/mem0/v3/memories/search/", {"query": ""}),
    ("POST", "/mem0/v3/memories/search/", {"query": "q", "top_k": 0}),
    ("POST", "/mem0/v3/memories/search/", {"query": "q", "filters": {"OR": [{"user_id": "a"},
                                                                           {"agent_id": "b"}]}}),
    ("POST", "/mem0/v3/memories/search/", {"query": "q", "filters": {"user_id": "*"}}),
    ("POST", "/mem0/v3/memories/search/", {"query": "q", "filters": {"metadata": {"a": 1}}}),
    ("POST", "/mem0/v3/memories/search/", {"query": "q", "valid_at": "yesterday"}),
    ("POST", "/mem0/v3/memories/search/", {"query": "q", "categories": ["food"]}),
    ("POST", "/mem0/v3/memories/", {"filters": {"created_at": {"gte": "2024-13-01"}}}),
    ("POST", "/mem0/v3/memories/", {"page_size": 0}),
    ("POST", "/mem0/v3/memories/", "not an object"),
    ("PUT", "/mem0/v1/memories/not-an-id/", {"text": "x"}),
    ("PUT", f"/mem0/v1/memories/{uuid4()}/", {"text": "x"}),
    ("PUT", f"/mem0/v1/memories/{uuid4()}/", {"metadata": {"a": 1}}),
    ("GET", f"/mem0/v1/memories/{uuid4()}/history/", None),
    ("DELETE", f"/mem0/v1/memories/{uuid4()}/", None),
    ("DELETE", "/mem0/v1/memories/?filters=%7Bnot-json", None),
    ("DELETE", "/mem0/v2/entities/app/x/", None),
    ("PATCH", "/mem0/api/v1/orgs/organizations/o/projects/p/", {}),
])
def test_a_malformed_or_unknown_request_is_refused_never_a_server_error(
        local: Any, method: str, path: str, body: Any) -> None:
    answer = local.request(method, path, json=body)
    assert answer.status_code < 500 or answer.status_code == 501, answer.text
    said = answer.json()
    assert answer.status_code >= 400 and said["error"]["code"], answer.text
    assert said.get("detail") or answer.status_code == 413  # the body's size: before any route
