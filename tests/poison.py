"""Poison events written straight into the event store, past the command boundary's checks, as a
log written before them holds: the command runs with a marker, and its stored event is rewritten on
its way to the store (a NUL in the text, or a topic nothing can decode)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, is_dataclass, replace
from typing import Any
from uuid import UUID

import pytest
from psycopg import sql
from psycopg.rows import dict_row

import projections.cards as cards_module
from infra.postgres import Database
from services.command.commands import Link, Remember
from tests.support import LOST_TOPIC, new_tenant, state

MARK = "POISON-MARK"
#: Where a handler bug strikes: these values' cards cannot be projected while it is in.
BROKEN = ("Acme", "Redis", "COBOL")


@contextmanager
def stored_as(app: Any, rewrite: Callable[[Any, Callable[[Any], Any]], Any]) -> Iterator[None]:
    """Every event ``app`` stores meanwhile goes through ``rewrite(event, store)``: it may change
    the event before it is mapped (and sealed) by ``store``, or what ``store`` made of it."""
    real = app.mapper.to_stored_event
    app.mapper.to_stored_event = lambda event: rewrite(event, real)
    try:
        yield
    finally:
        del app.mapper.to_stored_event


def marked(event: Any) -> bool:
    """Whether the event carries the marker (as written, or folded to lower case as a tag is)."""
    text = repr(vars(event))
    return MARK in text or MARK.lower() in text


def with_nul(event: Any, store: Callable[[Any], Any]) -> Any:
    """The marker (as written, or folded to lower case) in the event's texts becomes ``A<NUL>B``
    before the event is sealed and stored: the store holds a text no read model can take."""
    if not marked(event):
        return store(event)
    poisoned = object.__new__(type(event))
    object.__setattr__(poisoned, "__dict__", {k: _nul(v) for k, v in vars(event).items()})
    return store(poisoned)


def _nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace(MARK, "A\x00B").replace(MARK.lower(), "a\x00b")
    if isinstance(value, tuple):
        return tuple(_nul(v) for v in value)
    if is_dataclass(value) and not isinstance(value, type):
        return replace(value, **{f.name: _nul(getattr(value, f.name)) for f in fields(value)})
    return value


def undecodable(event: Any, store: Callable[[Any], Any]) -> Any:
    """The event carrying the marker gets a topic no module has: it cannot be decoded."""
    stored = store(event)
    return replace(stored, topic=LOST_TOPIC + "Nowhere.Created") if marked(event) else stored


def handler_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    """The projection raises for the cards in ``BROKEN`` (forked rebuild processes too)."""
    original = cards_module.project

    def broken(event: Any) -> Any:
        card = getattr(event, "card", None)
        if getattr(card, "value", None) in BROKEN or getattr(event, "title", None) in BROKEN:
            raise KeyError("handler bug")
        return original(event)

    monkeypatch.setattr(cards_module, "project", broken)


@dataclass
class World:
    """Tenant ``a`` with a healthy slot, a slot whose first card the handler bug breaks (and a
    later write to it), an undecodable knowledge card and a later healthy event; tenant ``b``
    healthy throughout."""

    a: str
    b: str
    address: UUID  # a's healthy slot
    employer: UUID  # a's slot: v2 (Acme) breaks, v3 (Globex) waits behind it
    gone: UUID  # a's undecodable knowledge card
    last: dict[str, int]  # each tenant's last position


def write_world(app: Any) -> World:
    a, b = new_tenant(), new_tenant()
    address = app.remember(a, state("address", "Taipei"))
    app.remember(b, state("address", "Kyoto"))
    acme = app.remember(a, state("employer", "Acme"))
    with stored_as(app, undecodable):
        gone = app.remember(a, Remember(kind="knowledge", memory_type="note", title="Lost",
                                        content=MARK))
    app.remember(b, Remember(kind="event", memory_type="event", content="met Ming"))
    app.test_clock.advance(days=2)
    app.remember(a, state("employer", "Globex"))
    last_a = app.remember(a, Remember(kind="event", memory_type="event", content="met Hannah"))
    last_b = app.remember(b, state("skills", "Rust"))
    return World(a, b, address.aggregate_id, acme.aggregate_id, gone.card_id,
                 {a: last_a.position, b: last_b.position})


def write_link_to_broken(app: Any, tenant: str) -> tuple[UUID, UUID]:
    """A knowledge card the handler bug breaks (Redis), and another linked to it (Valkey):
    its edge to Redis's missing node is refused, so Valkey waits with Redis."""
    redis = app.remember(tenant, Remember(kind="knowledge", memory_type="note", title="Redis",
                                          content="an in-memory store"))
    valkey = app.remember(tenant, Remember(kind="knowledge", memory_type="note", title="Valkey",
                                           content="a fork of Redis"))
    app.link(tenant, Link(card_id=valkey.card_id, target_id=redis.card_id, edge="related_to"))
    return redis.card_id, valkey.card_id


def failures(db: Database, schema: str, tenant: str, resolved: bool = True
             ) -> list[dict[str, Any]]:
    """A tenant's rows of ``projection_failures`` that a rebuild makes again: the columns that
    do not say when or how often, without the retried ones (history a rebuild does not keep)."""
    with db.connect() as conn, conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(sql.SQL(
            "SELECT tenant_id, notification_id, originator_id, originator_version, topic, status, "
            "reason, error, resolution, resolved_by, resolved_at FROM {}.projection_failures "
            "WHERE tenant_id = %s AND (status <> 'retried' OR NOT %s) ORDER BY notification_id"
        ).format(sql.Identifier(schema)), (tenant, resolved)).fetchall()
