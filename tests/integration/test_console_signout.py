"""A console sign-out ends the session on the server, on the embedded PostgreSQL: the cookie sent
again is refused, by another app on the same database too (another HTTP worker); the session's id
is recorded with its tenant and its expiry, and a later sign-out prunes what expired."""

from __future__ import annotations

import re
from contextlib import closing
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient
from psycopg import sql

from infra.postgres import SESSIONS_ENDED_TABLE, Database
from services.bootstrap import Services, create_key_store
from services.console import web
from services.entrypoints.api import create_api
from tests.integration.api_support import new_tenant, services

__all__ = ["services"]  # the fixture

pytestmark = pytest.mark.integration


def _token(page: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert found, page[:500]
    return found.group(1)


def _rows(admin_db: Database, schema: str, tenant: str) -> list[tuple[str, datetime]]:
    query = sql.SQL("SELECT session_id, expires_at FROM {} WHERE tenant_id = %s").format(
        sql.Identifier(schema, SESSIONS_ENDED_TABLE))
    with admin_db.connect() as conn:
        return [(row[0], row[1]) for row in conn.execute(query, (tenant,)).fetchall()]


def test_a_signed_out_session_is_refused_everywhere_and_recorded_with_its_tenant(
        services: Services, admin_db: Database) -> None:
    tenant = new_tenant()
    _, secret = services.keys.create(tenant, ("memory:read",), "signing out")
    sealing = Fernet.generate_key()  # what serve hands every worker
    app = create_api(services)
    app.state.console_sessions = web.Sessions(services, secret=sealing)
    own_keys = create_key_store(services.settings)  # another worker's store: only the database shared
    other = create_api(replace(services, keys=own_keys))
    other.state.console_sessions = web.Sessions(replace(services, keys=own_keys), secret=sealing)
    with closing(own_keys), TestClient(app, follow_redirects=False) as browser, \
            TestClient(other, follow_redirects=False) as elsewhere:
        form = browser.get("/console/sign-in")
        browser.post("/console/sign-in", data={"key": secret, "csrf_token": _token(form.text)})
        cookie = browser.cookies["palimpsest_console"].strip('"')
        page = browser.get("/console/operations")
        assert page.status_code == 200
        elsewhere.cookies.set("palimpsest_console", cookie, path="/console")
        assert elsewhere.get("/console/operations").status_code == 200
        signed_out = browser.post("/console/sign-out", data={"csrf_token": _token(page.text)})
        assert signed_out.headers["location"].endswith("/console/sign-in")
        browser.cookies.set("palimpsest_console", cookie, path="/console")  # replayed
        for each in (browser, elsewhere):
            refused = each.get("/console/operations")
            assert refused.status_code == 303 and refused.headers["location"].endswith("/sign-in")
    (session, expires), = _rows(admin_db, services.settings.event_schema, tenant)
    assert session and timedelta(hours=11) < expires - datetime.now(UTC) <= timedelta(
        seconds=web.SESSION_SECONDS)


def test_a_sign_out_prunes_the_sessions_whose_seal_expired(services: Services,
                                                          admin_db: Database) -> None:
    tenant, schema = new_tenant(), services.settings.event_schema
    long_ago = datetime.now(UTC) - timedelta(hours=1)
    services.keys.end_session("expired-session", tenant, long_ago)
    assert services.keys.session_ended("expired-session", tenant)
    assert not services.keys.session_ended("expired-session", new_tenant())  # by tenant
    services.keys.end_session("live-session", tenant, datetime.now(UTC) + timedelta(hours=1))
    assert [row[0] for row in _rows(admin_db, schema, tenant)] == ["live-session"]
