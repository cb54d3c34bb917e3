"""A recording proxy between ``palimpsest serve`` and the extraction model, on 127.0.0.1 in this
process.

``POST /v1/chat/completions`` is answered by one of three sources:

- :class:`Forward` — the real OpenAI-compatible endpoint (the request as it came, its
  ``Authorization`` header included);
- :class:`Scripted` — :class:`~tests.benchmarks.ingest_quality.scripted.ScriptedModel`;
- :class:`Replay` — the answers of a recording, the n-th call about a turn getting the n-th
  answer recorded for it (the last one again after that); a turn the recording does not hold is
  answered ``{"candidates": []}`` and counted as ``unknown``.

Which conversation and turn a request is about is read from the user prompt: the current turn is
the JSON object inside the last ``<turn>`` … ``</turn>`` block (``<\\/`` in it stands for ``</``;
any block before it — earlier turns, a catalogue of labels — is ignored), matched on its text
(and on ``said_at`` when a text repeats). The proxy counts calls, sums ``usage.prompt_tokens`` /
``completion_tokens`` (a character count / 4 when an answer has no ``usage``, and says so; an
error answer counts no tokens), and keeps every answer by (conversation, turn) for :meth:`Proxy.save`.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol

import httpx

from tests.benchmarks.ingest_quality.dataset import TurnIndex
from tests.benchmarks.ingest_quality.scripted import ScriptedModel

RECORDING_FORMAT = "palimpsest-ingest-quality-recording/1"
_OPEN = re.compile(r"<turn(?:\s[^>]*)?>")
Key = tuple[str, str]  # (conversation id, turn id)


def turn_block(content: str) -> dict[str, Any] | None:
    """The JSON object of the last ``<turn>`` … ``</turn>`` block of a prompt (an opening tag
    quoted inside a turn's text is passed over: its tail is no JSON object)."""
    end = content.rfind("</turn>")
    if end < 0:
        return None
    for opening in reversed(list(_OPEN.finditer(content, 0, end))):
        try:
            value = json.loads(content[opening.end():end])
        except ValueError:
            continue
        if isinstance(value, dict) and isinstance(value.get("text"), str):
            return value
    return None


def current_turn(body: dict[str, Any]) -> dict[str, Any] | None:
    """The current turn of a chat completion request (from its last user message with one)."""
    for message in reversed(body.get("messages") or []):
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, str):
            found = turn_block(content)
            if found is not None:
                return found
    return None


def completion(content: str, model: str) -> dict[str, Any]:
    """A chat completion answering ``content`` (no ``usage``: the proxy estimates it)."""
    return {"id": f"chatcmpl-{time.monotonic_ns()}", "object": "chat.completion", "created": 0,
            "model": model, "choices": [{"index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant", "content": content}}]}


NO_CANDIDATES = json.dumps({"candidates": []})


class Source(Protocol):
    def answer(self, body: dict[str, Any], headers: dict[str, str], key: Key | None,
               call: int) -> tuple[int, dict[str, Any]]:
        """The status and body answering a request about turn ``key`` (its ``call``-th, from 0)."""
        ...

    def knows(self, key: Key) -> bool:
        """Whether the source has an answer of its own for the turn ``key``."""
        ...


class Scripted:
    def __init__(self, model: ScriptedModel) -> None:
        self.model = model

    def answer(self, body: dict[str, Any], headers: dict[str, str], key: Key | None,
               call: int) -> tuple[int, dict[str, Any]]:
        found = self.model.answer(*key) if key else {"candidates": []}
        return 200, completion(json.dumps(found, ensure_ascii=False), str(body.get("model", "")))

    def knows(self, key: Key) -> bool:
        return True


class Forward:
    """The real endpoint at ``base_url`` (``…/v1``); a request it cannot reach answers 502."""

    def __init__(self, base_url: str, timeout: float = 900.0) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self._http = httpx.Client(timeout=httpx.Timeout(timeout, connect=10.0))

    def answer(self, body: dict[str, Any], headers: dict[str, str], key: Key | None,
               call: int) -> tuple[int, dict[str, Any]]:
        sent = {k: v for k, v in headers.items() if k.lower() == "authorization"}
        try:
            response = self._http.post(self.url, json=body, headers=sent)
        except httpx.HTTPError as error:
            return 502, {"error": {"message": f"proxy: {self.url}: {error}", "type": "proxy_error"}}
        try:
            return response.status_code, response.json()
        except ValueError:
            return 502, {"error": {"message": f"proxy: not JSON: {response.text[:200]}",
                                   "type": "proxy_error"}}

    def knows(self, key: Key) -> bool:
        return True

    def close(self) -> None:
        self._http.close()


