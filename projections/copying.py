"""A rebuild's rows copied into its fresh schema with COPY: the many rows the fold makes in
PostgreSQL's binary format, the few others as text.

Binary: each value goes as the server stores it — a time as microseconds, a uuid as its 16 bytes,
an array or a range as its parts — so this process writes no text literal for it and the server
parses none (times, uuids, arrays and ranges are the costly ones to parse); psycopg's C dumpers
write most of them. The types are the target columns' own, read once from the catalog, so every
value is dumped as its column takes it (a ``real`` as four bytes, as the server casts a
parameter). That asks each value to be of its column's Python type, as the fold makes the rows of
:data:`BINARY`; the records, cases, erasures and failures carry some values as their events hold
them (an ingested turn's card ids are texts) and go as text, which the server casts as it casts
the incremental projector's parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from psycopg import sql

from projections.fold import Table
from projections.sinks import ARRAYS, array_literal, range_literal

#: Tables as ``MemorySink.rows`` gives them: name → (columns, rows).
Tables = dict[str, Table]
#: The tables copied in binary: nearly every row a rebuild copies.
BINARY = frozenset({"nodes", "slots", "cards", "card_versions", "card_relations",
                    "projection_tracking", "projection_position"})

_TYPES = """SELECT c.relname, a.attname, a.atttypid::int FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped"""


def column_types(cur: Any, schema: str) -> dict[str, dict[str, int]]:
    """Each table's columns in ``schema`` and their type oids."""
    types: dict[str, dict[str, int]] = {}
    for table, column, oid in cur.execute(_TYPES, (schema,)).fetchall():
        types.setdefault(table, {})[column] = oid
    return types


def copy_tables(cur: Any, schema: str, tables: Tables) -> dict[str, int]:
    """Each table's rows copied into ``schema`` (binary for :data:`BINARY`, else text); the
    number copied per table."""
    types = column_types(cur, schema)
    counts: dict[str, int] = {}
    for table, (columns, rows) in tables.items():
        binary = table in BINARY
        statement = sql.SQL("COPY {}.{} ({}) FROM STDIN{}").format(
            sql.Identifier(schema), sql.Identifier(table),
            sql.SQL(", ").join(map(sql.Identifier, columns)),
            sql.SQL(" (FORMAT BINARY)" if binary else ""))
        with cur.copy(statement) as copy:
            if binary:
                copy.set_types([types[table][column] for column in columns])
                for row in rows:
                    copy.write_row(row)
            else:
                _write_text(copy, columns, rows)
        counts[table] = len(rows)
    return counts


#: Columns written as literals of their own in a text copy (psycopg would dump them element by
#: element).
_LITERALS: dict[str, Callable[[Any], str | None]] = {
    **dict.fromkeys(ARRAYS, array_literal), "valid": range_literal, "known": range_literal,
}


def _write_text(copy: Any, columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
    literal = [(i, _LITERALS[c]) for i, c in enumerate(columns) if c in _LITERALS]
    for row in rows:
        values = list(row)
        for i, to_literal in literal:
            values[i] = to_literal(values[i])
        copy.write_row(values)
