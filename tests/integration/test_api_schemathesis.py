"""A schemathesis run over the OpenAPI document: whatever it sends, with a real key of a tenant
that holds cards, no request is answered with a 5xx."""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error

from infra.postgres import Database
from services.bootstrap import Services
from services.entrypoints.api import create_api
from tests.integration.api_support import bearer, client, make_world, services

__all__ = ["client", "services"]  # the fixtures


@pytest.fixture(scope="module")
def app(services: Services) -> FastAPI:
    return create_api(services)


@pytest.fixture(scope="module")
def headers(client: Any, services: Services, admin_db: Database) -> dict[str, str]:
    world = make_world(client, services, admin_db)  # something for the reads to find
    return bearer(services, world.tenant, "memory:admin")


def test_no_request_is_answered_with_a_server_error(app: FastAPI, headers: dict[str, str]) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    failed: dict[str, str] = {}
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=5, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
        def calls(case: Any) -> None:
            case.call_and_validate(headers=headers, checks=[not_a_server_error])

        try:
            calls()
        except Exception as error:  # every operation is run; the failures are listed together
            failed[operation.label] = f"{type(error).__name__}: {error}"[:2_000]
    assert failed == {}
