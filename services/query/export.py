"""Export (portability, DESIGN §7): every card of a tenant, or of one subject, as JSON lines —
streamed from a server-side cursor a batch at a time, never built in memory.

A line is one card of the read models with both timelines — world time (``valid_from``,
``valid_to``, ``occurred_at``) and system time (``recorded_at``, ``updated_at``,
``retracted_at``, ``verified_at``), and every version of it on both (``versions``: valid and
known ranges; a version's ``known_to`` is when it was replaced) — its kind, type, slot, text,
tags, status, typed edges (either end) and provenance. An erased card is a tombstone: ``erased``
true, ``erased_at``, its ids, kind, times, versions' ranges and edges kept, and no text — no
value, title, tags, subject, label, item key, perspective or owner, whatever a read model still
held.

:func:`cards` yields the lines as dicts and holds one read-model connection (one transaction,
so one consistent snapshot, as the tenant: row-level security) until it is exhausted or closed;
:func:`ndjson` encodes them a batch at a time; :func:`count` says how many a subject has.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterable, Iterator, Mapping
from datetime import datetime
from itertools import islice
from typing import Any
from uuid import UUID

from psycopg import sql

from domain.rules.validation import check_text
from projections.predicates import CURRENT
from services.query.readmodels import KNOWN_BOUNDS, ReadModels

MEDIA_TYPE = "application/x-ndjson"
#: Rows fetched from the server-side cursor at a time, and lines per chunk sent.
BATCH = 500
#: The fields a tombstone never carries (its text), whatever the read model still holds.
PERSONAL = ("subject", "label", "item_key", "perspective", "content", "title", "owner")
#: Each version's text; its ranges, status and retraction stay on a tombstone.
VERSION_TEXT = ("content", "title")

_CARD = ("card_id", "aggregate_id", "kind", "memory_type", "scope", "project_id", "group_id",
         "perspective", "subject", "label", "cardinality", "item_key", "title", "content",
         "status", "owner", "due_at", "valid_from", "valid_to", "occurred_at", "recorded_at",
         "updated_at", "retracted_at", "verified_at", "merged_into", "current", "erased_at")
_PROVENANCE = ("source", "inference_confidence", "agent_id", "session_id", "turn_id")

_SUBJECT = ("(%(subject)s::text IS NULL OR c.subject = %(subject)s "
            "OR (c.subject IS NULL AND c.owner = %(subject)s))")

_ROWS = """SELECT c.card_id, c.aggregate_id, c.kind, c.memory_type, c.scope, c.project_id,
    c.group_id, c.perspective, c.subject, c.label, c.cardinality, c.item_key, c.title, c.content,
    c.tags, c.status, c.owner, c.due_at, c.valid_from, c.valid_to, c.occurred_at, c.recorded_at,
    c.updated_at, c.retracted_at, c.verified_at, c.merged_into, c.erased_at,
    (""" + CURRENT + """) AS current,
    c.source, c.inference_confidence, c.agent_id, c.session_id, c.turn_id,
    coalesce((SELECT jsonb_agg(to_jsonb(h) ORDER BY h.version) FROM (
        SELECT version, content, title, status, lower(valid) AS valid_from,
               upper(valid) AS valid_to, """ + KNOWN_BOUNDS + """, retracted, verified_at, erased_at
        FROM {s}.card_versions v WHERE v.tenant_id = c.tenant_id AND v.card_id = c.card_id) h),
        '[]') AS versions,
    coalesce((SELECT jsonb_agg(jsonb_build_object('edge', r.edge, 'src_id', r.src_id,
                                                  'dst_id', r.dst_id, 'recorded_at', r.recorded_at)
                               ORDER BY r.recorded_at, r.edge, r.src_id, r.dst_id)
              FROM {s}.card_relations r WHERE r.tenant_id = c.tenant_id
                   AND (r.src_id = c.card_id OR r.dst_id = c.card_id)), '[]') AS edges
FROM {s}.cards c WHERE """ + _SUBJECT + """
ORDER BY c.recorded_at, c.card_id LIMIT %(limit)s"""

_COUNT = "SELECT count(*) AS n FROM {s}.cards c WHERE " + _SUBJECT

#: Times in the lines (and inside the versions' JSON) are written in UTC.
_UTC = {"TimeZone": "UTC"}


def cards(read: ReadModels, tenant_id: str, subject: str | None = None, *,
          limit: int | None = None, batch: int = BATCH) -> Generator[dict[str, Any], None, None]:
    """The tenant's cards (``subject``: its slots' cards and the commitments it owns), oldest
    recorded first, at most ``limit``, as export lines; erased ones as tombstones. Holds one
    connection until exhausted or closed."""
    if subject is not None:
        check_text(subject, "subject")
    query = sql.SQL(_ROWS).format(s=read.schema)
    with read.tenant(tenant_id, _UTC) as conn, conn.cursor(name="palimpsest_export") as cursor:
        cursor.itersize = batch
        cursor.execute(query, {"subject": subject, "limit": limit})
        for row in cursor:
            yield line(row)


def count(read: ReadModels, tenant_id: str, subject: str | None = None) -> int:
    """How many cards :func:`cards` would yield with no limit."""
    if subject is not None:
        check_text(subject, "subject")
    with read.tenant(tenant_id) as conn:
        row = conn.execute(sql.SQL(_COUNT).format(s=read.schema), {"subject": subject}).fetchone()
    return int(row["n"]) if row else 0


def ndjson(lines: Iterable[Mapping[str, Any]], batch: int = BATCH) -> Iterator[bytes]:
    """``lines`` as JSON lines, ``batch`` lines a chunk (UTF-8, one object a line)."""
    found = iter(lines)
    while chunk := list(islice(found, batch)):
        yield "".join(encode(each) + "\n" for each in chunk).encode("utf-8")


def encode(line: Mapping[str, Any]) -> str:
    """One line's JSON: ISO 8601 times, ids as strings, text as it is (not escaped to ASCII)."""
    return json.dumps(line, ensure_ascii=False, default=_plain)


def line(row: Mapping[str, Any]) -> dict[str, Any]:
    """A read-model row as an export line: an erased card as a tombstone, with no text."""
    erased = row["erased_at"] is not None
    found = {name: row[name] for name in _CARD}
    found["tags"] = list(row["tags"] or ())
    found["erased"] = erased
    found["versions"] = [_version(v) for v in row["versions"]]
    found["edges"] = list(row["edges"])
    found["provenance"] = {name: row[name] for name in _PROVENANCE}
    return tombstone(found) if erased else found


def _version(version: Mapping[str, Any]) -> dict[str, Any]:
    """A version of a card; one whose text was erased, without it."""
    found = dict(version)
    return {**found, **dict.fromkeys(VERSION_TEXT)} if found.get("erased_at") else found


def tombstone(found: dict[str, Any]) -> dict[str, Any]:
    """``found`` without its text: ids, kind, times, ranges and edges stay."""
    return {**found, **dict.fromkeys(PERSONAL), "tags": [], "erased": True,
            "versions": [{**v, **dict.fromkeys(VERSION_TEXT)} for v in found["versions"]]}


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON")
