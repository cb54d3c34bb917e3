"""An erasure through one HTTP worker reaches the read-your-writes overlay of another (DESIGN §7),
on the embedded PostgreSQL: two HTTP processes' services on one store, as ``serve``'s workers are,
and no projector running. A card written through worker A and erased through worker B — by its
id or by its subject — is not returned by a search through A, while a live card written through
A still is (from A's overlay). A's overlay asks whether its cards' keys are still live only when
the count of key destructions moved since it last asked."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from uuid import UUID, uuid4

import pytest
from fastapi.testclient import TestClient
from psycopg import sql

from infra.keyring import DESTROYED_SEQUENCE
from infra.postgres import Database
from infra.settings import Settings
from infra.tenancy import acting_for
from services.bootstrap import Services, build_services, create_key_store
from services.command.commands import Remember
from services.entrypoints.api import create_api
from services.query.overlay_erasures import ErasedCards
from services.query.pending import PendingWrites, pending_state
from tests.integration.api_support import new_tenant, ok

pytestmark = pytest.mark.integration


class Worker:
    """One HTTP process: its services (the HTTP role) and its REST app."""

    def __init__(self, settings: Settings) -> None:
        with acting_for(None):
            self.services: Services = build_services(settings, http=True)
        self.client = TestClient(create_api(self.services))

    def close(self) -> None:
        self.client.close()
        self.services.close()


@pytest.fixture(scope="module")
def workers(pg_settings: Settings, admin_db: Database) -> Iterator[tuple[Worker, Worker]]:
    made = Worker(pg_settings), Worker(pg_settings)
    yield made
    for worker in made:
        worker.close()


def bearer(settings: Settings, tenant: str) -> dict[str, str]:
    keys = create_key_store(settings.model_copy(update={"auto_bootstrap": False}))
    try:
        _, secret = keys.create(tenant, ("memory:read", "memory:write", "memory:erase"), "overlay")
    finally:
        keys.close()
    return {"Authorization": f"Bearer {secret}"}


def fact(subject: str, label: str, value: str) -> dict[str, Any]:
    return {"kind": "state", "memory_type": "fact", "subject": subject, "label": label,
            "content": value}


def search(worker: Worker, headers: dict[str, str], query: str) -> dict[str, Any]:
    return dict(ok(worker.client.post("/v1/search", json={"query": query}, headers=headers)))


def values(found: dict[str, Any]) -> list[str]:
    return [card["value"] for card in found["results"]]


def test_a_card_erased_through_another_worker_leaves_this_workers_overlay(
        workers: tuple[Worker, Worker], pg_settings: Settings) -> None:
    a, b = workers
    headers = bearer(pg_settings, tenant := new_tenant())
    gone = ok(a.client.post("/v1/memories", json=fact("wren", "home port", "quayside 71 lisbon"),
                            headers=headers))
    ok(a.client.post("/v1/memories", json=fact("wren", "boat", "sloop 72 named heron"),
                     headers=headers))
    question = "what is wren's home port and boat?"
    before = search(a, headers, question)
    assert {"quayside 71 lisbon", "sloop 72 named heron"} <= set(values(before))
    assert before["diagnostics"]["overlaid_writes"] == 2

    ok(b.client.delete(f"/v1/cards/{gone['card_id']}", headers=headers), 202)
    assert len(a.services.pending.of(tenant)) == 1  # B's erasure is known in A at once

    after = search(a, headers, question)
    assert "quayside 71 lisbon" not in values(after)
    kept = [card for card in after["results"] if card["value"] == "sloop 72 named heron"]
    assert kept and kept[0]["source"] == "pending"  # still read from A's overlay
    assert after["diagnostics"]["overlaid_writes"] == 1


def test_a_subject_erased_through_another_worker_leaves_this_workers_overlay(
        workers: tuple[Worker, Worker], pg_settings: Settings) -> None:
    a, b = workers
    headers = bearer(pg_settings, new_tenant())
    ok(a.client.post("/v1/memories", json=fact("alice", "diagnosis", "canary 73 asthma"),
                     headers=headers))
    ok(a.client.post("/v1/memories", json=fact("bob", "diagnosis", "canary 74 hay fever"),
                     headers=headers))
    question = "what diagnosis did alice and bob get?"
    assert {"canary 73 asthma", "canary 74 hay fever"} <= set(values(search(a, headers, question)))

    ok(b.client.post("/v1/erasures", json={"unit": "subject", "subject": "alice"},
                     headers=headers), 202)
    found = values(search(a, headers, question))
    assert "canary 73 asthma" not in found
    assert "canary 74 hay fever" in found


def test_the_keys_are_asked_again_only_once_keys_were_destroyed(
        workers: tuple[Worker, Worker], pg_settings: Settings,
        monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = workers
    tenant = new_tenant()
    headers = bearer(pg_settings, tenant)
    asked: list[set[UUID]] = []
    check: Any = a.services.pending._erasures
    real = check.erased

    def erased(tenant_id: str, card_ids: set[UUID]) -> set[UUID]:
        asked.append(set(card_ids))
        return set(real(tenant_id, card_ids))

    monkeypatch.setattr(check, "erased", erased)
    written = ok(a.client.post("/v1/memories", json=fact("wren", "mooring", "pontoon 75 east"),
                               headers=headers))
    question = "where is wren's mooring?"
    assert "pontoon 75 east" in values(search(a, headers, question))
    assert asked == [{UUID(written["card_id"])}]  # a new entry: asked once
    assert "pontoon 75 east" in values(search(a, headers, question))
    assert len(asked) == 1  # nothing destroyed since: not asked again

    other = bearer(pg_settings, new_tenant())  # any erasure moves the count, another tenant's too
    elsewhere = ok(b.client.post("/v1/memories", json=fact("kite", "colour", "red 76"),
                                 headers=other))
    ok(b.client.delete(f"/v1/cards/{elsewhere['card_id']}", headers=other), 202)
    assert "pontoon 75 east" in values(search(a, headers, question))
    assert asked[1:] == [{UUID(written["card_id"])}]  # the count moved: asked again, still live


def overlay_of(worker: Worker, schema: str) -> PendingWrites:
    """An overlay of ``worker``'s whose destruction count is read in ``schema``'s sequence."""
    keyring = worker.services.app.keyring
    assert keyring is not None
    return PendingWrites(erasures=ErasedCards(keyring, worker.services.queries.read, schema))


def remembered(worker: Worker, tenant: str, overlay: PendingWrites, value: str) -> UUID:
    """Remember ``value`` through ``worker``'s command side, into ``overlay``."""
    command = Remember(kind="state", memory_type="fact", subject="wren", label=f"note {value}",
                       content=value)
    with acting_for(tenant):
        result = worker.services.app.remember(tenant, command)
    overlay.add(tenant, result, pending_state(command, result, worker.services.app.clock()))
    assert result.card_id is not None
    return result.card_id


