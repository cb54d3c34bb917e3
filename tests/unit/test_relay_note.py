"""What the relay says when it republishes the log: routine (INFO) when the embedded broker, which
keeps its topics in memory, started empty; a WARNING when an external broker lost messages."""

from __future__ import annotations

import logging

import pytest

from infra.relay import Relay, RelayState
from infra.settings import Settings


def relay(embedded: bool, mark: int | None = None) -> Relay:
    made = Relay(None, "127.0.0.1:9", topic="events", schema="palimpsest",  # type: ignore[arg-type]
                 embedded_broker=embedded, resume_from=None if mark is None else lambda: mark)
    made._state = RelayState(position=1234, published=1200, topic="events", topic_id="a")
    made._save = lambda state: None  # type: ignore[method-assign]
    return made


def test_the_embedded_broker_starting_empty_is_told_as_safe(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="infra.relay")
    relay(embedded=True)._reset("the topic was missing", None)
    (said,) = caplog.records
    assert said.levelno == logging.INFO
    text = said.getMessage()
    assert "the embedded broker starts empty" in text and "nothing is lost" in text
    assert "republishing the whole log" in text and "lost messages" not in text


def test_it_republishes_only_what_the_consumers_have_not_handled(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="infra.relay")
    saved: list[RelayState] = []
    made = relay(embedded=True, mark=1230)
    made._save = saved.append  # type: ignore[method-assign]
    made._reset("the topic was missing", "b")
    assert saved == [RelayState(position=1230, published=0, topic="events", topic_id="b")]
    assert "republishing 4 event(s) after position 1230" in caplog.records[0].getMessage()


def test_a_mark_past_the_relay_never_skips_what_it_has_not_published() -> None:
    saved: list[RelayState] = []
    made = relay(embedded=True, mark=5_000)
    made._save = saved.append  # type: ignore[method-assign]
    made._reset("the topic was missing", "b")
    assert saved[0].position == 1234


def test_an_external_broker_that_lost_messages_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="infra.relay")
    relay(embedded=False)._reset("the topic id changed from a to b", None)
    (said,) = caplog.records
    assert said.levelno == logging.WARNING and "the broker lost messages of events" in said.getMessage()


def test_which_broker_comes_from_the_settings() -> None:
    embedded = Relay.from_settings(None, Settings(), "127.0.0.1:9")  # type: ignore[arg-type]
    external = Relay.for_ingest(None, Settings(kafka_bootstrap="kafka:9092"), "kafka:9092")  # type: ignore[arg-type]
    assert embedded.embedded_broker and not external.embedded_broker
