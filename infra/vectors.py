"""Vectors over the wire: the ``pgvector`` package's psycopg adapter, in binary (decision 0009).

``pgvector.psycopg.register_vector`` looks four types up (``vector``, ``bit``, ``halfvec``,
``sparsevec``: about 5 ms) every time it is called, and its registration lives on one connection.
Palimpsest's connections come and go (a pool's, one per embedding batch), so :class:`VectorTypes`
looks ``vector`` up once per database and registers the same adapter, the package's
``register_vector_info``, on each connection it is handed — a few microseconds, and nothing when
the connection has it already. Then a float32 ``numpy`` array is sent as pgvector's binary format
(a ``%s`` with no cast) and a ``vector`` column read with ``binary=True`` comes back as a
``pgvector.Vector``: 3.7× the writes and 4.9× the reads of the text casts, measured by
``tests/benchmarks/bench_vectors.py``.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
from pgvector.psycopg.vector import VectorBinaryLoader, register_vector_info
from psycopg.pq import Format
from psycopg.types import TypeInfo


class VectorTypes:
    """pgvector's adapter on any connection, the ``vector`` type looked up once per database."""

    def __init__(self) -> None:
        self._found: dict[tuple[str, int, str], TypeInfo] = {}
        self._lock = threading.Lock()

    def register(self, conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
        """Make ``conn`` send and read vectors through the adapter; returns ``conn``."""
        info = self._info(conn)
        if conn.adapters.get_loader(info.oid, Format.BINARY) is not VectorBinaryLoader:
            register_vector_info(conn, info)
        return conn

    def _info(self, conn: psycopg.Connection[Any]) -> TypeInfo:
        where = (conn.info.host, conn.info.port, conn.info.dbname)
        with self._lock:
            info = self._found.get(where)
        if info is None:
            info = TypeInfo.fetch(conn, "vector")
            if info is None:
                raise psycopg.ProgrammingError("the vector type is not in this database: "
                                               "CREATE EXTENSION vector")
            with self._lock:
                self._found[where] = info
        return info