def test_without_a_destruction_count_every_entry_is_asked_each_time(
        workers: tuple[Worker, Worker], pg_settings: Settings) -> None:
    a, b = workers
    tenant = new_tenant()
    overlay = overlay_of(a, "palimpsest_no_such_schema")  # a store that keeps no count
    gone = remembered(a, tenant, overlay, "gangway 77")
    kept = remembered(a, tenant, overlay, "gangway 78")
    assert [w.candidate.card_id for w in overlay.of(tenant)] == [gone, kept]
    ok(b.client.delete(f"/v1/cards/{gone}", headers=bearer(pg_settings, tenant)), 202)
    assert [w.candidate.card_id for w in overlay.of(tenant)] == [kept]


def test_an_overlay_whose_erasures_cannot_be_checked_is_withheld_not_forgotten(
        workers: tuple[Worker, Worker], admin_db: Database) -> None:
    a, _ = workers
    schema = "overlay_" + uuid4().hex[:8]  # a count the HTTP role may not read
    with admin_db.connect(autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {s}; CREATE SEQUENCE {s}.{q}; GRANT USAGE ON SCHEMA {s} "
                             "TO {role}").format(s=sql.Identifier(schema),
                                                 q=sql.Identifier(DESTROYED_SEQUENCE),
                                                 role=sql.Identifier(a.services.settings.runtime_role)))
    tenant = new_tenant()
    refused = overlay_of(a, schema)
    card = remembered(a, tenant, refused, "gangway 79")
    assert refused.of(tenant) == []  # not shown: whether it was erased is not known
    assert refused.of(tenant) == []
    with admin_db.connect(autocommit=True) as conn:
        conn.execute(sql.SQL("GRANT SELECT ON SEQUENCE {s}.{q} TO {role}").format(
            s=sql.Identifier(schema), q=sql.Identifier(DESTROYED_SEQUENCE),
            role=sql.Identifier(a.services.settings.runtime_role)))
    assert [w.candidate.card_id for w in refused.of(tenant)] == [card]  # kept all along
