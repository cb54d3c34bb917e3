"""A local OpenAI-compatible server on 127.0.0.1, in a thread: ``POST /v1/embeddings`` and
``POST /v1/chat/completions``. Nothing leaves the loopback interface.

    with FakeOpenAIServer() as server:
        embedder = OpenAIEmbedder(base_url=server.base_url, model="fake", dimensions=8)
        ...
        assert server.request_count == 1

Chat completions answer a script, one reply a request (``script(Reply.json({...}), Reply.text("oops"),
Reply.error(500), Reply.json({...}, delay=2.0))``), then ``default_reply``; every request body is
kept in ``chat_requests`` (the prompt, the ``response_format`` asked for). ``refuse_json_schema``
makes the server answer 400 to a ``json_schema`` response format, as servers without structured
output do, without using up a scripted reply. The ``fake_llm`` fixture is one running server.

The vector of a text is derived from its SHA-256 (``fake_vector``), so it is the same on every run and
in every process; it is deliberately *not* unit length, so a client's normalisation shows. Failures
on demand: ``fail_next(count, status)`` answers the next ``count`` requests with ``status``;
``delay`` holds every answer back (for timeouts). Error answers carry ``retry-after-ms: 1`` so a
retrying client does not sleep through its backoff.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

DEFAULT_DIMENSIONS = 8


def fake_vector(text: str, dimensions: int) -> list[float]:
    """The raw (unnormalised) vector the server gives ``text``: values in [-1, 1) from SHA-256."""
    values: list[float] = []
    counter = 0
    while len(values) < dimensions:
        block = hashlib.sha256(f"{counter}:{text}".encode()).digest()
        values.extend(b / 128.0 - 1.0 for b in block)
        counter += 1
    return values[:dimensions]


@dataclass(frozen=True)
class Reply:
    """One scripted chat completion: the message ``content`` (or an error ``status``), after
    ``delay`` seconds."""

    content: str | None = None
    status: int = 200
    delay: float = 0.0
    finish_reason: str = "stop"

    @classmethod
    def json(cls, value: Any, *, delay: float = 0.0) -> Reply:
        return cls(content=json.dumps(value, ensure_ascii=False), delay=delay)

    @classmethod
    def text(cls, content: str, *, delay: float = 0.0) -> Reply:
        return cls(content=content, delay=delay)

    @classmethod
    def error(cls, status: int) -> Reply:
        return cls(status=status)


NO_CANDIDATES = Reply.json({"candidates": []})


class FakeOpenAIServer:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []  # the JSON bodies of the embeddings requests
        self.chat_requests: list[dict[str, Any]] = []  # ... and of the chat completions
        self.refuse_json_schema = False
        self.default_reply = NO_CANDIDATES
        self.responder = None
        #: When set, unscripted chat requests are answered by ``responder(turn_text)``.
        self.responder: Callable[[str], Reply] | None = None
        self._script: list[Reply] = []
        self.delay = 0.0
        self._failures: list[int] = []
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- control ---------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "the server is not running"
        return f"http://127.0.0.1:{self._httpd.server_port}/v1"

    @property
    def request_count(self) -> int:
        with self._lock:
            return len(self.requests)

    def fail_next(self, count: int = 1, status: int = 500) -> None:
        with self._lock:
            self._failures.extend([status] * count)

    def script(self, *replies: Reply) -> None:
        """Answer the next chat completions with ``replies``, in order."""
        with self._lock:
            self._script.extend(replies)

    @property
    def pending(self) -> int:
        """Scripted replies not yet given."""
        with self._lock:
            return len(self._script)

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.chat_requests.clear()
            self._failures.clear()
            self._script.clear()
        self.delay = 0.0
        self.refuse_json_schema = False
        self.default_reply = NO_CANDIDATES
        self.responder = None

    # --- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> FakeOpenAIServer:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name="fake-openai",
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._httpd is not None and self._thread is not None
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
        self._httpd = self._thread = None

    # --- answering -------------------------------------------------------------------------------

    def _answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append(body)
            failure = self._failures.pop(0) if self._failures else None
        if failure is not None:
            return failure, {"error": {"message": f"fake failure {failure}", "type": "server_error"}}
        inputs = body.get("input")
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not inputs or not all(isinstance(t, str) and t for t in inputs):
            return 400, {"error": {"message": "input must be a non-empty string or list of them",
                                   "type": "invalid_request_error"}}
        dimensions = int(body.get("dimensions") or DEFAULT_DIMENSIONS)
        encoding = body.get("encoding_format") or "float"
        data = []
        for index, text in enumerate(inputs):
            vector: Any = fake_vector(text, dimensions)
            if encoding == "base64":
                vector = base64.b64encode(struct.pack(f"<{dimensions}f", *vector)).decode()
            data.append({"object": "embedding", "index": index, "embedding": vector})
        tokens = sum(len(t.split()) for t in inputs)
        return 200, {
            "object": "list", "data": data, "model": body.get("model", ""),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }


    def _chat(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], float]:
        """The status, body and delay of the answer to one chat completion request."""
        fmt = (body.get("response_format") or {}).get("type")
        with self._lock:
            self.chat_requests.append(body)
            if self.refuse_json_schema and fmt == "json_schema":
                return 400, {"error": {"message": "response_format 'json_schema' is not supported",
                                       "type": "invalid_request_error", "param": "response_format"}}, 0.0
            reply = self._script.pop(0) if self._script else None
            responder = self.responder
        if reply is None:
            reply = responder(turn_text(body)) if responder is not None else self.default_reply
        if reply.status != 200:
            return reply.status, {"error": {"message": f"fake failure {reply.status}",
                                            "type": "server_error"}}, reply.delay
        return 200, {
            "id": f"chatcmpl-{len(self.chat_requests)}", "object": "chat.completion", "created": 0,
            "model": body.get("model", ""),
            "choices": [{"index": 0, "finish_reason": reply.finish_reason,
                         "message": {"role": "assistant", "content": reply.content}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }, reply.delay


def turn_text(body: dict[str, Any]) -> str:
    """The text of the turn a chat request asks about (inside the user message's ``<turn>``)."""
    for message in reversed(body.get("messages") or []):
        content = message.get("content") or ""
        if message.get("role") == "user" and "<turn>" in content:
            quoted = content.split("<turn>", 1)[1].rsplit("</turn>", 1)[0]
            return str(json.loads(quoted).get("text", ""))
    return ""


@pytest.fixture(name="fake_llm")
def fake_llm_fixture() -> Iterator[FakeOpenAIServer]:
    """A running fake server; import ``fake_llm_fixture`` into a test module to use ``fake_llm``."""
    with FakeOpenAIServer() as running:
        yield running


def _handler(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            route = self.path.rstrip("/")
            if route not in ("/v1/embeddings", "/v1/chat/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._send(400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}})
                return
            if route == "/v1/embeddings":
                status, answer = server._answer(body)
                delay = 0.0
            else:
                status, answer, delay = server._chat(body)
            if server.delay or delay:
                threading.Event().wait(server.delay + delay)
            self._send(status, answer)

        def _send(self, status: int, answer: dict[str, Any]) -> None:
            payload = json.dumps(answer).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                if status >= 400:
                    self.send_header("retry-after-ms", "1")
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                pass

        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            pass

    return Handler
