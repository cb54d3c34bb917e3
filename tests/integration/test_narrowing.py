"""Narrowing a listing or a search to subjects, a namespace (a subject and those below it, by
whole ``:`` segments), slot labels, agents and sessions — over REST, on the embedded PostgreSQL,
before and after the read models hold the cards (the read-your-writes overlay)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from infra.postgres import Database
from services.bootstrap import Services
from tests.integration.api_support import bearer, client, new_tenant, ok, project, services

__all__ = ["client", "services"]  # the fixtures

pytestmark = pytest.mark.integration


def fact(subject: str, label: str, content: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "state", "memory_type": "fact", "subject": subject, "label": label,
            "content": content, **extra}


CARDS = [
    fact("a", "colour", "teal heron", agent_id="scout", session_id="s1"),
    fact("a:b", "colour", "amber heron", agent_id="scout", session_id="s2"),
    fact("a:b:c", "colour", "violet heron", agent_id="keeper", session_id="s2"),
    fact("ab", "colour", "crimson heron", agent_id="keeper", session_id="s1"),
    fact("ab:b", "shape", "round heron", agent_id="scout", session_id="s1"),
    fact("z", "Shape Name", "square heron"),
]


@pytest.fixture(scope="module")
def world(client: TestClient, services: Services) -> dict[str, str]:
    tenant = new_tenant()
    headers = bearer(services, tenant)
    for card in CARDS:
        ok(client.post("/v1/memories", json=card, headers=headers))
    return headers


def values(page: dict[str, Any], key: str = "cards", field: str = "content") -> set[str]:
    return {card[field] for card in page[key]}


def test_a_namespace_holds_its_own_subject_and_those_below_it_by_whole_segments(
        client: TestClient, services: Services, admin_db: Database, world: dict[str, str]) -> None:
    # searched before the read models hold the cards: the overlay narrows alike
    early = ok(client.post("/v1/search", json={"query": "heron colour", "subject_prefix": "a"},
                           headers=world))
    assert {c["value"] for c in early["results"]} == {"teal heron", "amber heron", "violet heron"}
    project(services, admin_db)
    listed = ok(client.get("/v1/cards", params={"subject_prefix": "a"}, headers=world))
    assert values(listed) == {"teal heron", "amber heron", "violet heron"}
    below = ok(client.get("/v1/cards", params={"subject_prefix": "a:b"}, headers=world))
    assert values(below) == {"amber heron", "violet heron"}
    found = ok(client.post("/v1/search", json={"query": "heron", "subject_prefix": "a"},
                           headers=world))
    assert {c["value"] for c in found["results"]} == {"teal heron", "amber heron", "violet heron"}
    assert {c["subject"] for c in found["results"]} == {"a", "a:b", "a:b:c"}


def test_subjects_labels_agents_and_sessions_narrow_a_listing_and_a_search(
        client: TestClient, services: Services, admin_db: Database, world: dict[str, str]) -> None:
    project(services, admin_db)
    exact = ok(client.get("/v1/cards", params={"subjects": ["a", "ab"]}, headers=world))
    assert values(exact) == {"teal heron", "crimson heron"}
    # a label is matched normalised, as the write stored it
    labelled = ok(client.get("/v1/cards", params={"labels": ["shape name"]}, headers=world))
    assert values(labelled) == {"square heron"}
    by_agent = ok(client.post("/v1/search", json={"query": "heron", "agent_ids": ["keeper"]},
                              headers=world))
    assert {c["value"] for c in by_agent["results"]} == {"violet heron", "crimson heron"}
    in_session = ok(client.post("/v1/search", json={
        "query": "heron", "session_ids": ["s1"], "subject_prefix": "ab"}, headers=world))
    assert {c["value"] for c in in_session["results"]} == {"crimson heron", "round heron"}


def test_counts_group_by_subject_and_label(client: TestClient, services: Services,
                                           admin_db: Database, world: dict[str, str]) -> None:
    project(services, admin_db)
    counted = ok(client.get("/v1/cards/count", params={"group_by": "subject",
                                                       "subject_prefix": "ab"}, headers=world))
    assert {g["key"]: g["count"] for g in counted["counts"]} == {"ab": 1, "ab:b": 1}
    labels = ok(client.get("/v1/cards/count", params={"group_by": "label"}, headers=world))
    assert {g["key"]: g["count"] for g in labels["counts"]} == {
        "colour": 4, "shape": 1, "shape_name": 1}


def test_another_tenant_sees_nothing_of_a_namespace(client: TestClient, services: Services,
                                                     admin_db: Database,
                                                     world: dict[str, str]) -> None:
    project(services, admin_db)
    other = bearer(services, new_tenant())
    assert ok(client.get("/v1/cards", params={"subject_prefix": "a"}, headers=other))["cards"] == []
    found = ok(client.post("/v1/search", json={"query": "heron", "subject_prefix": "a"},
                           headers=other))
    assert found["results"] == []


@pytest.mark.parametrize("body", [{"subject_prefix": ""}, {"subject_prefix": "a\x00"},
                                  {"subjects": ["a\x00"]}])
def test_a_bad_narrowing_is_refused_naming_the_field(client: TestClient, services: Services,
                                                     body: dict[str, Any]) -> None:
    headers = bearer(services, new_tenant())
    response = client.post("/v1/search", json={"query": "heron", **body}, headers=headers)
    assert response.status_code in (400, 422), response.text
    assert next(iter(body)) in response.text
