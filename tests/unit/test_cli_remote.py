"""The command line's plumbing without a server: times, error codes, and when ``--json`` asks for
JSON errors."""

from __future__ import annotations

import json
import threading
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import typer
from typer.testing import CliRunner

from domain.errors import CardNotFoundError, InvalidTextError
from services.entrypoints.cli import cli
from services.entrypoints.cli.remote import _code, _wants_json, moment


def test_a_time_keeps_its_zone_and_a_naive_one_takes_this_machines() -> None:
    assert moment("2026-10-01T09:00+08:00") == "2026-10-01T09:00:00+08:00"
    naive = datetime.fromisoformat(moment("2026-10-01T09:00") or "")
    assert naive.utcoffset() == datetime(2026, 10, 1, 9).astimezone().utcoffset()
    assert moment(None) is None
    with pytest.raises(typer.BadParameter, match="ISO 8601"):
        moment("next tuesday")


def test_json_is_asked_for_before_a_double_dash_only() -> None:
    assert _wants_json(["search", "x", "--json"])
    assert not _wants_json(["remember", "--", "--json"])
    assert not _wants_json(["search", "--jsonl"])


def test_a_local_error_is_named_as_rest_names_it() -> None:
    assert _code(CardNotFoundError("no card")) == "card_not_found"
    assert _code(InvalidTextError("NUL")) == "invalid_text"


def test_help_is_help_and_a_usage_error_without_json_is_text() -> None:
    runner = CliRunner()
    helped = runner.invoke(cli, ["search", "--help", "--json"])
    assert helped.exit_code == 0 and "--min-position" in helped.stdout
    plain = runner.invoke(cli, ["facts"])
    assert plain.exit_code == 2 and "Missing argument" in plain.stderr and not plain.stdout
    given = runner.invoke(cli, ["facts", "--json"])
    assert given.exit_code == 2 and json.loads(given.stdout)["error"]["code"] == "usage_error"


class NotPalimpsest(BaseHTTPRequestHandler):
    """A web server that answers every request with a page, as a wrong --url would."""

    def answer(self) -> None:
        body = b"<html>hello</html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = answer

    def log_message(self, *_: object) -> None:
        pass


def test_a_server_that_is_not_palimpsest_is_said_plainly() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), NotPalimpsest)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        done = CliRunner().invoke(cli, ["facts", "user", "--url", url, "--json"])
    finally:
        server.shutdown()
        thread.join(5)
    assert done.exit_code == 1 and json.loads(done.stdout)["error"]["code"] == "not_palimpsest"
