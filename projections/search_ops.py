"""The search routes' operators, the read schema's own: array overlap and containment on ``text[]``
and pg_trgm's word similarity, each under a name in the read schema, with GIN operator classes.

Row-level security checks a condition that is not LEAKPROOF only after the policy, so such a
condition never drives an index scan: under the tenant policy the bigrams and trigram indexes
would go unused and every fuzzy or mention query would read the tenant's cards. Rather than mark
``pg_catalog.arrayoverlap`` / ``arraycontains`` and pg_trgm's operator functions LEAKPROOF for
the whole database, the schema holds its own functions over the same C code (``LANGUAGE internal``
and pg_trgm's library), marked LEAKPROOF; its own operators over them (``OPERATOR(s.&&)``,
``OPERATOR(s.@>)``, ``OPERATOR(s.<%)`` …); and its own GIN operator classes, whose support
functions are those of ``array_ops`` and ``gin_trgm_ops``. ``cards_bigrams`` and
``cards_trigrams`` are built with those classes, and the routes' conditions use those operators.
Nothing outside the schema changes; a query that names the stock operators behaves as before.

Creating a LEAKPROOF function, a C function and an operator class needs a superuser. Without
one the functions are plain SQL over the stock operators (inlined by the planner, so the stock
classes' indexes serve them where row-level security does not apply) and the indexes keep the
stock classes: search answers the same, with a warning that under row-level security it reads
the tenant's cards (decision 0018).
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from psycopg import sql

log = logging.getLogger(__name__)

#: The GIN operator classes of the read schema: ``text[]`` (the bigrams) and trigrams of text.
ARRAY_CLASS, TRIGRAM_CLASS = "text_array_ops", "word_trgm_ops"
#: The stock classes the indexes are built with where the schema has none of its own.
STOCK_CLASSES = {ARRAY_CLASS: "array_ops", TRIGRAM_CLASS: "gin_trgm_ops"}
#: The search indexes, each with the class it is built with.
SEARCH_INDEXES = {"cards_bigrams": ARRAY_CLASS, "cards_trigrams": TRIGRAM_CLASS}

#: (name, arguments, volatility, the C implementation's symbol, the stock operator it stands for)
_FUNCTIONS = (
    ("terms_overlap", "text[], text[]", "IMMUTABLE", "arrayoverlap", "pg_catalog.&&"),
    ("terms_contain", "text[], text[]", "IMMUTABLE", "arraycontains", "pg_catalog.@>"),
    ("terms_contained", "text[], text[]", "IMMUTABLE", "arraycontained", "pg_catalog.<@"),
    # stable: they read pg_trgm.word_similarity_threshold
    ("word_similar", "text, text", "STABLE", "word_similarity_op", "{trgm}.<%"),
    ("word_similar_commutator", "text, text", "STABLE", "word_similarity_commutator_op", "{trgm}.%>"),
)

_LEAKPROOF = """CREATE OR REPLACE FUNCTION {s}.{name}({args}) RETURNS boolean
    LANGUAGE {language} {volatility} STRICT PARALLEL SAFE LEAKPROOF AS {body}"""
_PLAIN = """CREATE OR REPLACE FUNCTION {s}.{name}({args}) RETURNS boolean
    LANGUAGE sql {volatility} PARALLEL SAFE AS {body}"""

#: (operator, arguments, function, commutator, estimators). The array operators estimate with
#: ``contsel``: ``arraycontsel`` knows the stock operators only.
_OPERATORS = (
    ("&&", "text[]", "terms_overlap", "&&", "contsel, JOIN = contjoinsel"),
    ("@>", "text[]", "terms_contain", "<@", "contsel, JOIN = contjoinsel"),
    ("<@", "text[]", "terms_contained", "@>", "contsel, JOIN = contjoinsel"),
    ("<%", "text", "word_similar", "%>", "matchingsel, JOIN = matchingjoinsel"),
    ("%>", "text", "word_similar_commutator", "<%", "matchingsel, JOIN = matchingjoinsel"),
)
_OPERATOR = """CREATE OPERATOR {s}.{op} (FUNCTION = {s}.{function}, LEFTARG = {type},
    RIGHTARG = {type}, COMMUTATOR = OPERATOR({s}.{commutator}), RESTRICT = {estimators})"""

#: The classes: the strategies and support functions of ``array_ops`` (``text`` elements) and of
#: ``gin_trgm_ops`` (``%>`` is strategy 7, word similarity; ``<%`` reaches it as its commutator).
_CLASSES = """
CREATE OPERATOR CLASS {s}.text_array_ops FOR TYPE text[] USING gin AS
    OPERATOR 1 {s}.&& (text[], text[]),
    OPERATOR 2 {s}.@> (text[], text[]),
    OPERATOR 3 {s}.<@ (text[], text[]),
    FUNCTION 2 pg_catalog.ginarrayextract(anyarray, internal, internal),
    FUNCTION 3 pg_catalog.ginqueryarrayextract(anyarray, internal, int2, internal, internal,
                                               internal, internal),
    FUNCTION 4 pg_catalog.ginarrayconsistent(internal, int2, anyarray, int4, internal, internal,
                                             internal, internal),
    FUNCTION 6 pg_catalog.ginarraytriconsistent(internal, int2, anyarray, int4, internal,
                                                internal, internal),
    STORAGE text;
