"""The database must keep Chinese fuzzy matching working: check_cjk_support on the embedded server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import psycopg
import pytest
from psycopg import sql

from infra.locale_check import (
    UnsupportedLocaleError,
    check_cjk_support,
    create_database_sql,
    probe_locale,
)
from infra.postgres import Database
from projections.text import BIGRAM_SIMILARITY_SQL, bigram_similarity, cjk_bigrams, fold

pytestmark = pytest.mark.integration


@pytest.fixture
def scratch_database(admin_db: Database) -> Iterator[tuple[str, Any]]:
    """(name, create(options)) — a database made for one test and dropped afterwards."""
    name = f"locale_{uuid.uuid4().hex[:10]}"

    def create(options: sql.Composable) -> Database:
        with admin_db.connect(autocommit=True) as conn:
            conn.execute(options)
        return replace(admin_db, dbname=name)

    yield name, create
    with admin_db.connect(autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def _create(name: str, options: str) -> sql.Composed:
    return sql.SQL("CREATE DATABASE {} TEMPLATE template0 ").format(sql.Identifier(name)) + sql.SQL(options)


def test_the_embedded_server_passes(admin_db: Database) -> None:
    with admin_db.connect() as conn:
        check_cjk_support(conn)
        report = probe_locale(conn)
    assert report.encoding == "UTF8"
    assert report.trgm_cjk and report.trgm_accented
    assert report.problems == ()


def test_a_sql_ascii_database_is_refused(scratch_database: tuple[str, Any]) -> None:
    name, create = scratch_database
    db = create(_create(name, "ENCODING 'SQL_ASCII' LC_CTYPE 'C' LC_COLLATE 'C'"))
    with db.connect() as conn, pytest.raises(UnsupportedLocaleError) as refused:
        check_cjk_support(conn)
    message = str(refused.value)
    assert f"database '{name}'" in message
    assert "encoding is SQL_ASCII, not UTF8" in message
    assert "CREATE DATABASE" in message and "LC_CTYPE 'C.UTF-8'" in message


def test_a_utf8_database_with_c_ctype_is_refused(scratch_database: tuple[str, Any]) -> None:
    # The silent case: Chinese is stored fine, but pg_trgm sees no characters in it.
    name, create = scratch_database
    db = create(_create(name, "ENCODING 'UTF8' LC_CTYPE 'C' LC_COLLATE 'C'"))
    with db.connect() as conn:
        report = probe_locale(conn)
        with pytest.raises(UnsupportedLocaleError, match=r"pg_trgm drops CJK characters under LC_CTYPE 'C'"):
            check_cjk_support(conn)
        # The probe created pg_trgm for itself and rolled it back.
        assert conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'").fetchone() is None
    assert report.trgm_cjk is False and report.trgm_accented is False
    assert report.lower_unicode is False and len(report.warnings) == 2


def test_a_builtin_provider_does_not_rescue_a_c_ctype(scratch_database: tuple[str, Any]) -> None:
    name, create = scratch_database
    db = create(_create(name, "ENCODING 'UTF8' LOCALE_PROVIDER builtin BUILTIN_LOCALE 'C.UTF-8' "
                              "LC_CTYPE 'C' LC_COLLATE 'C'"))
    with db.connect() as conn, pytest.raises(UnsupportedLocaleError, match="pg_trgm drops CJK"):
        check_cjk_support(conn)


def test_the_recommended_database_passes(scratch_database: tuple[str, Any]) -> None:
    name, create = scratch_database
    db = create(create_database_sql(name))
    with db.connect() as conn:
        check_cjk_support(conn)
        report = probe_locale(conn)
        assert conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'").fetchone() is None
    assert (report.provider, report.locale, report.ctype) == ("builtin", "C.UTF-8", "C.UTF-8")
    assert report.lower_unicode and report.regex_cjk_alpha and report.warnings == ()


def test_a_role_that_cannot_create_pg_trgm_is_told_so(
    scratch_database: tuple[str, Any], runtime_db: Database
) -> None:
    name, create = scratch_database
    create(create_database_sql(name))
    with replace(runtime_db, dbname=name).connect() as conn:
        with pytest.raises(UnsupportedLocaleError, match="this role cannot create it"):
            check_cjk_support(conn)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_create_database_sql(admin_db: Database) -> None:
    with admin_db.connect() as conn:
        text = create_database_sql("palimpsest", owner="app", ctype="en_US.UTF-8").as_string(conn)
        libc = create_database_sql("palimpsest", builtin=False).as_string(conn)
    assert text == (
        'CREATE DATABASE "palimpsest" OWNER "app" TEMPLATE template0 ENCODING \'UTF8\' '
        "LOCALE_PROVIDER builtin BUILTIN_LOCALE 'C.UTF-8' LC_COLLATE 'en_US.UTF-8' LC_CTYPE 'en_US.UTF-8'"
    )
    assert "LOCALE_PROVIDER" not in libc and "LC_CTYPE 'C.UTF-8'" in libc


# The fuzzy route's two measures, on the embedded server.

PAIRS = [
    ("台北市政府", "臺北市"), ("台北市政府", "高雄市政府"), ("牛肉湯", "牛肉汤"), ("資料庫", "後端"),
    ("", "台北"), ("", ""), ("台北台北", "北台"),
]


@pytest.mark.parametrize(("left", "right"), PAIRS)
def test_bigram_similarity_in_sql_matches_python(admin_db: Database, left: str, right: str) -> None:
    a, b = cjk_bigrams(left), cjk_bigrams(right)
    expression = sql.SQL(BIGRAM_SIMILARITY_SQL).format(
        a=sql.SQL("%(a)s::text[]"), b=sql.SQL("%(b)s::text[]")
    )
    with admin_db.connect() as conn:
        row = conn.execute(
            sql.SQL("SELECT {}, %(a)s::text[] && %(b)s::text[]").format(expression),
            {"a": list(a), "b": list(b)},
        ).fetchone()
    assert row is not None
    assert row[0] == pytest.approx(bigram_similarity(a, b), abs=1e-6)
    assert row[1] == bool(set(a) & set(b))


def test_trigrams_of_folded_text_meet_across_scripts(admin_db: Database) -> None:
    with admin_db.connect() as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        row = conn.execute(
            "SELECT similarity(%s, %s), similarity(%s, %s), similarity(%s, %s)",
            (fold("臺北市政府"), fold("台北市"), "臺北市政府", "台北市", fold("ＣＡＦÉ"), fold("café")),
        ).fetchone()
        conn.rollback()
    assert row is not None
    folded, unfolded, latin = row
    assert folded > unfolded and folded == pytest.approx(3 / 7)
    assert latin == 1.0


def test_check_on_a_non_autocommit_connection_leaves_it_idle(admin_db: Database) -> None:
    with admin_db.connect() as conn:
        check_cjk_support(conn)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
