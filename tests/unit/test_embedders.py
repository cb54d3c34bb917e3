"""The embedding port: the offline USE model (real weights, no network) and the OpenAI adapter
against a local fake server."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from infra.embedders import (
    CachedEmbedder,
    EmbeddingError,
    EmbeddingUnavailableError,
    OpenAIEmbedder,
    UniversalSentenceEmbedder,
    create_embedder,
)
from infra.settings import Settings
from tests.fakes.openai_server import FakeOpenAIServer, fake_vector


def unit(vector: list[float]) -> np.ndarray:
    array = np.asarray(vector, dtype=np.float64)
    return array / np.linalg.norm(array)


# --- USE multilingual v3 ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def use() -> UniversalSentenceEmbedder:
    embedder = UniversalSentenceEmbedder()
    embedder.load()  # once for the module: about two seconds
    return embedder


def test_use_gives_512_d_unit_vectors(use: UniversalSentenceEmbedder) -> None:
    vectors = use.embed(["The user moved to Kyoto.", "使用者搬到了京都。", "x"])
    assert use.model == "use-multilingual-v3" and use.dimensions == 512
    assert [len(v) for v in vectors] == [512, 512, 512]
    assert all(isinstance(x, float) for x in vectors[0])
    np.testing.assert_allclose(np.linalg.norm(np.asarray(vectors), axis=1), 1.0, atol=1e-5)


def test_use_is_deterministic_and_batch_independent(use: UniversalSentenceEmbedder) -> None:
    alone = use.embed(["Launch date moved to October."])[0]
    in_batch = use.embed(["Something else entirely.", "Launch date moved to October."])[1]
    np.testing.assert_allclose(alone, in_batch, atol=1e-6)


@pytest.mark.parametrize(
    ("chinese", "english", "unrelated"),
    [
        ("我明天要去台北開會。", "I have a meeting in Taipei tomorrow.", "The cat sleeps on the sofa."),
        ("她喜歡爬山和攝影。", "She likes hiking and photography.", "The server crashed after the upgrade."),
    ],
)
def test_use_puts_a_translation_closer_than_an_unrelated_sentence(
    use: UniversalSentenceEmbedder, chinese: str, english: str, unrelated: str
) -> None:
    zh, en, other = (np.asarray(v) for v in use.embed([chinese, english, unrelated]))
    assert zh @ en > 0.5  # measured 0.65 and 0.68
    assert zh @ en > zh @ other + 0.3
    assert zh @ en > en @ other + 0.3


def test_use_empty_batch(use: UniversalSentenceEmbedder) -> None:
    assert use.embed([]) == []


def test_use_from_many_threads_shares_one_model(use: UniversalSentenceEmbedder) -> None:
    expected = use.embed(["concurrent text"])[0]
    results: list[list[float]] = []

    def work() -> None:
        results.append(UniversalSentenceEmbedder().embed(["concurrent text"])[0])

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 4
    for vector in results:
        np.testing.assert_allclose(vector, expected, atol=1e-6)


# --- OpenAI-compatible adapter --------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as running:
        yield running


@pytest.fixture
def fake(server: FakeOpenAIServer) -> FakeOpenAIServer:
    server.reset()
    return server


def openai_embedder(server: FakeOpenAIServer, **overrides: object) -> OpenAIEmbedder:
    options: dict[str, object] = {"model": "fake-embedding", "dimensions": 16, "base_url": server.base_url}
    options.update(overrides)
    return OpenAIEmbedder(**options)  # type: ignore[arg-type]


def test_openai_batches_and_keeps_order(fake: FakeOpenAIServer) -> None:
    texts = ["alpha", "beta", "gamma", "delta", "epsilon"]
    vectors = openai_embedder(fake, batch_size=2).embed(texts)

    assert fake.request_count == 3
    assert [r["input"] for r in fake.requests] == [["alpha", "beta"], ["gamma", "delta"], ["epsilon"]]
    assert {r["model"] for r in fake.requests} == {"fake-embedding"}
    assert {r["dimensions"] for r in fake.requests} == {16}
    assert {r["encoding_format"] for r in fake.requests} == {"float"}
    for text, vector in zip(texts, vectors, strict=True):
        assert len(vector) == 16
        np.testing.assert_allclose(vector, unit(fake_vector(text, 16)), atol=1e-6)  # normalised


def test_openai_empty_batch_makes_no_request(fake: FakeOpenAIServer) -> None:
    assert openai_embedder(fake).embed([]) == []
    assert fake.request_count == 0


def test_openai_server_error_is_unavailable_after_bounded_retries(fake: FakeOpenAIServer) -> None:
    fake.fail_next(10, status=500)
    with pytest.raises(EmbeddingUnavailableError, match="HTTP 500") as caught:
        openai_embedder(fake).embed(["a"])  # the default: max_retries=2
    assert fake.request_count == 3  # one try and two retries, no more
    assert caught.value.status_code == 500 and caught.value.retryable
    assert caught.value.__cause__ is not None


def test_openai_recovers_when_a_retry_succeeds(fake: FakeOpenAIServer) -> None:
    fake.fail_next(1, status=503)
    assert len(openai_embedder(fake).embed(["a"])[0]) == 16
    assert fake.request_count == 2


def test_openai_client_error_is_not_retried(fake: FakeOpenAIServer) -> None:
    fake.fail_next(1, status=401)
    with pytest.raises(EmbeddingUnavailableError, match="HTTP 401") as caught:
        openai_embedder(fake).embed(["a"])
    assert fake.request_count == 1
    assert caught.value.status_code == 401 and not caught.value.retryable


def test_openai_timeout_is_unavailable(fake: FakeOpenAIServer) -> None:
    fake.delay = 1.0
    with pytest.raises(EmbeddingUnavailableError, match="timed out") as caught:
        openai_embedder(fake, timeout=0.2, max_retries=0).embed(["slow"])
    assert caught.value.status_code is None and caught.value.retryable


def test_openai_connection_refused_is_unavailable() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago and has no listener now
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    embedder = OpenAIEmbedder(model="m", dimensions=4, base_url=f"http://127.0.0.1:{port}/v1", max_retries=0)
    with pytest.raises(EmbeddingUnavailableError, match="cannot reach"):
        embedder.embed(["a"])


def test_openai_wrong_width_is_an_error(fake: FakeOpenAIServer) -> None:
    # A server that ignores ``dimensions`` (here: not sent) answers with its own width, 8.
    with pytest.raises(EmbeddingError, match=r"expected \(n, 16\)"):
        openai_embedder(fake, send_dimensions=False).embed(["a"])
    assert "dimensions" not in fake.requests[0]


def test_openai_without_base_url_needs_a_key() -> None:
    with pytest.raises(ValueError, match="API key"):
        OpenAIEmbedder(model="text-embedding-3-small", dimensions=512)


# --- wiring ---------------------------------------------------------------------------------------


def test_create_embedder_from_settings(fake: FakeOpenAIServer) -> None:
    assert isinstance(create_embedder(Settings(embedder="use")), UniversalSentenceEmbedder)

    settings = Settings(
        embedder="openai", openai_base_url=fake.base_url, openai_embedding_model="fake-embedding",
        embedding_dimensions=16,
    )
    embedder = create_embedder(settings)
    assert isinstance(embedder, OpenAIEmbedder)
    assert (embedder.model, embedder.dimensions) == ("fake-embedding", 16)
    assert len(embedder.embed(["hello"])[0]) == 16

    def no_database():  # type: ignore[no-untyped-def]
        raise AssertionError("building the embedder must not connect")

    cached = create_embedder(settings, connect=no_database)
    assert isinstance(cached, CachedEmbedder) and isinstance(cached.inner, OpenAIEmbedder)
    assert (cached.model, cached.dimensions) == ("fake-embedding", 16)


def test_use_refuses_other_dimensions() -> None:
    with pytest.raises(ValueError, match="512"):
        create_embedder(Settings(embedder="use", embedding_dimensions=768))
