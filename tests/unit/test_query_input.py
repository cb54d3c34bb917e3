"""The query side refuses what the command boundary refuses (DESIGN §4): a NUL byte, a lone surrogate
or a control character in a retrieval's text or scope, a facts subject or a history ref is an
``InvalidTextError`` naming it, raised before any database work (no database here)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from domain.errors import InvalidTextError
from infra.settings import Settings
from services.query.queries import Queries
from services.query.retrieval.query import RetrievalQuery

NOW = datetime(2026, 11, 1, 12, tzinfo=UTC)
BAD = {"nul": "A\x00B", "surrogate": "A\ud800", "escape": "\x1b[2J", "c1": "A\x9b"}


class Unreachable:
    """A read model or retriever the checks must not reach."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the query reached the database ({name}) with bad input")


@pytest.fixture
def queries() -> Queries:
    return Queries(Unreachable(), Unreachable(), Settings(persistence="memory"),  # type: ignore[arg-type]
                   clock=lambda: NOW)


@pytest.mark.parametrize("bad", list(BAD.values()), ids=list(BAD))
@pytest.mark.parametrize(("field", "value", "named"), [
    ("text", "where {}", "text"), ("project_id", "p{}", "project_id"),
    ("group_ids", ("team", "g{}"), "group_ids[1]"),
])
def test_a_retrieval_query_with_bad_text_is_refused(field: str, value: Any, named: str,
                                                    bad: str) -> None:
    filled = tuple(v.format(bad) for v in value) if isinstance(value, tuple) else value.format(bad)
    fields = {"text": "where do I live", "now": NOW, field: filled}
    with pytest.raises(InvalidTextError) as raised:
        RetrievalQuery(**fields)
    assert raised.value.field == named


@pytest.mark.parametrize("bad", list(BAD.values()), ids=list(BAD))
def test_facts_and_history_with_bad_text_are_refused_before_the_database(
        queries: Queries, bad: str) -> None:
    with pytest.raises(InvalidTextError, match="subject"):
        queries.facts("t1", f"user{bad}")
    with pytest.raises(InvalidTextError, match="ref"):
        queries.history("t1", f"user/address{bad}")
    with pytest.raises(InvalidTextError, match="text"):
        queries.search("t1", f"where do I live{bad}")


def test_newlines_and_tabs_in_a_query_are_text() -> None:
    assert RetrievalQuery(text="where\tdo I\r\nlive", now=NOW).text.startswith("where")
