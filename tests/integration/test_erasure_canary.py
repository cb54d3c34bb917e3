"""The canary story with speakers, told to ``palimpsest serve`` as a platform tells it: two people
in one session (each turn with its ``speaker``), extraction on with the scripted model, a queued
case decided with a note, a multi-value item; then one person is erased as a subject.

Afterwards none of that person's text is in any column of any table of any schema (the event
table's raw bytes and the key table included), in any message of the broker's topics read from
offset 0, in anything serve logged at DEBUG, or in ``projection_failures``; the other person's
turns are still found by search. Served by two HTTP workers, and once more with an extraction in
flight when the erasure lands (the model answers only after it)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

import anyio
import pytest
from palimpsest_client import Client

from infra.postgres import start_embedded
from infra.relay_messages import decode_messages
from tests.fakes.openai_server import FakeOpenAIServer, Reply
from tests.integration.test_mcp import http_session
from tests.integration.test_relay import consume
from tests.integration.test_serve import Served, wait_ready
from tests.integration.test_slot_ids_keyed import dump

pytestmark = pytest.mark.integration



class Person:
    """A speaker whose every text holds a canary of theirs (``zq<name><hex><what>``)."""

    def __init__(self, name: str) -> None:
        self.prefix = f"zq{name}{uuid4().hex[:6]}"
        self.subject = self.prefix.capitalize()

    def canary(self, what: str) -> str:
        return f"{self.prefix}{what}"

    def canaries(self, *names: str) -> list[str]:
        return [self.subject.lower(), *(self.canary(name) for name in names)]


def candidates(text: str) -> Reply:
    """What the scripted model makes of a turn: a fact of the speaker's, and an event, each
    quoting the turn's canary (the last word of its text)."""
    word = text.rsplit(" ", 1)[-1].strip(".!")
    fact = {"kind": "state", "memory_type": "fact", "subject": "user", "label": "favourite_dish",
            "value": f"{word}dish", "cardinality_hint": None, "tags": [], "occurred_at_hint": None,
            "confidence": 0.9, "title": None, "related_concepts": []}
    event = {**fact, "kind": "event", "memory_type": "event", "label": "log",
             "value": f"cooked {word}event", "tags": [f"{word}tag"]}
    return Reply.json({"candidates": [fact, event]})


@pytest.fixture
def llm() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        server.responder = candidates
        yield server


@pytest.fixture
def served(tmp_path: Path, broker: Any, llm: FakeOpenAIServer) -> Iterator[Served]:
    made = Served(tmp_path)
    topics = uuid4().hex[:8]
    made.extra = {"PALIMPSEST_LOG_LEVEL": "DEBUG", "PALIMPSEST_KAFKA_BOOTSTRAP": broker.bootstrap,
                  "PALIMPSEST_KAFKA_TOPIC": f"canary-{topics}",
                  "PALIMPSEST_KAFKA_INGEST_TOPIC": f"canary-ingest-{topics}",
                  "PALIMPSEST_LLM_BASE_URL": llm.base_url, "PALIMPSEST_LLM_MODEL": "scripted",
                  "PALIMPSEST_LLM_BACKOFF_SECONDS": "0.01"}
    yield made
    made.close()


def turn(who: Person, session: str, n: int, said_at: datetime, what: str) -> dict[str, Any]:
    return {"session_id": session, "turn_id": turn_id(who, n), "role": "user",
            "speaker": who.subject, "said_at": said_at.isoformat(),
            "text": f"{who.subject}: we talked about {who.canary(what)}"}


def turn_id(who: Person, n: int) -> str:
    """A caller's turn id: structural, kept in clear, so it holds no canary."""
    return f"{who.subject[2:-6]}-{n}"


