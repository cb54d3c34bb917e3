"""What a log line or a stored failure says of a text: a length and a keyed digest, an
exception's type and the schema's names, never the text (STYLE rule 18)."""

from __future__ import annotations

import hashlib
import re
import sys
import threading

import psycopg
import pytest

from infra import redact
from infra.redact import described, hold_uncaught, said, traced

CANARY = "zqalice clinic diagnosis"


def test_said_gives_a_length_and_a_digest_the_same_for_the_same_text() -> None:
    told = said(CANARY)
    assert re.fullmatch(r"len=24 #[0-9a-f]{8}", told)
    assert said(CANARY) == told and said(CANARY + "!") != told
    assert "alice" not in told and said(None) == "none"
    assert re.fullmatch(r"2 item\(s\) \[len=1 #[0-9a-f]{8}, len=2 #[0-9a-f]{8}\]", said(["a", "bb"]))


def test_the_digest_is_keyed_so_a_guess_cannot_be_checked_against_it() -> None:
    """An unkeyed hash of a guess would match the line; the per-process key's does not."""
    digest = said(CANARY).split("#")[1]
    assert digest not in (hashlib.sha256(CANARY.encode()).hexdigest()[:8],
                          hashlib.md5(CANARY.encode()).hexdigest()[:8])  # noqa: S324
    assert len(redact._KEY) == 32


def test_described_names_the_type_and_the_schema_never_the_message() -> None:
    assert described(ValueError(f"bad label {CANARY}")) == "ValueError"
    error = psycopg.errors.UniqueViolation(f"Key (label)=({CANARY}) already exists")
    assert described(error).startswith("UniqueViolation") and "zqalice" not in described(error)


def test_traced_keeps_the_frames_and_the_causes_types_without_their_messages() -> None:
    def inner() -> None:
        raise KeyError(f"label {CANARY}")

    try:
        try:
            inner()
        except KeyError as error:
            raise RuntimeError(f"cannot apply {CANARY}") from error
    except RuntimeError as error:
        text = traced(error)
    assert text.startswith("RuntimeError\n") and "raised from KeyError" in text
    assert "in inner" in text and "zqalice" not in text


def test_an_uncaught_error_in_a_thread_is_logged_without_its_message(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)
    hold_uncaught()

    def fail() -> None:
        raise ValueError(f"cannot parse {CANARY}")

    thread = threading.Thread(target=fail, name="worker-1")
    thread.start()
    thread.join()
    try:
        fail()
    except ValueError as error:
        sys.excepthook(ValueError, error, error.__traceback__)
    lines = [r.getMessage() for r in caplog.records if r.name == "palimpsest.uncaught"]
    assert len(lines) == 2 and lines[0].startswith("uncaught in thread worker-1: ValueError")
    assert lines[1].startswith("uncaught in the main thread: ValueError") and "in fail" in lines[1]
    assert "zqalice" not in caplog.text
