"""The mem0 peer benchmark's pure parts: the payload it writes in mem0's shape, the adapter that
puts our embedder behind mem0's calls, and the figures it prints."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from infra.embedders import Embedder
from tests.benchmarks.peers.mem0_peer import summary
from tests.benchmarks.peers.mem0_store import Mem0Embedder, NoLLM, payload

AT = datetime(2026, 1, 5, 9, tzinfo=UTC)


class Lengths(Embedder):
    model, dimensions = "lengths", 2

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [[float(len(text)), 1.0] for text in texts]


def test_the_payload_is_the_one_mem0s_add_writes() -> None:
    found = payload("user address: 台北市大安區", "bench-main", AT, "user address 台北市大安區")
    assert found == {
        "data": "user address: 台北市大安區", "text_lemmatized": "user address 台北市大安區",
        "hash": hashlib.md5("user address: 台北市大安區".encode()).hexdigest(),
        "created_at": "2026-01-05T09:00:00+00:00", "updated_at": "2026-01-05T09:00:00+00:00",
        "user_id": "bench-main"}


def test_mem0_embeds_one_text_or_a_batch_through_our_embedder() -> None:
    ours = Lengths()
    adapter = Mem0Embedder(ours)
    assert adapter.embed("abc", "search") == [3.0, 1.0]
    assert adapter.embed_batch(["a", "bb"]) == [[1.0, 1.0], [2.0, 1.0]]
    assert ours.calls == [["abc"], ["a", "bb"]]


def test_mem0s_llm_is_never_asked() -> None:
    with pytest.raises(AssertionError, match="never asks"):
        NoLLM().generate_response(messages=[])


def test_the_summary_holds_each_sides_percentiles_and_the_p95_ratio() -> None:
    ours, theirs = [float(ms) for ms in range(1, 21)], [float(2 * ms) for ms in range(1, 21)]
    assert summary(10_000, ours, theirs) == {
        "cards": 10_000, "palimpsest": {"p50_ms": 10.5, "p95_ms": 19.0},
        "mem0": {"p50_ms": 21.0, "p95_ms": 38.0}, "ratio_p95": 0.5, "target": 0.75}
