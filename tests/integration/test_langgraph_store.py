"""The LangGraph store (``palimpsest_client.langgraph.PalimpsestStore``) held to the contract the
``BaseStore`` documentation states, on LangGraph's reference ``InMemoryStore`` and on a real
Palimpsest server alike (:mod:`tests.integration.store_contract`): every shared test runs on both.
What legitimately differs — a search's order, the times, the third change queued, a filter on a
missing field, what an erasure leaves — is asserted per store, as ``docs/langgraph.md`` lists it.
Then a ``StateGraph`` whose nodes use the injected store, the docs' examples, and the import."""

from __future__ import annotations

import asyncio
import contextlib
import io
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore, GetOp, ListNamespacesOp, PutOp, SearchOp
from palimpsest_client import Client, PermissionDeniedError
from palimpsest_client.langgraph import PalimpsestStore, decode_label, encode_key, encode_namespace

from infra.postgres import Database
from infra.settings import Settings
from tests.docs_examples import ROOT, examples, promised
from tests.integration.store_contract import SCOPES_ALL, StoreServer, reference_store, snapshot
from tests.support import new_tenant

pytestmark = pytest.mark.integration

Stores = Callable[..., BaseStore]
DOCS = ROOT / "docs" / "langgraph.md"


@pytest.fixture(scope="module")
def server(pg_settings: Settings, admin_db: Database) -> Iterator[StoreServer]:
    made = StoreServer(pg_settings.model_copy(update={"projector_embeddings": False}), admin_db)
    yield made
    made.close()


