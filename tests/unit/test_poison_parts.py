"""The pure parts of parking poison events (decision 0007): text made storable, the stored-state
pre-filter that spares the search, the memory sink doing what the database does, the fold
parking an aggregate with its later events."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from projections.cards import operations, storable
from projections.fold import fold
from projections.ops import ChangeCard, PutCard, PutNode
from projections.parking import Undecodable, undecodable
from projections.projector import Delivered, clean_state
from projections.sinks import MemorySink, RowRefusedError

AT = datetime(2026, 6, 1, tzinfo=UTC)


def test_storable_replaces_nul_and_lone_surrogates_only() -> None:
    assert storable("A\x00B\ud800C\udfffD") == "A\ufffdB\ufffdC\ufffdD"
    assert storable("台北 😀 tab\tnewline\n") == "台北 😀 tab\tnewline\n"


@pytest.mark.parametrize(("state", "clean"), [
    (json.dumps({"content": "台北", "n": 1}, ensure_ascii=False).encode(), True),
    (b'{"content":"A\\u0000B"}', False),
    (b'{"content":"\\ud800"}', False),
    (b'{"content":"\\uDFFF"}', False),
    (b'{"content":"\\ud55c"}', False),  # Hangul, not a surrogate: only searched, never missed
    (b"x\x9c compressed", False),
])
def test_the_stored_state_says_when_no_search_is_needed(state: bytes, clean: bool) -> None:
    assert clean_state(state) is clean
    assert clean_state(memoryview(state)) is clean


def test_operations_are_made_storable_unless_known_clean(monkeypatch: pytest.MonkeyPatch) -> None:
    import projections.cards as cards

    row = {"tenant_id": "t", "card_id": uuid.uuid4(), "content": "A\x00B",
           "tags": ["x\ud800"], "terms": ["a\x00b"]}
    monkeypatch.setattr(cards, "project", lambda event: [PutCard(row)])
    (op,) = operations(object())
    assert (op.row["content"], op.row["tags"], op.row["terms"]) == ("A\ufffdB", ["x\ufffd"],
                                                                     ["a\ufffdb"])
    assert operations(object(), clean=True)[0].row["content"] == "A\x00B", "trusted as said"


def test_the_memory_sink_does_what_the_database_does() -> None:
    sink = MemorySink()
    card = {"tenant_id": "t", "card_id": uuid.uuid4(), "kind": "event", "content": "x",
            "recorded_at": AT, "occurred_at": AT}
    sink.apply_all([ChangeCard("t", uuid.uuid4(), AT, {"status": "done"})])  # an UPDATE of no row
    assert sink.cards == {}
    sink.apply_all([PutNode("t", card["card_id"], "card"), PutCard(card)])
    other = uuid.uuid4()
    with pytest.raises(RowRefusedError):  # the key is taken: refused before anything is applied
        sink.apply_all([PutNode("t", other, "card"), PutCard(card)])
    assert ("t", other) not in sink.nodes
    with pytest.raises(ValueError, match="cannot change"):
        sink.apply_all([ChangeCard("t", card["card_id"], AT, {"kind": "state"})])


def test_the_fold_parks_an_aggregate_with_its_later_events() -> None:
    aggregate, other = uuid.uuid4(), uuid.uuid4()
    bad = undecodable(SimpleNamespace(originator_id=aggregate, originator_version=1, topic="x:Y",
                                      state=b'{"tenant_id":"t"}'), ValueError("gone"))
    later = SimpleNamespace(originator_id=aggregate, originator_version=2, tenant_id="t",
                            timestamp=AT)
    fine = SimpleNamespace(originator_id=other, originator_version=1, tenant_id="t",
                           timestamp=AT)
    folded = fold([Delivered(1, bad), Delivered(2, later), Delivered(3, fine)], 3, None)
    assert isinstance(bad, Undecodable) and bad.tenant_id == "t"
    assert [(f.notification_id, f.reason) for f in folded.failures] == [
        (1, "undecodable"), (2, "waiting")]
    assert folded.tracking == {("t", other): 1}, "not past the parked event"
    assert folded.positions == {"t": 3}, "handled: applied or parked"
