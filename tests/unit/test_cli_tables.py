"""The command line's tables and ingest's rate, without a server: an id is printed whole however
narrow the terminal, the columns that do not fit are left out (``--wide`` keeps them), and the
rate ``palimpsest ingest`` reports is said once, from one clock."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from uuid import uuid4

import pytest
from typer.testing import CliRunner

from services.entrypoints.cli import cli
from services.entrypoints.cli.ingest import Meter
from services.entrypoints.cli.remote import table

HEADERS = ("id", "status", "session/turn", "said", "attempts", "cards", "error")
OPTIONAL = ("cards", "attempts", "said", "session/turn")


def dead_letters(count: int = 3) -> list[tuple[object, ...]]:
    return [(str(uuid4()), "dead_letter", f"session-{i}/turn-{i}", "2026-06-01 09:00", 3, 0,
             "the model answered something that is not JSON, three times in a row") for i in range(count)]


def printed(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, width: int,
            rows: list[tuple[object, ...]], **options: object) -> tuple[str, str]:
    monkeypatch.setenv("COLUMNS", str(width))
    table(HEADERS, rows, wrap=("error",), optional=OPTIONAL, **options)  # type: ignore[arg-type]
    out, err = capsys.readouterr()
    return out, err


@pytest.mark.parametrize("width", [40, 60, 80, 120])
def test_an_id_is_printed_whole_on_its_line_however_narrow(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    rows = dead_letters()
    out, _ = printed(capsys, monkeypatch, width, rows)
    lines = out.splitlines()
    for row in rows:
        assert any(line.startswith(str(row[0])) for line in lines), (row[0], out)


def test_columns_that_do_not_fit_are_left_out_and_said_so(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    out, err = printed(capsys, monkeypatch, 80, dead_letters())
    assert max(len(line) for line in out.splitlines()) <= 80
    header = out.splitlines()[0].split()
    assert header[:2] == ["id", "status"] and "error" in header and "cards" not in header
    assert "left out" in err and "cards" in err and "--wide" in err


def test_wide_keeps_every_column(capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    out, err = printed(capsys, monkeypatch, 80, dead_letters(), wide=True)
    assert out.splitlines()[0].split() == list(HEADERS)
    assert "the model answered something that is not JSON, three times in a row" in out
    assert not err


def test_a_wide_terminal_needs_nothing_left_out(capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    out, err = printed(capsys, monkeypatch, 200, dead_letters())
    assert out.splitlines()[0].split() == list(HEADERS) and not err


def test_text_wraps_and_wide_characters_are_counted_as_two(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    card = str(uuid4())
    table(("id", "content"), [(card, "使用者住在高雄市前鎮區，" * 6)], wrap=("content",))
    out = capsys.readouterr().out
    assert out.splitlines()[1].startswith(card) and len(out.splitlines()) > 2
    from rich.cells import cell_len
    assert max(cell_len(line) for line in out.splitlines()) <= 60


def test_the_meter_says_one_rate_from_one_clock() -> None:
    meter = Meter()
    meter.began -= 2.0  # a run of two seconds
    meter.add(40)
    meter.add(60)
    seconds = meter.stop()
    assert meter.rate() == round(100 / seconds, 1)
    assert meter.rate() == meter.rate(), "once stopped, the rate no longer moves"


class Ingests(BaseHTTPRequestHandler):
    """A server that stores every turn it is handed."""

    def do_POST(self) -> None:  # noqa: N802 - the handler's name
        turns = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["turns"]
        body = json.dumps({"turns": [{"replayed": False} for _ in turns],
                           "extraction": {"note": None}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def ingesting() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Ingests)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join(5)


def test_ingest_says_its_rate_once(ingesting: str, tmp_path: Path) -> None:
    turns = tmp_path / "turns.jsonl"
    turns.write_text("".join(json.dumps({"session_id": "s", "turn_id": str(i), "role": "user",
                                         "text": "hi", "said_at": "2026-06-01T09:00:00+08:00"}) + "\n"
                             for i in range(25)))
    env = {"PALIMPSEST_URL": ingesting, "PALIMPSEST_KEY": "pk_test"}
    done = CliRunner().invoke(cli, ["ingest", str(turns), "--batch", "10"], env=env)
    assert done.exit_code == 0, done.output
    assert done.stdout.count("turns/s") == 1, done.stdout
    assert done.stdout.startswith("25 turn(s) stored, 0 already stored")
    answer = json.loads(CliRunner().invoke(cli, ["ingest", str(turns), "--json"], env=env).stdout)
    assert answer["turns_per_second"] == round(25 / answer["seconds"], 1), answer
