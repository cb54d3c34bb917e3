"""A local OpenAI-compatible embeddings server: ``POST /v1/embeddings`` on 127.0.0.1, in a thread.

    with FakeOpenAIServer() as server:
        embedder = OpenAIEmbedder(base_url=server.base_url, model="fake", dimensions=8)
        ...
        assert server.request_count == 1

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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

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


class FakeOpenAIServer:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []  # the JSON bodies of the embeddings requests
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

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self._failures.clear()
        self.delay = 0.0

    # --- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> FakeOpenAIServer:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="fake-openai", daemon=True)
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


def _handler(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if self.path.rstrip("/") != "/v1/embeddings":
                self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._send(400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}})
                return
            status, answer = server._answer(body)
            if server.delay:
                threading.Event().wait(server.delay)
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