@pytest.fixture(params=["memory", "palimpsest"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def stores(kind: str, server: StoreServer) -> Iterator[Stores]:
    """Each call: an empty store (on the server, a new tenant's), with ``scopes`` for its key."""
    made: list[PalimpsestStore] = []

    def new(scopes: tuple[str, ...] = SCOPES_ALL, **options: Any) -> BaseStore:
        if kind == "memory":
            return reference_store()
        made.append(PalimpsestStore(server.url, server.key(new_tenant(), *scopes), **options))
        return made[-1]

    yield new
    for store in made:
        store.close()


@pytest.fixture
def store(stores: Stores) -> BaseStore:
    return stores()


def keys(items: list[Any]) -> set[str]:
    return {item.key for item in items}


# ---- the contract: both stores -----------------------------------------------------------------

def test_put_get_delete_and_put_again(store: BaseStore) -> None:
    store.put(("docs",), "report", {"memory": "Will likes ai"})
    item = store.get(("docs",), "report")
    assert snapshot(item) == (("docs",), "report", {"memory": "Will likes ai"})
    assert item is not None and item.created_at <= item.updated_at
    assert store.get(("docs",), "missing") is None and store.get(("nowhere",), "report") is None
    store.delete(("docs",), "report")
    assert store.get(("docs",), "report") is None and store.search(("docs",)) == []
    store.delete(("docs",), "report")  # deleting what is gone is no error
    store.delete(("docs",), "never")
    store.put(("docs",), "report", {"memory": "Will likes go"})
    assert snapshot(store.get(("docs",), "report")) == (("docs",), "report", {"memory": "Will likes go"})
    store.put(("docs",), "report", None)  # type: ignore[arg-type]  # a put of None deletes
    assert store.get(("docs",), "report") is None


def test_an_overwrite_replaces_the_value_also_by_case_or_spacing_alone(store: BaseStore) -> None:
    for value in ({"theme": "dark"}, {"theme": "light"}, {"theme": "Light"}):
        store.put(("prefs",), "ui", value)
        assert store.get(("prefs",), "ui").value == value  # type: ignore[union-attr]
    assert [i.value for i in store.search(("prefs",))] == [{"theme": "Light"}]
    store.put(("prefs",), "note", {"text": "a b"})
    store.put(("prefs",), "note", {"text": "a  b"})
    assert store.get(("prefs",), "note").value == {"text": "a  b"}  # type: ignore[union-attr]


def test_values_round_trip_as_json(store: BaseStore) -> None:
    value = {"name": "Ann", "age": 41, "ratio": 0.25, "ok": True, "none": None,
             "tags": ["a", "b"], "nested": {"deep": {"list": [1, {"x": "y"}]}}}
    store.put(("people",), "ann", value)
    assert store.get(("people",), "ann").value == value  # type: ignore[union-attr]


def test_namespaces_of_several_depths(store: BaseStore) -> None:
    spaces = [("d",), ("d", "e"), ("d", "e", "f")]
    for depth, namespace in enumerate(spaces, 1):
        store.put(namespace, "k", {"depth": depth})
    for depth, namespace in enumerate(spaces, 1):
        assert snapshot(store.get(namespace, "k")) == (namespace, "k", {"depth": depth})
    for depth, namespace in enumerate(spaces):
        found = store.search(namespace)
        assert {(i.namespace, i.value["depth"]) for i in found} == {
            (ns, d) for d, ns in enumerate(spaces[depth:], depth + 1)}


def test_search_without_a_query_lists_the_prefix(store: BaseStore) -> None:
    for name in ("a", "b", "c"):
        store.put(("notes", "u1"), name, {"text": name})
    store.put(("notes", "u2"), "a", {"text": "other"})
    found = store.search(("notes", "u1"))
    assert {(i.namespace, i.key, i.value["text"]) for i in found} == {
        (("notes", "u1"), n, n) for n in ("a", "b", "c")}
    assert all(i.score is None for i in found)
    assert len(store.search(("notes",))) == 4 and len(store.search(())) == 4


def test_search_with_a_query_ranks_the_matching_item_first(store: BaseStore) -> None:
    store.put(("kb",), "pizza", {"text": "I love pizza with olives"})
    store.put(("kb",), "train", {"text": "The train leaves at noon"})
    store.put(("kb",), "quantum", {"text": "Quantum computing basics"})
    store.put(("elsewhere",), "pizza", {"text": "pizza pizza pizza"})
    found = store.search(("kb",), query="pizza")
    assert found[0].key == "pizza" and found[0].score is not None
    assert all(i.namespace == ("kb",) for i in found)
    assert keys(store.search(("kb",), query="pizza", filter={"text": "I love pizza with olives"})) == {
        "pizza"}


FILTERS: list[tuple[dict[str, Any], set[str]]] = [
    ({"color": "red"}, {"a", "c"}),
    ({"color": {"$eq": "red"}}, {"a", "c"}),
    ({"color": {"$ne": "red"}}, {"b", "d"}),
    ({"score": {"$gt": 3.0}}, {"a", "c"}),
    ({"score": {"$gte": 3.0}}, {"a", "b", "c"}),
    ({"score": {"$lt": 3.0}}, {"d"}),
    ({"score": {"$lte": 3.0}}, {"b", "d"}),
    ({"score": {"$gte": 2.5, "$lt": 4.9}}, {"a", "b"}),
    ({"color": "red", "size": {"$gt": 2}}, {"a"}),
    ({"tags": ["x"]}, {"a"}),
    ({"meta": {"k": 1}}, {"a", "c"}),
    ({"color": "purple"}, set()),
]


def test_every_filter_operator(store: BaseStore) -> None:
    rows = {"a": ("red", 4.5, 3, ["x"], 1), "b": ("blue", 3.0, 5, ["x", "y"], 2),
            "c": ("red", 5.0, 1, [], 1), "d": ("green", 2.0, 5, ["z"], 3)}
    for key, (color, score, size, tags, k) in rows.items():
        store.put(("f",), key, {"color": color, "score": score, "size": size, "tags": tags,
                                "meta": {"k": k}})
    for condition, expected in FILTERS:
        assert keys(store.search(("f",), filter=condition)) == expected, condition


def test_limit_and_offset_page_through_once(store: BaseStore) -> None:
    for n in range(5):
        store.put(("p",), f"k{n}", {"n": n, "even": n % 2 == 0})
    pages = [store.search(("p",), limit=2, offset=offset) for offset in (0, 2, 4)]
    assert [len(page) for page in pages] == [2, 2, 1]
    assert set().union(*map(keys, pages)) == {f"k{n}" for n in range(5)}
    assert store.search(("p",), limit=2, offset=5) == []
    evens = [store.search(("p",), filter={"even": True}, limit=1, offset=o) for o in range(4)]
    assert [len(page) for page in evens] == [1, 1, 1, 0]
    assert set().union(*map(keys, evens)) == {"k0", "k2", "k4"}


SPACES = [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f"),
          ("a", "c", "f"), ("ab", "x"), ("z",)]


def test_list_namespaces_with_prefix_suffix_depth_and_wildcards(store: BaseStore) -> None:
    for namespace in SPACES:
        store.put(namespace, "k", {"v": 1})
    listed = store.list_namespaces
    assert listed() == sorted(SPACES)
    assert listed(prefix=("a",)) == sorted(SPACES[:5])
    assert listed(prefix=("a", "b"), max_depth=3) == [("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f")]
    assert listed(suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f")]
    assert listed(prefix=("a", "*", "f")) == [("a", "b", "f"), ("a", "c", "f")]
    assert listed(suffix=("d", "*")) == [("a", "b", "d", "e"), ("a", "b", "d", "i")]
    assert listed(prefix=("*", "b")) == sorted(SPACES[:4])
    assert listed(prefix=("a",), suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f")]
    assert listed(max_depth=1) == [("a",), ("ab",), ("z",)]
    assert listed(limit=2, offset=1) == sorted(SPACES)[1:3]


def test_a_prefix_matches_whole_segments(store: BaseStore) -> None:
    store.put(("a",), "k", {"v": "a"})
    store.put(("a", "b"), "k", {"v": "a/b"})
    store.put(("ab",), "k", {"v": "ab"})
    store.put(("ab", "c"), "k", {"v": "ab/c"})
    assert {i.value["v"] for i in store.search(("a",))} == {"a", "a/b"}
    assert {i.value["v"] for i in store.search(("a",), query="ab")} <= {"a", "a/b"}
    assert store.list_namespaces(prefix=("a",)) == [("a",), ("a", "b")]


def test_keys_that_differ_only_by_case_hyphen_or_space_stay_apart(store: BaseStore) -> None:
    names = ["Color", "color", "COLOR", "co-lor", "co lor", "co_lor", " color", "color "]
    for i, name in enumerate(names):
        store.put(("k",), name, {"i": i})
    for i, name in enumerate(names):
        assert snapshot(store.get(("k",), name)) == (("k",), name, {"i": i})
    assert keys(store.search(("k",), limit=20)) == set(names)


def test_unicode_and_reserved_characters_round_trip(store: BaseStore) -> None:
    cjk, odd = ("使用者", "偏好設定"), ("a:b", "50%", "x/y", " pad ", "tab\there")
    store.put(cjk, "喜歡的食物", {"食物": "牛肉麵", "emoji": "🍜"})
    store.put(odd, "k:1/2% Ünïcode", {"ok": True})
    assert snapshot(store.get(cjk, "喜歡的食物")) == (cjk, "喜歡的食物", {"食物": "牛肉麵", "emoji": "🍜"})
    assert snapshot(store.get(odd, "k:1/2% Ünïcode")) == (odd, "k:1/2% Ünïcode", {"ok": True})
    assert [i.key for i in store.search(("使用者",))] == ["喜歡的食物"]
    assert store.list_namespaces(prefix=("a:b",)) == [odd]
    assert store.list_namespaces(prefix=("a",)) == []
    assert sorted(store.list_namespaces()) == sorted([cjk, odd])


def test_another_tenants_items_never_appear(stores: Stores) -> None:
    mine, theirs = stores(), stores()
    mine.put(("shared",), "k", {"owner": "me"})
    theirs.put(("shared",), "k", {"owner": "them"})
    theirs.put(("theirs",), "only", {"owner": "them"})
    assert mine.list_namespaces() == [("shared",)]  # first: InMemoryStore lists a namespace once read
    assert mine.get(("shared",), "k").value == {"owner": "me"}  # type: ignore[union-attr]
    assert theirs.get(("shared",), "k").value == {"owner": "them"}  # type: ignore[union-attr]
    assert mine.get(("theirs",), "only") is None
    assert [i.value for i in mine.search(())] == [{"owner": "me"}]
    assert {i.value["owner"] for i in mine.search((), query="them")} <= {"me"}


def test_a_batch_reads_before_it_writes_and_the_last_put_wins(store: BaseStore) -> None:
    ns = ("batch",)
    results = store.batch([ListNamespacesOp(), PutOp(ns, "k", {"v": 1}), GetOp(ns, "k"),
                           PutOp(ns, "k", {"v": 2}), SearchOp(ns)])
    assert results == [[], None, None, None, []]
    assert store.get(ns, "k").value == {"v": 2}  # type: ignore[union-attr]


def test_the_async_variants(store: BaseStore) -> None:
    async def main() -> None:
        await store.aput(("as", "u1"), "a", {"text": "async pizza"})
        await store.aput(("as", "u2"), "b", {"text": "async train"})
        assert snapshot(await store.aget(("as", "u1"), "a")) == (("as", "u1"), "a", {"text": "async pizza"})
        assert keys(await store.asearch(("as",))) == {"a", "b"}
        assert (await store.asearch(("as",), query="pizza"))[0].key == "a"
        assert keys(await store.asearch(("as",), filter={"text": "async train"})) == {"b"}
        assert await store.alist_namespaces(prefix=("as",)) == [("as", "u1"), ("as", "u2")]
        got, found, _ = await store.abatch([GetOp(("as", "u2"), "b"), SearchOp(("as", "u1")),
                                            PutOp(("as", "u1"), "c", {"text": "c"})])
        assert snapshot(got) == (("as", "u2"), "b", {"text": "async train"})  # type: ignore[arg-type]
        assert keys(found) == {"a"}  # type: ignore[arg-type]
        await store.adelete(("as", "u1"), "a")
        assert await store.aget(("as", "u1"), "a") is None
        assert keys(await store.asearch(("as", "u1"))) == {"c"}

    async def again() -> None:  # another event loop: the store's async client is that loop's
        assert keys(await store.asearch(("as",))) == {"b", "c"}

    asyncio.run(main())
    asyncio.run(again())


# ---- what differs, per store -------------------------------------------------------------------

def test_the_third_change_within_30_days_is_queued_on_palimpsest(kind: str, stores: Stores) -> None:
    store = stores()
    for n in range(1, 5):  # a first value, then three changes
        store.put(("q",), "k", {"n": n})
    kept = 3 if kind == "palimpsest" else 4  # the third change waits for a person
    assert store.get(("q",), "k").value == {"n": kept}  # type: ignore[union-attr]
    if kind == "memory":
        return
    assert isinstance(store, PalimpsestStore)
    cases = Client(store.url, store.key).arbitrations()["cases"]
    assert [(c["subject"], c["label"], c["proposed_value"]) for c in cases] == [("q", "k", '{"n": 4}')]
    settling = stores(accept_queued=True)
    for n in range(1, 5):
        settling.put(("q",), "k", {"n": n})
    assert settling.get(("q",), "k").value == {"n": 4}  # type: ignore[union-attr]
    refused = stores(("memory:read", "memory:write"), accept_queued=True)
    for n in range(1, 4):
        refused.put(("q",), "k", {"n": n})
    with pytest.raises(PermissionDeniedError, match="memory:admin"):
        refused.put(("q",), "k", {"n": 4})


def test_a_put_after_a_delete_starts_the_item_afresh(kind: str, stores: Stores) -> None:
    store = stores()
    for n in range(1, 3):
        store.put(("e",), "k", {"n": n})
    store.delete(("e",), "k")
    assert store.get(("e",), "k") is None
    # InMemoryStore still lists the emptied namespace; an erased slot keeps no subject to list
    assert store.list_namespaces() == ([] if kind == "palimpsest" else [("e",)])
    store.put(("e",), "k", {"n": 3})  # would be the third change in 30 days, but the slot is new
    store.put(("e",), "k", {"n": 4})
    assert snapshot(store.get(("e",), "k")) == (("e",), "k", {"n": 4})
    assert store.list_namespaces() == [("e",)]


def test_times_of_an_item(kind: str, store: BaseStore) -> None:
    store.put(("t",), "k", {"v": 1})
    first = store.get(("t",), "k")
    store.put(("t",), "k", {"v": 2})
    second = store.get(("t",), "k")
    assert first is not None and second is not None and second.updated_at > first.updated_at
    if kind == "palimpsest":  # when the slot's first card was recorded
        assert second.created_at == first.created_at == first.updated_at
    else:  # InMemoryStore makes the item again
        assert second.created_at > first.created_at
    store.put(("t",), "k", {"v": 2})  # the same value again
    third = store.get(("t",), "k")
    assert third is not None
    assert (third.updated_at == second.updated_at) == (kind == "palimpsest")


def test_the_order_of_a_search_without_a_query(kind: str, store: BaseStore) -> None:
    for name in ("first", "second", "third"):
        store.put(("o",), name, {"v": name})
    store.put(("o",), "first", {"v": "again"})
    order = [i.key for i in store.search(("o",))]
    expected = ["first", "third", "second"] if kind == "palimpsest" else ["first", "second", "third"]
    assert order == expected  # the latest recorded first / the order of first insertion


def test_a_range_filter_on_a_missing_field(kind: str, store: BaseStore) -> None:
    store.put(("m",), "k", {"v": 1})
    if kind == "palimpsest":
        assert store.search(("m",), filter={"weight": {"$gt": 1}}) == []
    else:
        with pytest.raises(TypeError):
            store.search(("m",), filter={"weight": {"$gt": 1}})


# ---- Palimpsest only -----------------------------------------------------------------------------

@pytest.fixture
def palimpsest(server: StoreServer) -> Iterator[PalimpsestStore]:
    with PalimpsestStore(server.url, server.key(new_tenant(), *SCOPES_ALL)) as made:
        yield made


def test_items_are_state_cards_with_both_timelines(palimpsest: PalimpsestStore) -> None:
    palimpsest.put(("users", "a:b"), "Favourite-Food", {"food": "ramen"})
    between = datetime.now(UTC)
    palimpsest.put(("users", "a:b"), "Favourite-Food", {"food": "soba"})
    with Client(palimpsest.url, palimpsest.key) as memory:
        cards = memory.cards(subjects=["users:a%3Ab"], include_superseded=True)["cards"]
    assert {(c["kind"], c["memory_type"], c["scope"], c["cardinality"], c["label"]) for c in cards} == {
        ("state", "fact", "personal", "single_value", "%46avourite%2d%46ood")}
    assert [(c["content"], c["superseded"]) for c in cards] == [('{"food": "soba"}', False),
                                                                 ('{"food": "ramen"}', True)]
    then = palimpsest.get_as_of(("users", "a:b"), "Favourite-Food", valid_at=between, known_at=between)
    assert then is not None and then.value == {"food": "ramen"}
    assert palimpsest.get_as_of(("users", "a:b"), "Favourite-Food", known_at=between).value == {  # type: ignore[union-attr]
        "food": "ramen"}
    assert palimpsest.get_as_of(("users", "a:b"), "Favourite-Food", valid_at=between).value == {  # type: ignore[union-attr]
        "food": "ramen"}
    assert asyncio.run(palimpsest.aget_as_of(("users", "a:b"), "Favourite-Food",
                                             known_at=datetime(2000, 1, 1, tzinfo=UTC))) is None


def test_a_key_the_server_holds_multi_value_keeps_one_value(palimpsest: PalimpsestStore) -> None:
    palimpsest.put(("me",), "skills", {"list": ["python"]})
    palimpsest.put(("me",), "skills", {"list": ["python", "go"]})
    assert palimpsest.get(("me",), "skills").value == {"list": ["python", "go"]}  # type: ignore[union-attr]
    assert [i.value for i in palimpsest.search(("me",))] == [{"list": ["python", "go"]}]


def test_cards_of_other_writers_read_as_content(palimpsest: PalimpsestStore) -> None:
    with Client(palimpsest.url, palimpsest.key) as memory:
        written = memory.remember(kind="state", memory_type="fact", subject="user", label="address",
                                  content="Kyoto")
        memory.facts("user", min_position=written["position"])  # another writer's: wait for it
    assert palimpsest.get(("user",), "address").value == {"content": "Kyoto"}  # type: ignore[union-attr]


def test_a_store_of_a_project_keeps_to_its_scope(server: StoreServer) -> None:
    key = server.key(new_tenant())
    with PalimpsestStore(server.url, key) as personal, \
            PalimpsestStore(server.url, key, scope="project", project_id="p1") as project:
        personal.put(("notes",), "k", {"where": "personal"})
        project.put(("notes",), "k", {"where": "project"})
        project.put(("notes",), "only", {"where": "project"})
        assert personal.get(("notes",), "k").value == {"where": "personal"}  # type: ignore[union-attr]
        assert project.get(("notes",), "k").value == {"where": "project"}  # type: ignore[union-attr]
        assert keys(personal.search(("notes",))) == {"k"}
        assert {i.value["where"] for i in project.search(("notes",), query="project")} == {"project"}
        project.delete(("notes",), "k")
        assert personal.get(("notes",), "k") is not None and project.get(("notes",), "k") is None


def test_delete_without_write_scope_is_refused_plainly(server: StoreServer) -> None:
    tenant = new_tenant()
    with PalimpsestStore(server.url, server.key(tenant)) as writer, \
            PalimpsestStore(server.url, server.key(tenant, "memory:read")) as reader:
        writer.put(("x",), "k", {"v": 1})
        assert writer.get(("x",), "k") is not None  # the writer's read waits for its write
        assert reader.get(("x",), "k").value == {"v": 1}  # type: ignore[union-attr]
        with pytest.raises(PermissionDeniedError, match="memory:write"):
            reader.delete(("x",), "k")


def test_the_mapping_is_exact_and_in_the_servers_normal_form() -> None:
    for key in ["address", "Color", "co-lor", "co lor", " x", "a/b", "50%", "İstanbul", "ΣΑΣ", "é\n"]:
        label = encode_key(key)
        assert decode_label(label) == key and label == "_".join(label.strip().lower().split())
        assert "-" not in label and "/" not in label
    assert encode_key("job_title") == "job_title" and encode_key("喜歡的食物") == "喜歡的食物"
    assert encode_namespace(("users", "a:b", "50%", "x/y")) == "users:a%3Ab:50%25:x%2Fy"
    assert encode_namespace((" a", "b ")) == "%20a:b%20"


# ---- a graph, the docs, the import ---------------------------------------------------------------

class Turn(TypedDict):
    user: str
    said: str
    recalled: list[str]


def test_a_state_graph_writes_and_reads_through_the_injected_store(store: BaseStore) -> None:
    def remember(state: Turn, runtime: Runtime) -> dict[str, Any]:
        assert runtime.store is not None
        runtime.store.put(("memories", state["user"]), f"m{len(state['said'])}", {"text": state["said"]})
        return {}

    def recall(state: Turn, *, store: BaseStore) -> dict[str, Any]:
        return {"recalled": sorted(i.value["text"] for i in store.search(("memories", state["user"])))}

    graph = (StateGraph(Turn).add_node("remember", remember).add_node("recall", recall)
             .add_edge(START, "remember").add_edge("remember", "recall").add_edge("recall", END)
             .compile(store=store))
    assert graph.invoke({"user": "u1", "said": "I like ramen", "recalled": []})["recalled"] == [
        "I like ramen"]
    done = asyncio.run(graph.ainvoke({"user": "u1", "said": "I moved to Kyoto", "recalled": []}))
    assert done["recalled"] == ["I like ramen", "I moved to Kyoto"]


def test_the_docs_examples_run_twice(server: StoreServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's examples as ``tests/docs_examples.py`` runs them (each ``print(…)  # shown``
    printed), here in this process against this module's server: twice, in order."""
    monkeypatch.setenv("PALIMPSEST_URL", server.url)
    monkeypatch.setenv("PALIMPSEST_KEY", server.key(new_tenant(), *SCOPES_ALL))
    found = [e for e in examples(DOCS) if e.language == "python"]
    assert len(found) >= 4 and all(promised(e) for e in found)
    for _ in range(2):
        for example in found:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(example.code, example.where(), "exec"), {"__name__": "__main__"})
            printed = iter(line.strip() for line in out.getvalue().splitlines())
            assert [p for p in promised(example) if p not in printed] == [], (example.where(), out.getvalue())


def test_importing_the_store_loads_nothing_of_the_server() -> None:
    code = ("import sys, palimpsest_client.langgraph\n"
            "server = {'services', 'domain', 'infra', 'projections', 'psycopg', 'fastapi', 'faust'}\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in server))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          timeout=120)
    assert done.stdout.strip() == "[]"

