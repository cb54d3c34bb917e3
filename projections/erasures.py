"""What the projector does once an erasure is in the read models (DESIGN §7, decision 0012).

The erasure's own operations (:class:`~projections.ops.Forget`) run inside the batch's
transaction, like every event's. Two things follow the commit, best effort (a failure is logged,
never raised into the projection):

- the key ring forgets the destroyed keys it cached, so that nothing this process decodes from
  now on opens with them (the command side destroyed them; this process may have cached them for
  a few seconds);
- the tables an erasure rewrites are vacuumed, so that the dead tuples still holding the
  forgotten texts go now rather than at autovacuum's pace. VACUUM cannot run in a transaction: it
  runs on a connection of its own, as the projector role, which may vacuum the read models
  (``MAINTAIN``) and the embedding cache; a table it may not vacuum is skipped with a warning.

What still lingers — WAL until recycled, backups, a broker's retention — is said in decision 0012.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from infra.redact import described
from projections.schema import ERASED_TABLES

log = logging.getLogger(__name__)


def vacuum_statement(schema: str, cache_schema: str | None) -> sql.Composed:
    """``VACUUM`` of the tables an erasure rewrites in ``schema`` (and the embedding cache)."""
    from infra.embedders import CACHE_TABLE

    tables = [sql.Identifier(schema, table) for table in ERASED_TABLES]
    if cache_schema is not None:
        tables.append(sql.Identifier(cache_schema, CACHE_TABLE))
    return sql.SQL("VACUUM (SKIP_LOCKED) {}").format(sql.SQL(", ").join(tables))


def follow_erasures(connect: Callable[..., psycopg.Connection[Any]], schema: str,
                    cache_schema: str | None, keyring: Any = None
                    ) -> Callable[[list[Any]], None]:
    """What a projector does after a batch that applied erasures (``Erasure.Erased`` events):
    ``keyring`` (if any) forgets their keys, and the touched tables are vacuumed over a connection
    from ``connect``."""
    statement = vacuum_statement(schema, cache_schema)

    def follow(erasures: list[Any]) -> None:
        if keyring is not None:
            keyring.forget_cached(key for erasure in erasures for key in erasure.key_ids)
        try:
            with connect(autocommit=True) as conn:
                conn.execute(statement)
        except psycopg.Error as error:
            log.warning("after %d erasure(s), the vacuum of the touched tables failed (%s): the "
                        "dead tuples go at autovacuum's pace", len(erasures), described(error))

    return follow
