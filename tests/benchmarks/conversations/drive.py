"""Driving ``palimpsest serve`` over REST: each conversation's turns handed over as one tenant's,
the wait until every turn is projected and embedded, and each question asked.

Each conversation gets a tenant and a read-write key of its own (``palimpsest keys create``, as an
operator makes them). A turn is ``"Speaker: text"`` (with a shared photo's caption), said at its
session's date (UTC), in the session ``<conversation>/session_<N>``, its turn id the dialog id and
its speaker the person's name; role ``user`` (both speakers are people).
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from palimpsest_client import Client
from psycopg import sql

from infra.postgres import admin_database
from infra.settings import Settings
from tests.benchmarks.conversations.dataset import Conversation, Turn
from tests.benchmarks.conversations.metrics import Answer
from tests.benchmarks.ingest_quality.drive import Code, make_keys

TOP_N = 10
#: A call hands over one session's turns (LoCoMo's sessions hold at most a few dozen).
PER_CALL = 100


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def tenant_of(conversation: Conversation, run: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "-", f"cr{run}-{conversation.id}")[:64]


def turn_of(conversation: Conversation, turn: Turn) -> dict[str, Any]:
    """A turn as ``POST /v1/ingest`` takes it."""
    return {"session_id": f"{conversation.id}/session_{turn.session}", "turn_id": turn.dia_id,
            "role": "user", "speaker": turn.speaker, "text": turn.text,
            "said_at": turn.said_at.isoformat(), "timezone": "UTC"}


@dataclass
class Tenant:
    """A conversation as one tenant: its key, its event cards' dialog ids, its last position."""

    name: str
    key: str
    conversation: Conversation
    dia_of_card: dict[str, str] = field(default_factory=dict)
    position: int = 0
    unmapped: int = 0  # results that were no turn of the conversation


def tenants_for(conversations: list[Conversation], folder: Path, run: str) -> list[Tenant]:
    names = {tenant_of(c, run): c for c in conversations}
    keys = make_keys(Code(), folder, list(names))
    return [Tenant(name, keys[name], conversation) for name, conversation in names.items()]


def ingest(url: str, tenant: Tenant, done_before: int, started: float) -> None:
    """Every turn of the tenant's conversation, in order, one session (at most :data:`PER_CALL`
    turns) per call; each event card's dialog id kept."""
    turns = tenant.conversation.turns
    with Client(url, tenant.key, timeout=120) as api:
        start = 0
        while start < len(turns):
            session = turns[start].session
            end = start
            while end < len(turns) and turns[end].session == session and end - start < PER_CALL:
                end += 1
            answer = api.ingest([turn_of(tenant.conversation, t) for t in turns[start:end]])
            for turn, handed in zip(turns[start:end], answer["turns"], strict=True):
                tenant.dia_of_card[str(handed["event_card_id"])] = turn.dia_id
                tenant.position = max(tenant.position, int(handed.get("position") or 0))
            tenant.position = max(tenant.position, int(answer.get("position") or 0))
            start = end
            done = done_before + end
            progress(f"  {tenant.conversation.id}: {end}/{len(turns)} turns ingested "
                     f"({done / (time.monotonic() - started):.0f} turns/s)")
        if answer["extraction"]["on"]:
            raise SystemExit("extraction is on in the server: the benchmark measures raw turns")


_UNEMBEDDED = sql.SQL(
    "SELECT count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM {s}.card_embeddings e WHERE "
    "e.tenant_id = c.tenant_id AND e.card_id = c.card_id AND e.version >= c.version)), count(*) "
    "FROM {s}.cards c WHERE c.tenant_id = ANY(%s) AND c.erased_at IS NULL")


def settle(url: str, tenants: list[Tenant], folder: Path, timeout: float = 1800.0) -> float:
    """Wait until every tenant's read models hold its last turn (``freshness.stale_by`` 0) and every
    card has the vector of its version; the seconds it took."""
    started = last = time.monotonic()
    for tenant in tenants:
        with Client(url, tenant.key, timeout=120) as api:
            while _stale(api, tenant.position):
                _check(started, timeout, f"{tenant.name} not projected")
    settings = Settings(data_dir=folder / "data", auto_bootstrap=False)
    names = [t.name for t in tenants]
    turns = sum(len(t.conversation.turns) for t in tenants)
    with admin_database(settings).connect(autocommit=True) as conn:
        while True:
            waiting, cards = _unembedded(conn, settings.read_schema, names)
            if cards >= turns and not waiting:
                return time.monotonic() - started
            _check(started, timeout, f"{waiting} of {cards} cards not embedded")
            if time.monotonic() - last >= 10:
                last = time.monotonic()
                progress(f"  embedding: {cards - waiting}/{turns} turns embedded, "
                         f"{last - started:.0f} s")
            time.sleep(0.5)


def _stale(api: Client, position: int) -> int:
    """How far the tenant's read models are behind ``position`` (the read waits, bounded)."""
    freshness = api.ingestions(limit=1, min_position=position).get("freshness") or {}
    return int(freshness.get("stale_by") or 0)


def _unembedded(conn: psycopg.Connection[Any], schema: str, names: list[str]) -> tuple[int, int]:
    row = conn.execute(_UNEMBEDDED.format(s=sql.Identifier(schema)), (names,)).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def _check(started: float, timeout: float, what: str) -> None:
    if time.monotonic() - started > timeout:
        raise SystemExit(f"the read models did not settle within {timeout:.0f} s: {what}")


def dia_ids(tenant: Tenant, results: list[dict[str, Any]]) -> tuple[str, ...]:
    """Each result's dialog id: its event card's, else the turn id its provenance carries."""
    ranked: list[str] = []
    for result in results:
        dia = tenant.dia_of_card.get(str(result.get("card_id")))
        if dia is None:
            dia = (result.get("provenance") or {}).get("turn_id")
        if dia is None:
            tenant.unmapped += 1
        elif dia not in ranked:
            ranked.append(str(dia))
    return tuple(ranked)


def ask(url: str, tenant: Tenant, limit: int | None, asked: list[int]) -> list[Answer]:
    """Every question (the first ``limit``) through ``POST /v1/search``, ``top_n`` 10, timed."""
    answers: list[Answer] = []
    with Client(url, tenant.key, timeout=120) as api:
        for question in tenant.conversation.questions[:limit]:
            started = time.perf_counter()
            found = api.search(question.question, top_n=TOP_N)
            ms = (time.perf_counter() - started) * 1000
            answers.append(Answer(question.category, question.evidence,
                                  dia_ids(tenant, found["results"]), ms))
            asked[0] += 1
            if asked[0] % 50 == 0:
                progress(f"  {asked[0]} questions asked")
    return answers
