"""What a retrieval asks: validation, the bi-temporal window, and the visibility SQL it selects."""

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import ValidationError

from domain.errors import InvalidCommandError
from infra.settings import Settings
from services.query.retrieval.query import MAX_QUERY_CHARS, RetrievalQuery, parameters, visible
from services.query.retrieval.retriever import Retriever

NOW = datetime(2026, 11, 1, 12, tzinfo=UTC)
VALID = NOW - timedelta(days=60)
KNOWN = NOW - timedelta(days=20)


def query(**fields: Any) -> RetrievalQuery:
    return RetrievalQuery(**{"text": "where do I live", "now": NOW, **fields})


def statement(q: RetrievalQuery, schema: str = "read_1") -> str:
    return " ".join(visible(q, schema).as_string(None).split())


class TestValidation:
    def test_knowledge_from_the_future_is_refused(self) -> None:
        with pytest.raises(InvalidCommandError, match="known_at"):
            query(known_at=NOW + timedelta(seconds=1))
        assert query(known_at=NOW).as_of

    @pytest.mark.parametrize("text", ["", "   ", "\n\t"])
    def test_an_empty_query_is_refused(self, text: str) -> None:
        with pytest.raises(InvalidCommandError, match="empty"):
            query(text=text)

    def test_the_length_limit_is_inclusive(self) -> None:
        assert query(text="x" * MAX_QUERY_CHARS).text
        with pytest.raises(InvalidCommandError, match="longer"):
            query(text="x" * (MAX_QUERY_CHARS + 1))

    @pytest.mark.parametrize("name", ["now", "valid_at", "known_at"])
    def test_a_naive_datetime_is_refused(self, name: str) -> None:
        with pytest.raises(InvalidCommandError, match=name):
            query(**{name: datetime(2026, 1, 1)})

    def test_any_zone_is_accepted(self) -> None:
        taipei = timezone(timedelta(hours=8))
        assert query(now=NOW.astimezone(taipei), valid_at=VALID.astimezone(taipei)).as_of

    @pytest.mark.parametrize("top_n", [0, -3])
    def test_top_n_below_one_is_refused(self, top_n: int) -> None:
        with pytest.raises(InvalidCommandError, match="top_n"):
            query(top_n=top_n)

    def test_top_n_of_one_or_none_is_fine(self) -> None:
        assert query(top_n=1).top_n == 1
        assert query().top_n is None


class TestWindow:
    def test_a_current_query_looks_at_now_on_both_timelines(self) -> None:
        q = query()
        assert not q.as_of
        assert q.window == (NOW, NOW)
        assert q.reference_time == NOW

    def test_only_known_at_means_valid_then_as_known_then(self) -> None:
        q = query(known_at=KNOWN)
        assert q.as_of
        assert q.window == (KNOWN, KNOWN)
        assert q.reference_time == KNOWN

    def test_only_valid_at_means_as_we_know_it_now(self) -> None:
        q = query(valid_at=VALID)
        assert q.as_of
        assert q.window == (VALID, NOW)
        assert q.reference_time == VALID

    def test_both_moments_are_taken_as_given(self) -> None:
        q = query(valid_at=VALID, known_at=KNOWN)
        assert q.window == (VALID, KNOWN)
        assert q.reference_time == VALID