class Replay:
    """The answers of a recording (:meth:`Proxy.save`'s file)."""

    def __init__(self, path: Path) -> None:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != RECORDING_FORMAT:
            raise ValueError(f"{path} is not a recording ({RECORDING_FORMAT})")
        self.model = str(data.get("model") or "replay")
        self.answers: dict[str, dict[str, list[dict[str, Any]]]] = data["answers"]

    def answer(self, body: dict[str, Any], headers: dict[str, str], key: Key | None,
               call: int) -> tuple[int, dict[str, Any]]:
        recorded = self.answers.get(key[0], {}).get(key[1], []) if key else []
        if not recorded:
            return 200, completion(NO_CANDIDATES, str(body.get("model", "")))
        entry = recorded[min(call, len(recorded) - 1)]
        return int(entry["status"]), entry["body"]

    def knows(self, key: Key) -> bool:
        return bool(self.answers.get(key[0], {}).get(key[1]))


def _chars(body: dict[str, Any]) -> int:
    return sum(len(str(m.get("content") or "")) for m in body.get("messages") or [])


def _answer_chars(answer: dict[str, Any]) -> int:
    choices = answer.get("choices") or [{}]
    return len(str((choices[0].get("message") or {}).get("content") or ""))


@dataclass
class Stats:
    """What went through the proxy."""

    calls: int = 0
    failed: int = 0  # answers other than 200
    unknown: int = 0  # requests about no turn of the dataset (or not held by the recording)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated: int = 0  # answers whose tokens were estimated (no usage in them)
    seconds: float = 0.0
    longest: float = 0.0
    last_answer: float = field(default_factory=time.monotonic)


class Proxy:
    """The proxy on a free port of 127.0.0.1; ``with Proxy(source, index) as proxy: proxy.base_url``."""

    def __init__(self, source: Source, index: TurnIndex, model: str) -> None:
        self.source = source
        self.index = index
        self.model = model
        self.stats = Stats()
        self.recorded: dict[str, dict[str, list[dict[str, Any]]]] = {}
        self._calls: dict[Key, int] = {}
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "the proxy is not running"
        return f"http://127.0.0.1:{self._httpd.server_port}/v1"

    def __enter__(self) -> Proxy:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,),
                                        name="ingest-quality-proxy", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        close = getattr(self.source, "close", None)
        if close is not None:
            close()
        self._httpd = self._thread = None

    def key_of(self, body: dict[str, Any]) -> Key | None:
        turn = current_turn(body)
        found = self.index.find(turn["text"], turn.get("said_at")) if turn else None
        return (found[0].id, found[1].turn_id) if found else None

    def handle(self, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        key = self.key_of(body)
        with self._lock:
            call = self._calls.get(key, 0) if key else 0
            if key:
                self._calls[key] = call + 1
        started = time.monotonic()
        status, answer = self.source.answer(body, headers, key, call)
        self._count(body, key, status, answer, time.monotonic() - started)
        return status, answer

    def _count(self, body: dict[str, Any], key: Key | None, status: int, answer: dict[str, Any],
               took: float) -> None:
        usage = answer.get("usage") if status == 200 else None
        made_here = status != 200 and (answer.get("error") or {}).get("type") == "proxy_error"
        with self._lock:
            stats = self.stats
            stats.calls += 1
            stats.failed += status != 200
            stats.unknown += key is None or not self.source.knows(key)
            if isinstance(usage, dict) and "prompt_tokens" in usage:
                stats.prompt_tokens += int(usage.get("prompt_tokens") or 0)
                stats.completion_tokens += int(usage.get("completion_tokens") or 0)
            elif status == 200:
                stats.estimated += 1
                stats.prompt_tokens += _chars(body) // 4
                stats.completion_tokens += _answer_chars(answer) // 4
            stats.seconds += took
            stats.longest = max(stats.longest, took)
            stats.last_answer = time.monotonic()
            if key and not made_here:
                self.recorded.setdefault(key[0], {}).setdefault(key[1], []).append(
                    {"status": status, "body": answer, "seconds": round(took, 3)})

    def save(self, path: Path, endpoint: str) -> None:
        """Every answer so far, by conversation and turn, for ``--replay``."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            data = {"format": RECORDING_FORMAT, "model": self.model, "endpoint": endpoint,
                    "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
                    "answers": self.recorded}
            path.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def _handler(proxy: Proxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._send(400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}})
                return
            self._send(*proxy.handle(body, dict(self.headers.items())))

        def _send(self, status: int, answer: dict[str, Any]) -> None:
            payload = json.dumps(answer, ensure_ascii=False).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):  # the caller gave up (its timeout)
                pass

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