def wait_for(condition: Any, what: str, timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < deadline, f"{what} within {timeout} s"
        time.sleep(0.2)
    return found


def settled(client: Client, count: int) -> bool:
    """Whether ``count`` turns are through extraction (applied, skipped, erased or dead)."""
    listed = client.ingestions(limit=1000)["ingestions"]
    return len(listed) >= count and all(i["status"] not in ("received", "extracted") for i in listed)


def found(client: Client, query: str, position: int) -> list[str]:
    return [card.get("value") or "" for card in
            client.search(query, top_n=10, min_position=position)["results"]]


def tell(client: Client, alice: Person, bob: Person, session: str) -> int:
    """The story: turns of both in one session (and Alice's in a second), Alice's facts, a case of
    hers queued and decided with a note, an item of a multi-value slot of hers."""
    said = datetime.now(UTC) - timedelta(days=2)
    turns = [turn(alice, session, 1, said, "turn1"), turn(bob, session, 2, said, "turn2"),
             turn(alice, session, 3, said, "turn3"), turn(bob, session, 4, said, "turn4"),
             turn(alice, f"{session}-b", 5, said, "turn5")]
    client.ingest(turns)
    wait_for(lambda: settled(client, len(turns)), "the turns extracted")
    for n in (1, 2, 3, 4):  # the fourth change in a day is queued for arbitration
        written = client.remember(kind="state", memory_type="fact", subject=alice.subject,
                                  label="clinic", content=alice.canary(f"clinic{n}"))
    cases = wait_for(lambda: client.arbitrations(min_position=written["position"])["cases"],
                     "a case queued")
    client.decide(cases[0]["case_id"], "both_valid", "reviewer", note=alice.canary("note"))
    item = client.remember(kind="state", memory_type="fact", subject=alice.subject, label="skills",
                           cardinality="multi_value", item_key=alice.canary("item"),
                           content=alice.canary("skill"))
    return int(item["position"])


def held(text: str, blobs: list[bytes], canaries: list[str]) -> list[str]:
    lowered = text.lower()
    return [c for c in canaries if c in lowered or any(
        c.encode() in blob or c.capitalize().encode() in blob for blob in blobs)]


def topics(broker: Any, served: Served) -> list[bytes]:
    """Every message of serve's two topics, from offset 0."""
    records = []
    for name in ("PALIMPSEST_KAFKA_TOPIC", "PALIMPSEST_KAFKA_INGEST_TOPIC"):
        records += consume(broker.bootstrap, served.extra[name], at_least=1)
    assert sum(len(decode_messages(r.value)) for r in records) > 0
    return [bytes(r.value) + bytes(r.key or b"") for r in records]


def assert_forgotten(served: Served, broker: Any, alice: Person, bob: Person,
                     canaries: list[str]) -> None:
    admin = start_embedded(served.data)
    text, blobs = dump(admin)
    assert held(text, blobs, canaries) == [], "no table holds the erased person's text"
    assert held(text, [], bob.canaries("turn2")) != [], "the other's turn stays in the read models"
    with admin.connect() as conn:
        failures = conn.execute("SELECT count(*) FROM palimpsest_read.projection_failures").fetchone()
    assert failures == (0,), "nothing parked"
    assert held("", topics(broker, served), canaries + [bob.canary("turn2")]) == [], \
        "the topics carry ciphertext"
    logged = "\n".join(p.read_text(errors="replace") for p in served.root.glob("serve-*.*"))
    assert "DEBUG" in logged, "serve logged at DEBUG"
    assert held(logged, [], canaries) == [], "nothing logged holds the erased person's text"


def asked_over_mcp(started: dict[str, str], query: str) -> str:
    """The MCP ``search`` tool's answer to ``query``, as text."""

    async def ask() -> str:
        async with http_session(started["mcp"], started["key"]) as session:
            result = await session.call_tool("search", {"query": query})
            return json.dumps(result.structured_content)

    return str(anyio.run(ask))


def test_a_speaker_erased_is_forgotten_everywhere_and_the_other_stays_searchable(
        served: Served, broker: Any, llm: FakeOpenAIServer) -> None:
    alice, bob, session = Person("alice"), Person("bob"), f"s-{uuid4().hex[:8]}"
    started = served.start("--workers", "2")
    with Client(started["url"], started["key"], timeout=30) as client:
        wait_ready(client)
        position = tell(client, alice, bob, session)
        assert any(alice.canary("turn1") in v for v in found(client, alice.canary("turn1"), position))
        assert alice.canary("clinic") in asked_over_mcp(started, alice.canary("clinic4")), \
            "an MCP answer streams her text (and a library's debug line would quote it)"
        erased = client.forget("subject", subject=alice.subject, basis="gdpr-17")
        position = int(erased["position"])
        for what in ("turn1", "turn3", "turn5", "clinic4", "skill"):
            answered = found(client, alice.canary(what), position)
            assert not any(alice.canary(what) in v for v in answered), what
        for what in ("turn2", "turn4"):
            assert any(bob.canary(what) in v for v in found(client, bob.canary(what), position)), \
                f"Bob's {what} is still found"
        time.sleep(3)  # the embedder and the vacuum after the erasure's batch
    code, _ = served.stop()
    assert code == 0, served.err()
    names = ("turn1", "turn3", "turn5", "turn1dish", "turn3event", "turn5tag", "clinic1", "clinic4",
             "note", "item", "skill")
    assert_forgotten(served, broker, alice, bob, alice.canaries(*names))


def test_an_extraction_in_flight_when_its_speaker_is_erased_writes_nothing(
        served: Served, broker: Any, llm: FakeOpenAIServer) -> None:
    alice, bob, session = Person("alice"), Person("bob"), f"s-{uuid4().hex[:8]}"
    asked, answer = threading.Event(), threading.Event()

    def slow(text: str) -> Reply:
        if alice.canary("late") in text:
            asked.set()
            answer.wait(60)
        return candidates(text)

    llm.responder = slow
    started = served.start("--no-mcp", "--workers", "2")
    with Client(started["url"], started["key"], timeout=30) as client:
        wait_ready(client)
        said = datetime.now(UTC) - timedelta(hours=1)
        client.ingest([turn(bob, session, 1, said, "turn2"), turn(alice, session, 2, said, "late")])
        assert asked.wait(90), "the model was asked about Alice's turn"
        erased = client.forget("subject", subject=alice.subject, basis="gdpr-17")
        answer.set()
        wait_for(lambda: settled(client, 2), "both turns through extraction")
        statuses = {i["turn_id"]: i["status"] for i in client.ingestions(limit=10)["ingestions"]}
        assert statuses[turn_id(alice, 2)] == "erased", statuses
        assert statuses[turn_id(bob, 1)] == "applied", statuses
        position = int(erased["position"])
        assert not any(alice.canary("late") in v for v in found(client, alice.canary("late"), position))
        client.ingest([turn(bob, session, 3, said, "after")])  # a save after the refused one
        wait_for(lambda: settled(client, 3), "Bob's next turn through extraction")
        time.sleep(3)
    code, _ = served.stop()
    assert code == 0, served.err()
    assert_forgotten(served, broker, alice, bob, alice.canaries("late", "latedish", "lateevent", "latetag"))
    assert live_keys_of(served, alice.subject) == 0, "no key of hers was stored after the refusal"


def live_keys_of(served: Served, subject: str) -> int:
    """The live keys whose subject ref is ``subject``'s (computed with the data folder's master key)."""
    from infra.keyring import load_master_key, subject_ref, subject_ref_key
    from infra.settings import Settings

    master = load_master_key(Settings(data_dir=served.data), keys_exist=lambda: True)
    ref = subject_ref(subject_ref_key(master), "local", subject)
    with start_embedded(served.data).connect() as conn:
        row = conn.execute("SELECT count(*) FROM palimpsest.erasure_keys WHERE material IS NOT NULL "
                           "AND (subject_ref = %s)", (ref,)).fetchone()
    assert row is not None
    return int(row[0])