class TestVisibleSQL:
    def test_a_current_query_reads_open_unretracted_unmerged_cards(self) -> None:
        text = statement(query())
        assert "card_versions" not in text
        for predicate in ("c.retracted_at IS NULL", "c.valid_to IS NULL", "c.merged_into IS NULL"):
            assert predicate in text

    def test_an_as_of_query_reads_the_version_known_and_valid_then(self) -> None:
        text = statement(query(valid_at=VALID))
        assert 'EXISTS (SELECT 1 FROM "read_1".card_versions v' in text
        assert "v.card_id = c.card_id" in text
        assert "v.known @> %(known_at)s" in text
        assert "v.valid @> %(valid_at)s" in text
        assert "NOT v.retracted" in text and "'merged'" in text
        assert "c.valid_to IS NULL" not in text

    def test_an_as_of_event_only_needs_to_have_happened(self) -> None:
        text = statement(query(known_at=KNOWN))
        assert "WHEN c.kind = 'event' THEN lower(v.valid) <= %(valid_at)s" in text

    @pytest.mark.parametrize("q", [query(), query(valid_at=VALID)])
    def test_both_apply_the_scope_predicate(self, q: RetrievalQuery) -> None:
        text = statement(q)
        assert "c.scope = 'personal'" in text
        assert "c.project_id = %(project_id)s" in text
        assert "c.group_id = ANY(%(group_ids)s" in text
        assert "c.scope = 'global' AND %(include_global)s" in text

    def test_the_schema_is_quoted_as_an_identifier(self) -> None:
        text = statement(query(valid_at=VALID), schema='x"; DROP TABLE cards; --')
        assert 'FROM "x""; DROP TABLE cards; --".card_versions' in text

    @pytest.mark.parametrize("q", [query(), query(known_at=KNOWN)])
    def test_every_placeholder_has_a_parameter(self, q: RetrievalQuery) -> None:
        placeholders = set(re.findall(r"%\((\w+)\)s", statement(q)))
        assert placeholders and placeholders <= set(parameters(q))


class TestParameters:
    def test_a_current_query(self) -> None:
        assert parameters(query(project_id="fibon", group_ids=("family", "team"))) == {
            "project_id": "fibon", "group_ids": ["family", "team"], "include_global": False,
            "valid_at": NOW, "known_at": NOW, "subjects": [], "subject_prefix": None,
            "agent_ids": [], "session_ids": []}

    def test_a_narrowed_query_adds_each_narrowing_to_what_it_sees(self) -> None:
        q = query(subjects=("a",), subject_prefix="ns", agent_ids=("scout",), session_ids=("s1",))
        text = statement(q)
        for placeholder in ("subjects", "subject_prefix", "agent_ids", "session_ids"):
            assert f"%({placeholder})s" in text
        assert set(re.findall(r"%\((\w+)\)s", text)) <= set(parameters(q))
        assert "%(subject_prefix)s" not in statement(query())

    def test_the_narrowing_keeps_a_namespace_by_whole_segments(self) -> None:
        q = query(subject_prefix="a")
        assert q.keeps("a", None, None) and q.keeps("a:b:c", None, None)
        assert not q.keeps("ab", None, None) and not q.keeps(None, None, None)
        assert not query(agent_ids=("x",)).keeps("a", "y", None)

    def test_an_as_of_query_passes_its_window(self) -> None:
        params = parameters(query(valid_at=VALID, include_global=True))
        assert (params["valid_at"], params["known_at"], params["include_global"]) == (VALID, NOW, True)

    def test_only_known_at_is_used_for_both(self) -> None:
        params = parameters(query(known_at=KNOWN))
        assert (params["valid_at"], params["known_at"]) == (KNOWN, KNOWN)


class TestConcurrencySettings:
    def test_threads_and_connections_come_from_the_environment(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("PALIMPSEST_RETRIEVAL__ROUTE_THREADS", "12")
        monkeypatch.setenv("PALIMPSEST_RETRIEVAL__CONNECTIONS", "20")
        retrieval = Settings().retrieval
        assert (retrieval.route_threads, retrieval.connections) == (12, 20)
        retriever = Retriever(read=None, schema="s", settings=retrieval, embedder=None)  # type: ignore[arg-type]
        try:
            assert retriever.runner.pool._max_workers == 12
        finally:
            retriever.close()

    @pytest.mark.parametrize("name", ["ROUTE_THREADS", "CONNECTIONS"])
    def test_none_is_refused(self, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
        monkeypatch.setenv(f"PALIMPSEST_RETRIEVAL__{name}", "0")
        with pytest.raises(ValidationError, match=name.lower()):
            Settings()
