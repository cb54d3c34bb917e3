"""Export lines and the edges of forgetting without a database: a tombstone carries no text, lines
are encoded a batch a chunk, ``memory:erase`` is held only by name, a forgotten card leaves the
read-your-writes overlay, and the client streams the export line by line."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from uuid import UUID, uuid4

import httpx
import pytest
from palimpsest_client import Client, NotFoundError
from typer.testing import CliRunner

from domain.errors import PermissionDeniedError
from services.entrypoints.cli import cli
from services.entrypoints.erasure_ops import ForgetInput, forget_scope
from services.entrypoints.operations import OPERATIONS
from services.keys import Principal, check_scopes, require
from services.query.export import PERSONAL, encode, line, ndjson

AT = datetime(2026, 6, 1, 9, tzinfo=UTC)
CARD, SLOT, OTHER = uuid4(), uuid4(), uuid4()


def row(**extra: Any) -> dict[str, Any]:
    """A read-model row as the export query selects it."""
    return {
        "card_id": CARD, "aggregate_id": SLOT, "kind": "state", "memory_type": "fact",
        "scope": "personal", "project_id": None, "group_id": None, "perspective": "mine",
        "subject": "媽媽", "label": "address", "cardinality": "single_value", "item_key": "home",
        "title": None, "content": "台北市", "tags": ["family"], "status": None, "owner": "媽媽",
        "due_at": None, "valid_from": AT, "valid_to": None, "occurred_at": None,
        "recorded_at": AT, "updated_at": AT, "retracted_at": None, "verified_at": None,
        "merged_into": None, "current": True, "erased_at": None, "source": "user_stated",
        "inference_confidence": None, "agent_id": "planner", "session_id": "s1", "turn_id": "3",
        "versions": [{"version": 1, "content": "台北市", "title": None, "status": None,
                      "valid_from": "2026-06-01T09:00:00+00:00", "valid_to": None,
                      "known_from": "2026-06-01T09:00:00+00:00", "known_to": None,
                      "retracted": False, "verified_at": None}],
        "edges": [{"edge": "supersedes", "src_id": str(OTHER), "dst_id": str(CARD),
                   "recorded_at": "2026-06-02T09:00:00+00:00"}],
        **extra}


def test_a_line_holds_both_timelines_its_edges_and_provenance() -> None:
    found = line(row())
    assert (found["content"], found["subject"], found["tags"]) == ("台北市", "媽媽", ["family"])
    assert found["erased"] is False and found["current"] is True
    assert found["provenance"] == {"source": "user_stated", "inference_confidence": None,
                                   "agent_id": "planner", "session_id": "s1", "turn_id": "3"}
    assert found["versions"][0]["known_from"] and found["edges"][0]["edge"] == "supersedes"
    decoded = json.loads(encode(found))
    assert decoded["card_id"] == str(CARD) and decoded["valid_from"] == "2026-06-01T09:00:00+00:00"
    assert "台北市" in encode(found)  # text as it is, not escaped


def test_a_tombstone_keeps_ids_times_and_edges_and_no_text() -> None:
    found = line(row(erased_at=AT))
    assert found["erased"] is True and found["erased_at"] == AT
    assert all(found[name] is None for name in PERSONAL) and found["tags"] == []
    assert [v["content"] for v in found["versions"]] == [None]
    assert found["versions"][0]["known_from"] == "2026-06-01T09:00:00+00:00"
    assert (found["card_id"], found["kind"], found["valid_from"]) == (CARD, "state", AT)
    assert found["edges"] == row()["edges"] and found["provenance"]["session_id"] == "s1"
    text = encode(found)
    assert "台北市" not in text and "媽媽" not in text and "family" not in text


def test_an_erased_version_has_no_text() -> None:
    versions = [{**row()["versions"][0], "erased_at": "2026-06-03T09:00:00+00:00"},
                {**row()["versions"][0], "version": 2, "content": "高雄市", "erased_at": None}]
    found = line(row(versions=versions))
    assert [v["content"] for v in found["versions"]] == [None, "高雄市"]


def test_lines_are_encoded_a_batch_a_chunk() -> None:
    lines = [{"n": n} for n in range(5)]
    chunks = list(ndjson(iter(lines), batch=2))
    assert [chunk.count(b"\n") for chunk in chunks] == [2, 2, 1]
    assert [json.loads(each) for each in b"".join(chunks).splitlines()] == lines
    assert list(ndjson(iter([]))) == []


def test_memory_erase_is_held_only_by_a_key_granted_it() -> None:
    admin = Principal("t", frozenset({"memory:admin"}), "k1")
    eraser = Principal("t", frozenset({"memory:erase"}), "k2")
    with pytest.raises(PermissionDeniedError, match="memory:erase"):
        require(admin, "memory:erase")
    require(eraser, "memory:erase")
    with pytest.raises(PermissionDeniedError):
        require(eraser, "memory:write")
    assert check_scopes(["memory:erase", "memory:read"]) == ("memory:read", "memory:erase")


def test_a_card_or_slot_erasure_needs_write_and_a_subject_session_or_tenant_erase() -> None:
    for unit in ("subject", "session", "tenant"):
        assert forget_scope(ForgetInput(unit=unit)) == "memory:erase"  # type: ignore[arg-type]
    for unit in ("card", "slot"):
        assert forget_scope(ForgetInput(unit=unit)) == "memory:write"  # type: ignore[arg-type]
    forget = OPERATIONS["forget"]
    assert (forget.destructive, forget.idempotent, forget.read_only) == (True, True, False)
    assert OPERATIONS["export"].read_only and OPERATIONS["erasures"].read_only
    assert "requested_by" not in ForgetInput.model_fields  # who asked is the key


def test_a_forgotten_card_leaves_the_overlay() -> None:
    from services.command.commands import WriteResult
    from services.query.pending import PendingWrites
    from services.query.retrieval.scoring import PendingWrite

    pending = PendingWrites()
    kept, gone = (_pending(PendingWrite, card) for card in (uuid4(), uuid4()))
    for write in (kept, gone):
        pending.add("t", WriteResult(outcome="remembered", card_id=write.candidate.card_id,
                                     aggregate_id=uuid4(), position=write.position), write)
    pending.forget("t", [gone.candidate.card_id])
    assert pending.of("t") == [kept]
    pending.forget("t")
    assert pending.of("t") == []


def _pending(cls: Any, card_id: UUID) -> Any:
    candidate = type("Candidate", (), {"card_id": card_id})()
    return cls(position=1, candidate=candidate)


def _served(handler: Any) -> Client:
    return Client("http://memory.test", key="pk_test", transport=httpx.MockTransport(handler))


def test_the_client_forgets_and_streams_the_export_line_by_line() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/v1/erasures":
            return httpx.Response(202, json={"erasure_id": str(uuid4()), "unit": "card",
                                             "keys_destroyed": 1, "card_ids": [str(CARD)]})
        body = b'{"card_id": "a"}\n\n{"card_id": "b", "erased": true}\n'
        return httpx.Response(200, content=body, headers={"content-type": "application/x-ndjson"})

    with _served(handler) as memory:
        assert memory.forget("card", card_id=CARD, reason="asked")["keys_destroyed"] == 1
        lines = list(memory.export(subject="user"))
    assert json.loads(seen[0].content) == {"unit": "card", "card_id": str(CARD), "reason": "asked"}
    assert seen[1].url.params["subject"] == "user"
    assert lines == [{"card_id": "a"}, {"card_id": "b", "erased": True}]


def test_the_clients_export_raises_the_servers_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, json={"error": {"code": "not_found", "message": "no"}})

    with _served(handler) as memory, pytest.raises(NotFoundError):
        list(memory.export())


def test_forgetting_a_tenant_asks_for_yes() -> None:
    done = CliRunner().invoke(cli, ["forget", "tenant", "--json"],
                              env={"PALIMPSEST_URL": "http://127.0.0.1:9"})
    assert done.exit_code == 2
    assert json.loads(done.stdout)["error"]["code"] == "usage_error"
