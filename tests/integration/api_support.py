"""What the REST tests share: the services on the session's embedded PostgreSQL, the HTTP app
through FastAPI's TestClient, keys made through the real key store, and a world of cards for one
tenant (a state, an event, a knowledge card, a commitment and a pending arbitration case)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import uuid4

import pytest
from fastapi.testclient import TestClient

from infra.postgres import Database
from infra.settings import Settings
from services.bootstrap import Services, build_services
from services.command.commands import IngestTurn
from services.command.consolidation import Propose
from services.entrypoints.api import create_api

#: Small limits, so the oversized cases are cheap to send.
LIMITS = {"api_max_body_bytes": 64_000, "max_content_chars": 2_000, "max_tags": 8,
          "api_max_wait_seconds": 0.5}


@pytest.fixture(scope="module")
def services(pg_settings: Settings, admin_db: Database) -> Iterator[Services]:
    made = build_services(pg_settings.model_copy(update=LIMITS))
    yield made
    made.close()


@pytest.fixture(scope="module")
def client(services: Services) -> Iterator[TestClient]:
    with TestClient(create_api(services)) as made:
        yield made


def new_tenant() -> str:
    return "t-" + uuid4().hex[:12]


def bearer(services: Services, tenant: str, *scopes: str) -> dict[str, str]:
    """The Authorization header of a new key of ``tenant`` with ``scopes``."""
    _, secret = services.keys.create(tenant, scopes or ("memory:admin",), "test")
    return {"Authorization": f"Bearer {secret}"}


def project(services: Services, admin_db: Database) -> None:
    """What a running projector does: apply the log to the read models."""
    from projections.replay import catch_up, make_projector

    projector = make_projector(services.settings, services.app, admin=admin_db)
    try:
        catch_up(projector, services.app)
    finally:
        projector.close()


def address(value: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "state", "memory_type": "fact", "subject": "user", "label": "address",
            "content": value, **extra}


def ok(response: Any, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


@dataclass
class World:
    tenant: str
    headers: dict[str, str]
    state: dict[str, Any]
    event: dict[str, Any]
    knowledge: dict[str, Any]
    commitment: dict[str, Any]
    queued: dict[str, Any]
    #: An ingested turn whose extraction failed, and a consolidation proposal, both pending.
    dead_letter: dict[str, Any]
    proposal: dict[str, Any]


def make_world(client: TestClient, services: Services, admin_db: Database) -> World:
    """One tenant's cards, written over REST and projected."""
    tenant = new_tenant()
    headers = bearer(services, tenant, "memory:admin")
    now = datetime.now(UTC)

    def remember(body: dict[str, Any]) -> dict[str, Any]:
        return ok(client.post("/v1/memories", json=body, headers=headers))

    state = remember(address("Taipei", valid_from=(now - timedelta(days=3)).isoformat()))
    event = remember({"kind": "event", "memory_type": "event", "content": "Kickoff meeting in Taipei",
                      "occurred_at": (now - timedelta(hours=2)).isoformat()})
    knowledge = remember({"kind": "knowledge", "memory_type": "note", "title": "JWT",
                          "content": "JSON web tokens carry signed claims", "tags": ["jwt"]})
    commitment = remember({"kind": "state", "memory_type": "commitment", "owner": "user",
                           "content": "Send the quarterly report",
                           "due_at": (now + timedelta(days=7)).isoformat()})
    queued = remember(address("Osaka", valid_from=(now - timedelta(days=45)).isoformat()))
    assert queued["outcome"] == "queued", queued
    dead_letter = _dead_letter(services, tenant, now)
    twin = remember({"kind": "knowledge", "memory_type": "note", "title": "JWTs",
                     "content": "JSON web tokens carry signed claims.", "tags": ["jwt"]})
    proposal = services.app.propose(tenant, Propose(
        kind="duplicate", src_id=twin["card_id"], dst_id=knowledge["card_id"], edge="merge",
        rationale="the same concept twice", score=0.97))
    project(services, admin_db)
    return World(tenant, headers, state, event, knowledge, commitment, queued,
                 {"ingestion_id": str(dead_letter)},
                 {"proposal_id": str(proposal.aggregate_id), "twin": twin["card_id"]})


def _dead_letter(services: Services, tenant: str, now: datetime) -> Any:
    turn = services.app.ingest_turn(tenant, IngestTurn(
        session_id="s1", turn_id="1", role="user", text="We talked about the weather", said_at=now,
        timezone="Asia/Taipei"))
    services.app.record_dead_letter(tenant, turn.ingestion_id, "the model timed out", 3)
    return turn.ingestion_id