CREATE OPERATOR CLASS {s}.word_trgm_ops FOR TYPE text USING gin AS
    OPERATOR 7 {s}.%> (text, text),
    FUNCTION 1 pg_catalog.btint4cmp(int4, int4),
    FUNCTION 2 {trgm}.gin_extract_value_trgm(text, internal),
    FUNCTION 3 {trgm}.gin_extract_query_trgm(text, internal, int2, internal, internal, internal,
                                             internal),
    FUNCTION 4 {trgm}.gin_trgm_consistent(internal, int2, text, int4, internal, internal,
                                          internal, internal),
    FUNCTION 6 {trgm}.gin_trgm_triconsistent(internal, int2, text, int4, internal, internal,
                                             internal),
    STORAGE int4"""


def create_search_operators(conn: psycopg.Connection[Any], schema: str) -> bool:
    """The schema's search functions, operators and GIN classes (idempotent), and the search
    indexes built with another class dropped, for :func:`create_read_indexes` to build again
    (an existing schema's upgrade). True where they are the LEAKPROOF kind; False, with a
    warning, where the connection is no superuser's (see the module's note)."""
    trgm = _trigram_schema(conn)
    if has_classes(conn, schema):
        _drop_stale_indexes(conn, schema)
        return True
    try:
        with conn.transaction():
            _create_functions(conn, schema, trgm, leakproof=True)
            _create_operators(conn, schema)
            conn.execute(sql.SQL(_CLASSES).format(s=sql.Identifier(schema), trgm=trgm))
            _drop_stale_indexes(conn, schema)
    except psycopg.errors.InsufficientPrivilege:
        with conn.transaction():
            _create_functions(conn, schema, trgm, leakproof=False)
            _create_operators(conn, schema)
        log.warning("not a superuser: the search indexes of schema %s keep the stock operator "
                    "classes, which row-level security does not let drive an index scan; a "
                    "superuser's init-db makes the schema's own (decision 0018)", schema)
        return False
    return True


def has_classes(conn: psycopg.Connection[Any], schema: str) -> bool:
    """Whether ``schema`` holds its own GIN operator classes (made by a superuser)."""
    row = conn.execute(
        "SELECT count(*) FROM pg_opclass c JOIN pg_namespace n ON n.oid = c.opcnamespace "
        "WHERE n.nspname = %s AND c.opcname = ANY(%s)", (schema, list(STOCK_CLASSES))).fetchone()
    return row is not None and row[0] == len(STOCK_CLASSES)


def index_classes(conn: psycopg.Connection[Any], schema: str) -> dict[str, sql.Composable]:
    """The class each search index of ``schema`` is built with, by the name of the schema's own:
    the schema's own where it has them, else the stock ones."""
    if has_classes(conn, schema):
        return {name: sql.Identifier(schema, name) for name in STOCK_CLASSES}
    return {name: sql.SQL(stock) for name, stock in STOCK_CLASSES.items()}


def _trigram_schema(conn: psycopg.Connection[Any]) -> sql.Identifier:
    row = conn.execute("SELECT extnamespace::regnamespace::text FROM pg_extension "
                       "WHERE extname = 'pg_trgm'").fetchone()
    if row is None:
        raise RuntimeError("pg_trgm is not installed in the database")
    return sql.Identifier(row[0].strip('"'))


def _create_functions(conn: psycopg.Connection[Any], schema: str, trgm: sql.Identifier,
                      leakproof: bool) -> None:
    for name, args, volatility, symbol, stock in _FUNCTIONS:
        names = {"s": sql.Identifier(schema), "name": sql.Identifier(name), "args": sql.SQL(args),
                 "volatility": sql.SQL(volatility)}
        if not leakproof:
            operator = stock.format(trgm=trgm.as_string(conn))
            plain = sql.Literal(f"SELECT $1 OPERATOR({operator}) $2")
            conn.execute(sql.SQL(_PLAIN).format(body=plain, **names))
        elif symbol.startswith("array"):
            conn.execute(sql.SQL(_LEAKPROOF).format(language=sql.SQL("internal"),
                                                    body=sql.Literal(symbol), **names))
        else:
            body = sql.SQL("'$libdir/pg_trgm', {}").format(sql.Literal(symbol))
            conn.execute(sql.SQL(_LEAKPROOF).format(language=sql.SQL("c"), body=body, **names))


def _create_operators(conn: psycopg.Connection[Any], schema: str) -> None:
    for op, type_, function, commutator, estimators in _OPERATORS:
        # made, not a shell (what naming a commutator not made yet leaves): CREATE fills a shell
        found = conn.execute("SELECT 1 FROM pg_operator WHERE oid = to_regoperator(%s) "
                             "AND oprcode <> 0", (
            f"{sql.Identifier(schema).as_string(conn)}.{op}({type_},{type_})",)).fetchone()
        if found is not None:
            continue
        conn.execute(sql.SQL(_OPERATOR).format(
            s=sql.Identifier(schema), op=sql.SQL(op), function=sql.Identifier(function),
            type=sql.SQL(type_), commutator=sql.SQL(commutator), estimators=sql.SQL(estimators)))


def _drop_stale_indexes(conn: psycopg.Connection[Any], schema: str) -> None:
    """Drop each search index of ``schema`` built with another class than the schema's own."""
    for index, wanted in SEARCH_INDEXES.items():
        row = conn.execute(
            "SELECT c.opcname, n.nspname FROM pg_index i JOIN pg_opclass c "
            "ON c.oid = i.indclass[0] JOIN pg_namespace n ON n.oid = c.opcnamespace "
            "WHERE i.indexrelid = to_regclass(%s)",
            (f"{sql.Identifier(schema, index).as_string(conn)}",)).fetchone()
        if row is not None and (row[0], row[1]) != (wanted, schema):
            log.info("rebuilding index %s of schema %s with the schema's operator class", index, schema)
            conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(schema, index)))
