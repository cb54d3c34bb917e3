"""The console's sign-in, session cookie and CSRF check, in process (no database: the keys in
memory), and its assets: served by us, each vendored file with its licence."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from fastapi.testclient import TestClient

from infra.settings import Settings
from services.bootstrap import Services
from services.entrypoints.api import create_api
from services.factory import create_app
from services.keys import MemoryKeyStore

CONSOLE = Path(__file__).resolve().parents[2] / "services" / "console"


@pytest.fixture
def services() -> Iterator[Services]:
    settings = Settings(persistence="memory")
    made = Services(settings=settings, app=create_app(settings), queries=None,  # type: ignore[arg-type]
                    keys=MemoryKeyStore(None, lambda: datetime.now(UTC)))
    yield made
    made.app.close()


def client(services: Services, https: bool = False) -> TestClient:
    return TestClient(create_api(services), base_url="https://testserver" if https else
                      "http://testserver", follow_redirects=False)


def form_token(page: Any) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert found, page.text
    return found.group(1)


def signed_in(browser: TestClient, secret: str) -> Any:
    return browser.post("/console/sign-in", data={
        "key": secret, "csrf_token": form_token(browser.get("/console/sign-in"))})


def test_a_live_key_signs_in_with_a_strict_http_only_cookie(services: Services) -> None:
    _, secret = services.keys.create("acme", ("memory:admin",), "alice")
    with client(services, https=True) as browser:
        answer = signed_in(browser, secret)
        assert answer.status_code == 303 and answer.headers["location"].endswith("/console/arbitration")
        cookie = next(c for c in answer.headers.get_list("set-cookie")
                      if c.startswith("palimpsest_console="))
        assert {"HttpOnly", "Secure", "Path=/console", "SameSite=strict"} <= {
            part.strip() for part in cookie.split(";")}
        assert secret not in cookie  # sealed, not only signed


def test_a_wrong_or_revoked_key_cannot_sign_in(services: Services) -> None:
    info, secret = services.keys.create("acme", ("memory:read",), "bob")
    services.keys.revoke(info.key_id)
    with client(services) as browser:
        for key in ("pk_" + "x" * 43, "not a key", "", secret):
            answer = signed_in(browser, key)
            assert answer.status_code == 401, key
            assert "not a live API key" in answer.text
            assert "palimpsest_console=" not in answer.headers.get("set-cookie", "")


def test_the_sign_in_form_needs_its_own_token(services: Services) -> None:
    _, secret = services.keys.create("acme", (), "carol")
    with client(services) as browser:
        browser.get("/console/sign-in")
        answer = browser.post("/console/sign-in", data={"key": secret, "csrf_token": "forged"})
        assert answer.status_code == 403
        assert "palimpsest_console=" not in answer.headers.get("set-cookie", "")


def test_a_post_without_the_session_token_is_refused_before_it_runs(services: Services) -> None:
    _, secret = services.keys.create("acme", ("memory:admin",), "dan")
    with client(services) as browser:
        signed_in(browser, secret)
        target = f"/console/arbitration/{uuid4()}/decision"
        assert browser.post(target, data={"decision": "keep_old"}).status_code == 403
        assert browser.post(target, data={"decision": "keep_old", "csrf_token": "x"}).status_code == 403
        assert browser.post(target, data={"decision": "keep_old"},
                            headers={"X-CSRF-Token": "x"}).status_code == 403
        assert browser.post("/console/sign-out").status_code == 403
        assert browser.post("/console/operations/erasures", data={
            "unit": "subject", "subject": "user", "confirmed": "yes"}).status_code == 403


def test_without_a_live_session_a_page_goes_to_the_sign_in(services: Services) -> None:
    info, secret = services.keys.create("acme", ("memory:read",), "erin")
    with client(services) as browser:
        for path in ("/console", "/console/arbitration", "/console/operations"):
            answer = browser.get(path)
            assert answer.status_code == 303
        assert browser.get("/console/proposals").headers["location"].endswith("/console/sign-in")
        htmx = browser.post(f"/console/arbitration/{uuid4()}/decision", headers={"HX-Request": "true"})
        assert htmx.status_code == 204 and htmx.headers["HX-Redirect"] == "/console/sign-in"
        browser.cookies.set("palimpsest_console", "tampered", path="/console")
        assert browser.get("/console/operations").status_code == 303
        signed_in(browser, secret)
        services.keys.revoke(info.key_id)  # a revoked key's session ends at once
        assert browser.get("/console/operations").headers["location"].endswith("/console/sign-in")


def test_signing_out_ends_the_session_even_if_its_cookie_is_sent_again() -> None:
    """A POST without the CSRF token probes a session: 403 while it lives, 303 to the sign-in
    once it ended (no page is read: no read models here)."""
    from cryptography.fernet import Fernet
    from pydantic import SecretStr

    sealing = Fernet.generate_key()
    settings = Settings(persistence="memory", console_session_key=SecretStr(sealing.decode()))
    services = Services(settings=settings, app=create_app(settings), queries=None,  # type: ignore[arg-type]
                        keys=MemoryKeyStore(None, lambda: datetime.now(UTC)))
    _, secret = services.keys.create("acme", ("memory:read",), "fay")
    try:
        with client(services) as browser, client(services) as elsewhere:
            signed_in(browser, secret)
            signed_in(elsewhere, secret)  # another session of the same key
            cookie = browser.cookies["palimpsest_console"].strip('"')
            csrf = json.loads(Fernet(sealing).decrypt(cookie.encode()))["csrf"]
            assert browser.post("/console/sign-out").status_code == 403  # alive: CSRF refused
            out = browser.post("/console/sign-out", data={"csrf_token": csrf})
            assert out.status_code == 303 and out.headers["location"].endswith("/console/sign-in")
            browser.cookies.set("palimpsest_console", cookie, path="/console")  # replayed
            again = browser.post("/console/sign-out")  # alive, it would be refused (403)
            assert again.status_code == 303 and again.headers["location"].endswith("/sign-in")
            assert elsewhere.post("/console/sign-out").status_code == 403  # that one lives on
    finally:
        services.app.close()


def test_sessions_signed_out_are_forgotten_once_their_seal_expires() -> None:
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    store = MemoryKeyStore(None, lambda: now[0])
    store.end_session("s1", "acme", now[0] + timedelta(hours=12))
    assert store.session_ended("s1", "acme") and not store.session_ended("s1", "other")
    now[0] += timedelta(hours=13)
    store.end_session("s2", "acme", now[0] + timedelta(hours=12))  # a sign-out prunes
    assert not store.session_ended("s1", "acme") and store.session_ended("s2", "acme")


def test_every_asset_is_ours_and_each_vendored_file_keeps_its_licence() -> None:
    texts = [p.read_text(encoding="utf-8") for p in (CONSOLE / "templates").glob("*.html")]
    texts += [p.read_text(encoding="utf-8") for p in (CONSOLE / "static").glob("*.*")
              if p.suffix in (".css", ".js")]
    assert texts
    for text in texts:
        assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)
        assert not re.search(r"""url\(\s*["']?(https?:)?//""", text)
    vendor = CONSOLE / "static" / "vendor"
    listed = (vendor / "README.md").read_text(encoding="utf-8")
    for script in vendor.glob("*.js"):
        name = script.name.removesuffix(".min.js")
        assert (vendor / f"{name}.LICENSE").is_file(), name
        assert f"`{script.name}`" in listed, name


def test_the_operations_page_draws_dead_letters_and_parked_events() -> None:
    """Rendered with one of each (the browser tests meet no parked event: serve parks none)."""
    from types import SimpleNamespace

    from markupsafe import Markup

    from services.command.failures import ParkedEvent, ParkedRequest
    from services.console.web import templates

    now = datetime.now(UTC)
    who = SimpleNamespace(principal=SimpleNamespace(tenant_id="acme", key_id="key_1"), name="ops")
    parked = ParkedEvent(notification_id=42, originator_id=uuid4(), originator_version=2,
                         topic="domain.slot:Slot.Superseded", reason="projection",
                         error="KeyError: handler bug", status="parked", failures=3, since=now,
                         requested="retry")
    asked = ParkedRequest(request_id=uuid4(), notification_id=42, action="retry",
                          requested_by="ops", requested_at=now, status="done",
                          outcome="retried: 2 event(s) applied", done_at=now)
    dead = SimpleNamespace(ingestion_id=uuid4(), session_id="chat-1", turn_id="7", role="user",
                           said_at=now, attempts=3, error="LLM answered 500")
    html = templates.get_template("operations.html").render(
        who=who, nav="operations", csrf="t0ken", csrf_headers="{}", problems=[], done=None,
        csrf_field=lambda: Markup('<input type="hidden" name="csrf_token" value="t0ken">'),
        status=None, turns=None, dead=[dead], parked=[parked], requests=[asked], erasures=[])
    assert f'data-ingestion-id="{dead.ingestion_id}"' in html and 'data-testid="rerun"' in html
    assert 'data-notification-id="42"' in html and "handler bug" in html
    assert 'action="/console/operations/parked/42/retry"' in html
    assert 'data-testid="skip-reason"' in html and html.count('value="t0ken"') >= 4
    assert "retry requested" in html, "the open request is shown on its event"
    assert 'data-testid="parked-request"' in html and "retried: 2 event(s) applied" in html
